// Implements the data-parallel part of include/fitsum/train/trainer.h: the share of each optimizer step a process
// trains on, and the sums over the processes (train/distributed.h) that make the step equal to one process's.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <torch/torch.h>

#include "fitsum/optim/optimizer_step.h"
#include "fitsum/optim/sharding.h"
#include "fitsum/train/distributed.h"
#include "fitsum/train/gradient_reducer.h"
#include "fitsum/train/optimizer_offload.h"
#include "fitsum/train/trainer.h"
#include "fitsum/util/device_reads.h"
#include "fitsum/util/random_state.h"

namespace fitsum::train {

namespace {

// What every process must agree on for the job to train one model: a process started with other arguments or
// data, or a memory plan that chose another micro-batch or optimizer, would otherwise train something else in
// silence (or wait forever at a collective the others never reach).
// The frozen parameters (a LoRA run's base, --freeze_embeds' embedding) stay where each process read them from;
// they must be the same everywhere. Their absolute sum in double precision, chunk by chunk (no copy of a whole
// tensor), tells a different base apart; it has no cancellation to make it noise.
double frozen_fingerprint(const torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  constexpr std::int64_t kChunk = 1 << 20;
  double sum = 0.0;
  for (const auto& p : model.parameters()) {
    if (p.requires_grad() || !p.is_floating_point()) continue;
    const auto flat = p.detach().reshape(-1);
    for (std::int64_t start = 0; start < flat.numel(); start += kChunk) {
      sum += flat.narrow(0, start, std::min(kChunk, flat.numel() - start)).abs().sum(torch::kDouble).item<double>();
    }
  }
  return sum;
}

std::int64_t trainable_elements(const torch::nn::Module& model) {
  std::int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.requires_grad() ? p.numel() : 0;
  return n;
}

void check_processes_agree(ProcessGroup& group, const TrainingArguments& args, const TrainerInputs& in) {
  const std::vector<std::pair<const char*, double>> fields = {
      {"lora_r", static_cast<double>(args.lora.r)},
      {"lora_alpha", args.lora.lora_alpha},
      {"trainable parameters", static_cast<double>(trainable_elements(*in.model))},
      {"frozen weights' absolute sum", frozen_fingerprint(*in.model)},
      {"per_device_train_batch_size", static_cast<double>(args.per_device_train_batch_size)},
      {"gradient_accumulation_steps", static_cast<double>(args.gradient_accumulation_steps)},
      {"optim", static_cast<double>(static_cast<int>(args.optimizer()))},
      {"learning_rate", args.learning_rate},
      {"max_steps", static_cast<double>(args.max_steps)},
      {"num_train_epochs", args.num_train_epochs},
      {"seed", static_cast<double>(args.seed)},
      {"data_seed", static_cast<double>(args.data_seed.value_or(args.seed))},
      {"bf16", args.bf16 ? 1.0 : 0.0},
      {"zero_stage", static_cast<double>(args.zero_stage)},
      {"ddp_bucket_cap_mb", args.ddp_bucket_cap_mb},
      {"per_device_eval_batch_size", static_cast<double>(args.per_device_eval_batch_size)},
      {"predict_with_generate", args.predict_with_generate ? 1.0 : 0.0},
      {"training examples", static_cast<double>(in.train_examples.size())},
      {"evaluation examples", static_cast<double>(in.eval_examples.size())},
      {"test examples", static_cast<double>(in.test_examples.size())},
  };
  // Equal everywhere exactly when the sum is size x value and the sum of squares size x value^2.
  auto sums = torch::zeros({static_cast<std::int64_t>(2 * fields.size())}, torch::kDouble);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    sums[static_cast<std::int64_t>(2 * i)] = fields[i].second;
    sums[static_cast<std::int64_t>(2 * i + 1)] = fields[i].second * fields[i].second;
  }
  group.all_reduce_sum(sums);
  const double n = static_cast<double>(group.size());
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const double v = fields[i].second;
    const double sum = sums[static_cast<std::int64_t>(2 * i)].item<double>();
    const double squares = sums[static_cast<std::int64_t>(2 * i + 1)].item<double>();
    const double scale = std::max(1.0, v * v * n);
    if (std::abs(sum - n * v) > 1e-9 * std::max(1.0, std::abs(n * v)) || std::abs(squares - n * v * v) > 1e-9 * scale) {
      std::ostringstream value;
      value << v;
      throw std::invalid_argument(std::string("the processes disagree on ") + fields[i].first + " (" + value.str() +
                                  " on rank " + std::to_string(group.rank()) +
                                  "): every process must run with the same arguments and data; with --max_memory, "
                                  "give the memory plan's flags explicitly");
    }
  }
}

// examples[begin, end) in consecutive micro-batches of `size` examples (the last one may be shorter).
std::vector<std::vector<std::size_t>> in_micro_batches(const std::vector<std::size_t>& examples, std::size_t begin,
                                                       std::size_t end, std::size_t size) {
  std::vector<std::vector<std::size_t>> out;
  for (auto i = begin; i < end; i += size) {
    out.emplace_back(examples.begin() + static_cast<std::ptrdiff_t>(i),
                     examples.begin() + static_cast<std::ptrdiff_t>(std::min(end, i + size)));
  }
  return out;
}

}  // namespace

// A sum where the others contribute 0. Frozen parameters (a LoRA run's whole base) do not travel: every process
// holds them from the same files, as check_processes_agree verified.
void Trainer::share_rank_zero_weights() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> shared = in_.model->buffers();
  for (const auto& p : in_.model->parameters()) {
    if (p.requires_grad()) shared.push_back(p);
  }
  for (auto& t : shared) {
    if (!t.is_floating_point()) continue;
    auto copy = t.detach().contiguous().clone();
    if (group_->rank() != 0) copy.zero_();
    group_->all_reduce_sum(copy);
    t.copy_(copy);
  }
}

void Trainer::join_process_group() {
  group_ = in_.process_group;
  if (!group_ || group_->size() == 1) return;
  world_size_ = group_->size();
  main_process_ = group_->rank() == 0;
  check_processes_agree(*group_, args_, in_);
  // Every process starts from rank 0's weights and buffers (loaded or drawn the same way everywhere, but a process
  // that read another copy of a checkpoint must not train a different model).
  share_rank_zero_weights();
  if (args_.zero_stage >= 1) {
    std::vector<std::int64_t> elements;
    for (const auto& p : parameter_list_) elements.push_back(p.numel());
    owner_ = optim::partition_by_size(elements, world_size_);
  }
  // Stage 2: each process keeps its share of the gradients only. Stages 0 and 1: one float32 buffer holds every
  // trainable parameter's gradient (autograd and fitsum's in-place embedding gradient accumulate into an existing
  // .grad, and gradients are only ever zeroed in place, so its slices stay the gradients for the whole run).
  if (args_.zero_stage >= 2) round_micro_batch_ = args_.per_device_train_batch_size;
  reducer_ = std::make_unique<GradientReducer>(group_, parameters_, args_.zero_stage >= 2 ? owner_ : std::vector<int>{},
                                               args_.ddp_bucket_bytes());
}

std::optional<std::set<std::string>> Trainer::owned_parameter_names() const {
  if (owner_.empty()) return std::nullopt;
  std::set<std::string> names;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (owner_[i] == group_->rank()) names.insert(parameters_[i].first);
  }
  return names;
}

void Trainer::share_updated_parameters() {
  if (owner_.empty()) return;
  torch::NoGradGuard no_grad;
  // Owner by owner, in the same order everywhere. A tensor of a bucket's size or more travels alone, in place;
  // smaller ones travel together (one collective instead of dozens: for biases and norms latency, not bandwidth,
  // is the cost), through a buffer of at most a bucket.
  for (int owner = 0; owner < world_size_; ++owner) {
    std::vector<torch::Tensor> bucket;
    std::int64_t bucket_bytes = 0;
    const auto send_bucket = [&] {
      if (bucket.empty()) return;
      std::int64_t elements = 0;
      for (const auto& t : bucket) elements += t.numel();
      torch::Tensor packed;
      if (owner == group_->rank()) {
        std::vector<torch::Tensor> flat;
        for (const auto& t : bucket) flat.push_back(t.reshape(-1));
        packed = torch::cat(flat);
      } else {
        packed = torch::empty({elements}, bucket.front().options());
      }
      group_->broadcast(packed, owner);
      std::int64_t offset = 0;
      for (auto& t : bucket) {
        t.copy_(packed.narrow(0, offset, t.numel()).view(t.sizes()));
        offset += t.numel();
      }
      bucket.clear();
      bucket_bytes = 0;
    };
    for (std::size_t i = 0; i < parameter_list_.size(); ++i) {
      if (owner_[i] != owner) continue;
      auto& p = parameter_list_[i];
      const auto bytes = static_cast<std::int64_t>(p.numel() * p.element_size());
      if (bytes >= optim::kBroadcastBucketBytes) {
        group_->broadcast(p, owner);
        continue;
      }
      if (bucket_bytes + bytes > optim::kBroadcastBucketBytes) send_bucket();
      bucket.push_back(p);
      bucket_bytes += bytes;
    }
    send_bucket();
  }
  reducer_->clear();  // the optimizer zeroed only the gradients of its share
}

void Trainer::zero_gradients() {
  if (reducer_) {
    reducer_->clear();
  } else if (offload_) {
    offload_->zero_device_gradients();
  } else {
    optim::zero_gradients(*optimizer_);
  }
}

std::int64_t Trainer::examples_per_step() const {
  return args_.per_device_train_batch_size * args_.gradient_accumulation_steps * world_size_;
}

data::SamplerOptions Trainer::sampler_options() const {
  data::SamplerOptions options;
  options.group_by_length = args_.group_by_length;
  options.seed = static_cast<std::uint64_t>(args_.seed);
  options.data_seed = static_cast<std::uint64_t>(args_.data_seed.value_or(args_.seed));
  const auto batch = args_.data_batch_size.value_or(args_.per_device_train_batch_size);
  options.batch_size = static_cast<std::size_t>(batch);
  options.accumulation_steps =
      static_cast<std::size_t>(std::max<std::int64_t>(1, examples_per_step() / world_size_ / batch));
  options.processes = static_cast<std::size_t>(world_size_);
  options.drop_last = args_.dataloader_drop_last;
  return options;
}

std::vector<std::vector<std::size_t>> Trainer::own_micro_batches(
    const std::vector<std::vector<std::size_t>>& step) const {
  return micro_batches_of(step, world_size_ == 1 ? 0 : group_->rank(), args_.per_device_train_batch_size);
}

std::vector<std::vector<std::size_t>> Trainer::micro_batches_of(const std::vector<std::vector<std::size_t>>& step,
                                                                int of_rank, std::int64_t micro_batch) const {
  std::vector<std::size_t> examples;
  for (const auto& mb : step) examples.insert(examples.end(), mb.begin(), mb.end());
  const auto n = examples.size();
  const auto rank = static_cast<std::size_t>(of_rank);
  const auto world = static_cast<std::size_t>(world_size_);
  return in_micro_batches(examples, n * rank / world, n * (rank + 1) / world, static_cast<std::size_t>(micro_batch));
}

// The one collective and the one read of a data-parallel step: the counts are every process's, and whether any
// process was asked to stop decides the step on all of them, so they must reach the host. The loss sum rides along
// in the same buffer and stays on the device.
void Trainer::reduce_step(StepOutcome& outcome, torch::Tensor& loss_sum, std::int64_t& samples) {
  if (world_size_ == 1) return;
  auto counts = torch::tensor({static_cast<double>(samples), static_cast<double>(outcome.tokens),
                               outcome.interrupted ? 1.0 : 0.0, static_cast<double>(outcome.input_elements)},
                              torch::kDouble);
  auto totals = torch::cat({loss_sum.reshape({1}), counts.to(loss_sum.device())});
  group_->all_reduce_sum(totals);
  loss_sum = totals[0];
  const auto host = util::read_to_host(totals.narrow(0, 1, 4)).contiguous();
  const auto* v = host.data_ptr<double>();
  samples = static_cast<std::int64_t>(v[0]);
  outcome.tokens = static_cast<std::int64_t>(v[1]);
  outcome.interrupted = v[2] > 0.0;
  outcome.input_elements = static_cast<std::int64_t>(v[3]);
}

torch::Tensor Trainer::update_parameters() {
  optim::UpdateOptions update;
  update.max_grad_norm = args_.max_grad_norm;
  update.threads = in_.update_threads;
  if (gradients_sharded()) {
    reducer_->expose_owned();
    update.sum_over_processes = [this](torch::Tensor& t) { group_->all_reduce_sum(t); };
  }
  auto norm =
      offload_ ? offload_->step(*optimizer_, update) : optim::optimizer_step(*optimizer_, parameter_list_, update);
  share_updated_parameters();  // and, with a sharded update, clears the sums
  return norm;
}

bool Trainer::gradients_sharded() const { return reducer_ && args_.zero_stage >= 2; }

Trainer::Accumulated Trainer::accumulate_sharded(const std::vector<std::vector<std::size_t>>& step,
                                                 double denominator) {
  // The rounds are micro-batches of the size every process agreed on at the start; a process that re-planned to a
  // smaller micro-batch after running out of memory runs each of its rounds in parts of its own size.
  const auto own = micro_batches_of(step, group_->rank(), round_micro_batch_);
  std::size_t rounds = 0;
  for (int r = 0; r < world_size_; ++r) rounds = std::max(rounds, micro_batches_of(step, r, round_micro_batch_).size());
  Accumulated done;
  done.loss_sum = torch::zeros({}, torch::TensorOptions(torch::kDouble).device(in_.device));
  for (std::size_t round = 0; round < rounds; ++round) {
    if (round < own.size()) {
      train_sharded_micro_batch(own[round], denominator, done);
    } else {
      reducer_->reduce_nothing();
    }
    if (callbacks_.on_micro_batch) callbacks_.on_micro_batch(round + 1, rounds);
    // Every process ends the step at the same micro-batch: each of them sums gradients.
    if (group_->any(requested_stop_signal() != 0)) {
      done.outcome.interrupted = true;
      break;
    }
  }
  return done;
}

void Trainer::train_sharded_micro_batch(const std::vector<std::size_t>& examples, double denominator,
                                        Accumulated& into) {
  auto parts =
      in_micro_batches(examples, 0, examples.size(), static_cast<std::size_t>(args_.per_device_train_batch_size));
  const auto start_rng = util::random_state(in_.device);
  auto loss_sum = torch::zeros({}, torch::TensorOptions(torch::kDouble).device(in_.device));
  std::int64_t tokens = 0;
  std::int64_t elements = 0;
  for (std::size_t i = 0; i < parts.size();) {
    const auto part_rng = util::random_state(in_.device);
    kernels::TokenLoss token_loss;
    std::int64_t input_tokens = 0;
    std::int64_t input_elements = 0;
    try {
      token_loss = micro_batch_forward(parts[i], 1.0 / denominator, input_tokens, input_elements);
    } catch (const c10::OutOfMemoryError& e) {
      split_after_oom(parts, i, "forward", "carrying on", e);
      util::set_random_state(in_.device, part_rng);
      continue;
    }
    try {
      reducer_->begin_backward(i + 1 == parts.size());
      (token_loss.sum * (1.0 / denominator)).backward();
      reducer_->end_backward();
    } catch (const c10::OutOfMemoryError& e) {
      // The gradients of this micro-batch not yet summed are dropped and it is redone from its first part; the
      // buckets already summed keep their sums (the other processes only wait for the rest).
      token_loss = {};
      reducer_->abandon();
      split_after_oom(parts, i, "backward", "redoing the micro-batch", e);
      util::set_random_state(in_.device, start_rng);
      loss_sum.zero_();
      tokens = 0;
      elements = 0;
      i = 0;
      continue;
    }
    loss_sum.add_(token_loss.sum.detach().to(torch::kDouble));
    tokens += input_tokens + token_loss.tokens;
    elements += input_elements;
    ++i;
  }
  into.loss_sum.add_(loss_sum);
  into.outcome.tokens += tokens;
  into.outcome.input_elements += elements;
  into.samples += static_cast<std::int64_t>(examples.size());
}

void Trainer::shard_evaluation(EvaluationOptions& options) {
  if (world_size_ == 1) return;
  options.shard = group_->rank();
  options.shards = world_size_;
  options.sum_over_processes = [this](at::Tensor& t) { group_->all_reduce_sum(t); };
}

void Trainer::share_early_stopping() {
  if (world_size_ > 1) stop_early_ = group_->any(stop_early_);
}

bool Trainer::stop_requested() {
  const bool here = requested_stop_signal() != 0;
  return world_size_ == 1 ? here : group_->any(here);
}

}  // namespace fitsum::train
