// libFuzzer target: the safetensors reader on arbitrary bytes. Every tensor a valid-looking header describes is
// read and converted, so a check that lets an offset, size or dtype through would surface as a sanitizer report.
#include <ATen/ATen.h>

#include "fitsum/io/safetensors.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fitsum::fuzz::expect_only_documented_errors([&] {
    fitsum::io::SafetensorsReader reader(data, size, "fuzz.safetensors");
    for (const auto& entry : reader.entries()) {
      const at::Tensor stored = reader.read(entry.name);
      if (at::isFloatingType(stored.scalar_type())) (void)reader.read(entry.name, at::kFloat).sum();
    }
  });
  return 0;
}
