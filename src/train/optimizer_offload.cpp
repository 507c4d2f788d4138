// Implements include/fitsum/train/optimizer_offload.h. The CUDA pieces (pinned buffers, the side stream and its
// events) are compiled only against a CUDA LibTorch (FITSUM_WITH_CUDA); elsewhere the copies are plain copy_().
#include "fitsum/train/optimizer_offload.h"

#include <stdexcept>

#include <torch/torch.h>

#include "fitsum/memory/device_memory.h"
#include "fitsum/memory/planner.h"
#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/train/training_job.h"
#include "fitsum/util/bytes.h"

#ifdef FITSUM_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace fitsum::train {

#ifdef FITSUM_WITH_CUDA
struct OptimizerOffload::CudaStreams {
  c10::cuda::CUDAStream side;
};
#else
struct OptimizerOffload::CudaStreams {};
#endif

namespace {

std::uint64_t tensor_bytes(const torch::Tensor& t) {
  return static_cast<std::uint64_t>(t.numel()) * static_cast<std::uint64_t>(t.element_size());
}

}  // namespace

std::uint64_t OptimizerOffload::optimizer_state_bytes(const optim::NamedTensors& parameters,
                                                      optim::OptimizerType optimizer) {
  std::uint64_t bytes = 0;
  for (const auto& [name, p] : parameters) {
    const auto n = static_cast<std::uint64_t>(p.numel());
    if (optimizer == optim::OptimizerType::adamw_torch) {
      bytes += 2 * n * 4;
    } else if (p.dim() >= 2 && n > 0) {  // HF Adafactor's factored moment: the row and the column means
      bytes += 4 * (n / static_cast<std::uint64_t>(p.size(-1)) + n / static_cast<std::uint64_t>(p.size(-2)));
    } else {
      bytes += 4 * n;
    }
  }
  return bytes;
}

OptimizerOffload::OptimizerOffload(const optim::NamedTensors& device_parameters, const c10::Device& device,
                                   optim::OptimizerType optimizer, std::uint64_t host_budget)
    : device_(device), device_parameters_(device_parameters) {
  optimizer_state_bytes_ = optimizer_state_bytes(device_parameters, optimizer);
  std::uint64_t copies = 0;
  for (const auto& [name, p] : device_parameters) copies += 2 * tensor_bytes(p);  // weight and gradient buffer
  if (host_budget > 0 && copies + optimizer_state_bytes_ > host_budget) {
    throw std::invalid_argument("offload_optimizer cpu needs " + util::format_bytes(copies + optimizer_state_bytes_) +
                                " of host memory (weights and gradients " + util::format_bytes(copies) +
                                ", optimizer state " + util::format_bytes(optimizer_state_bytes_) +
                                ") and max_host_memory is " + util::format_bytes(host_budget) +
                                "; raise --max_host_memory, or train without --offload_optimizer");
  }
#ifdef FITSUM_WITH_CUDA
  if (device_.is_cuda())
    cuda_ = std::make_unique<CudaStreams>(CudaStreams{c10::cuda::getStreamFromPool(false, device_.index())});
#endif
  memory::HostMemoryScope host;
  torch::NoGradGuard no_grad;
  host_options_ = torch::TensorOptions().device(torch::kCPU).dtype(torch::kFloat);
#ifdef FITSUM_WITH_CUDA
  // Copied without a staging buffer, asynchronously.
  if (device_.is_cuda()) host_options_ = host_options_.pinned_memory(true);
#endif
  for (const auto& [name, p] : device_parameters) {
    TORCH_CHECK(p.scalar_type() == torch::kFloat, "offload_optimizer: parameter '", name, "' is not float32");
    auto copy = torch::empty(p.sizes(), host_options_);
    copy.copy_(p);
    host_.emplace_back(name, copy);
    host_list_.push_back(copy);
  }
}

OptimizerOffload::~OptimizerOffload() = default;

std::uint64_t OptimizerOffload::host_bytes() const {
  std::uint64_t copies = 0;
  for (const auto& [name, p] : host_) copies += 2 * tensor_bytes(p);
  return copies + optimizer_state_bytes_;
}

std::int64_t OptimizerOffload::peak_host_bytes() {
  if (!device_.is_cpu()) return static_cast<std::int64_t>(host_bytes());
  auto& tracker = memory::TrackingCpuAllocator::instance();
  const auto peak = tracker.host_peak_bytes();
  tracker.reset_host_peak();
  return peak;
}

void OptimizerOffload::pull_weights() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < host_.size(); ++i) host_[i].second.copy_(device_parameters_[i].second);
}

void OptimizerOffload::zero_device_gradients() {
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : device_parameters_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

void OptimizerOffload::copy_gradients_out() {
  torch::NoGradGuard no_grad;
  {
    memory::HostMemoryScope host;  // a gradient buffer is made the first time its parameter has a gradient
    for (std::size_t i = 0; i < host_.size(); ++i) {
      const auto& grad = device_parameters_[i].second.grad();
      auto& buffer = host_[i].second.mutable_grad();
      if (!grad.defined()) {
        buffer = torch::Tensor();  // no gradient on the device: none on the host, and the update skips it alike
      } else if (!buffer.defined()) {
        buffer = torch::empty(host_[i].second.sizes(), host_options_);
      }
    }
  }
#ifdef FITSUM_WITH_CUDA
  if (cuda_) {
    // The side stream starts once the backward's kernels have run; each copy is enqueued as soon as it may.
    at::cuda::CUDAEvent backward_done;
    backward_done.record(c10::cuda::getCurrentCUDAStream(device_.index()));
    backward_done.block(cuda_->side);
    {
      c10::cuda::CUDAStreamGuard guard(cuda_->side);
      for (std::size_t i = 0; i < host_.size(); ++i) {
        const auto& grad = device_parameters_[i].second.grad();
        if (grad.defined()) host_[i].second.mutable_grad().copy_(grad, /*non_blocking=*/true);
      }
    }
    cuda_->side.synchronize();  // the host reads the buffers next
    return;
  }
#endif
  for (std::size_t i = 0; i < host_.size(); ++i) {
    const auto& grad = device_parameters_[i].second.grad();
    if (grad.defined()) host_[i].second.mutable_grad().copy_(grad);
  }
}

void OptimizerOffload::copy_weights_back() {
  torch::NoGradGuard no_grad;
#ifdef FITSUM_WITH_CUDA
  if (cuda_) {
    // The host writes these pinned buffers again only after the next step's gradient copies, which the side stream
    // runs after these; the compute stream waits for them before the next forward reads a weight.
    {
      c10::cuda::CUDAStreamGuard guard(cuda_->side);
      for (std::size_t i = 0; i < host_.size(); ++i) {
        device_parameters_[i].second.copy_(host_[i].second, /*non_blocking=*/true);
      }
    }
    at::cuda::CUDAEvent copied;
    copied.record(cuda_->side);
    copied.block(c10::cuda::getCurrentCUDAStream(device_.index()));
    return;
  }
#endif
  for (std::size_t i = 0; i < host_.size(); ++i) device_parameters_[i].second.copy_(host_[i].second);
}

torch::Tensor OptimizerOffload::step(torch::optim::Optimizer& host_optimizer, const optim::UpdateOptions& options) {
  copy_gradients_out();
  zero_device_gradients();
  torch::Tensor norm;
  {
    memory::HostMemoryScope host;  // the state made on the first step and the update's temporaries
    norm = optim::optimizer_step(host_optimizer, host_list_, options);
  }
  copy_weights_back();
  return norm.to(device_);  // beside the step's other statistics
}

std::unique_ptr<OptimizerOffload> make_optimizer_offload(const TrainingArguments& args,
                                                         const optim::NamedTensors& parameters,
                                                         const c10::Device& device) {
  if (!args.offloads_optimizer()) return nullptr;
  memory::start_tracking(device);  // the host copies are counted from the first
  const auto budget = args.max_host_memory > 0 ? args.max_host_memory : memory::available_memory(torch::kCPU);
  return std::make_unique<OptimizerOffload>(parameters, device, args.optimizer(), budget);
}

void add_offload_request(const TrainingArguments& args, memory::FitRequest& request) {
  request.offload = !args.offload_optimizer     ? memory::OffloadPolicy::free
                    : args.offloads_optimizer() ? memory::OffloadPolicy::cpu
                                                : memory::OffloadPolicy::none;
  request.host_budget = args.max_host_memory;
}

}  // namespace fitsum::train
