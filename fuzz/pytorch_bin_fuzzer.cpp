// libFuzzer target: the pytorch_model.bin reader (zip directory, restricted unpickler, storage checks) on arbitrary
// bytes. Every tensor that passes the checks is read, so one that reached outside its record would be reported.
#include <ATen/ATen.h>

#include "fitsum/io/pytorch_bin.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fitsum::fuzz::expect_only_documented_errors([&] {
    fitsum::io::PytorchBinReader reader(data, size, "fuzz.bin");
    for (const auto& tensor : reader.tensors()) {
      const at::Tensor value = reader.read(tensor.name);
      if (at::isFloatingType(value.scalar_type())) (void)reader.read(tensor.name, at::kFloat).sum();
    }
  });
  return 0;
}
