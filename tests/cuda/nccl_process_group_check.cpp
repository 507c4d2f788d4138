// Proves that the c10d NCCL process group of a CUDA LibTorch compiles and links (built by CMake only against a
// CUDA LibTorch with the NCCL it loads; see scripts/torch2.sh). NCCL itself answers its version on any machine.
// With a CUDA device it also runs an all-reduce on one rank and checks the sum; without one it says so and passes:
// distributed training needs nothing more from the build than this.
#include <cstdio>
#include <filesystem>
#include <string>

#include <nccl.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

int main() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) {
    std::fprintf(stderr, "nccl check: ncclGetVersion failed\n");
    return 1;
  }
  std::printf("nccl check: NCCL %d.%d.%d linked; c10d::ProcessGroupNCCL compiled against LibTorch %s\n",
              version / 10000, (version / 100) % 100, version % 100, TORCH_VERSION);
  if (!torch::cuda::is_available()) {
    std::printf("nccl check: no CUDA device here, the all-reduce is not run\n");
    return 0;
  }
  const auto path = std::filesystem::temp_directory_path() / ("fitsum-nccl-check-" + std::to_string(::getpid()));
  auto store = c10::make_intrusive<c10d::FileStore>(path.string(), 1);
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, /*rank=*/0, /*size=*/1);
  std::vector<at::Tensor> tensors{torch::full({4}, 3.0, torch::TensorOptions().device(torch::kCUDA))};
  group->allreduce(tensors)->wait();
  const double sum = tensors[0].sum().item<double>();
  // Without an explicit shutdown the group's watchdog thread keeps the process from exiting (what
  // torch.distributed.destroy_process_group() does in Python); seen on an H200 with LibTorch 2.11.
  group->shutdown();
  group.reset();
  std::filesystem::remove(path);
  std::printf("nccl check: all-reduce on 1 rank: sum %.1f (expected 12.0)\n", sum);
  return sum == 12.0 ? 0 : 1;
}
