// Implements include/fitsum/train/sharded_gradients.h with post-hooks on the parameters' gradient accumulators (the
// autograd nodes that add a backward's gradient into .grad), which is how PyTorch's DDP Reducer learns that a
// gradient is finished. The accumulators are kept alive here: a parameter holds only a weak reference to its own,
// and a new one (without the hook) would be made at the next forward.
#include "fitsum/train/sharded_gradients.h"

#include <stdexcept>
#include <string>
#include <utility>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include "fitsum/train/distributed.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::train {

struct ShardedGradients::State {
  std::shared_ptr<ProcessGroup> group;
  std::vector<std::pair<std::string, torch::Tensor>> parameters;
  std::vector<int> owner;
  std::vector<torch::Tensor> sums;  // owned parameters: the gradient summed over the processes and micro-batches
  std::vector<std::vector<std::size_t>> buckets;
  std::vector<std::size_t> bucket_of;
  std::vector<util::GradAccumulator> accumulators;

  // The micro-batch under way.
  std::vector<char> summed;          // per bucket: summed over the processes already
  std::vector<std::size_t> waiting;  // per bucket, in the last part's backward: parameters without their gradient
  std::vector<char> ready;           // per parameter, in the last part's backward: its gradient is finished
  std::size_t next = 0;              // the next bucket to sum (they are summed in order)
  bool in_backward = false;
  bool last_part = false;

  bool owns(std::size_t i) const { return owner[i] == group->rank(); }
  void release(std::size_t i) { parameters[i].second.mutable_grad() = torch::Tensor(); }

  void on_ready(std::size_t i) {
    if (!in_backward) return;  // a backward fitsum's trainer did not start (none runs under ZeRO stage 2)
    const auto b = bucket_of[i];
    if (summed[b] != 0) {  // redone after running out of memory: the bucket is complete for this micro-batch
      release(i);
      return;
    }
    if (!last_part) return;
    if (ready[i] != 0) {
      throw std::logic_error("parameter " + parameters[i].first +
                             " received a second gradient in one backward, after its bucket could have been summed "
                             "(ZeRO stage 2 needs each parameter's gradient to be finished once per backward)");
    }
    ready[i] = 1;
    waiting[b] -= 1;
    sum_ready_buckets();
  }

  void sum_ready_buckets() {
    while (next < buckets.size() && (summed[next] != 0 || waiting[next] == 0)) {
      if (summed[next] == 0) sum_bucket(next);
      ++next;
    }
  }

  // One collective: a parameter of a bucket's size alone and in place, smaller ones packed into one buffer. A
  // parameter without a gradient (unused by the batch, or the zeros of reduce_nothing) contributes zeros.
  void sum_bucket(std::size_t b) {
    torch::NoGradGuard no_grad;
    const auto& members = buckets[b];
    if (members.size() == 1) {
      const auto i = members.front();
      const auto& p = parameters[i].second;
      auto g = p.grad().defined() ? p.grad().contiguous() : torch::zeros_like(p, at::MemoryFormat::Contiguous);
      release(i);
      group->all_reduce_sum(g);
      if (owns(i)) sums[i].add_(g.view(sums[i].sizes()));
    } else {
      std::int64_t elements = 0;
      for (auto i : members) elements += parameters[i].second.numel();
      auto buffer = torch::empty({elements}, parameters[members.front()].second.options());
      std::int64_t offset = 0;
      for (auto i : members) {
        const auto& p = parameters[i].second;
        auto slice = buffer.narrow(0, offset, p.numel());
        if (p.grad().defined()) {
          slice.copy_(p.grad().reshape(-1));
        } else {
          slice.zero_();
        }
        release(i);
        offset += p.numel();
      }
      group->all_reduce_sum(buffer);
      offset = 0;
      for (auto i : members) {
        const auto n = parameters[i].second.numel();
        if (owns(i)) sums[i].add_(buffer.narrow(0, offset, n).view(sums[i].sizes()));
        offset += n;
      }
    }
    summed[b] = 1;
  }

  void release_summed() {
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      if (summed[b] == 0) continue;
      for (auto i : buckets[b]) release(i);  // e.g. a gradient written in place during a redone part
    }
  }

  void end_micro_batch() {
    std::fill(summed.begin(), summed.end(), 0);
    next = 0;
  }
};

namespace {

class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::weak_ptr<ShardedGradients::State> state, std::size_t index)
      : state_(std::move(state)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (auto state = state_.lock()) state->on_ready(index_);
    return outputs;
  }

 private:
  std::weak_ptr<ShardedGradients::State> state_;
  std::size_t index_;
};

}  // namespace

ShardedGradients::ShardedGradients(std::shared_ptr<ProcessGroup> group,
                                   std::vector<std::pair<std::string, torch::Tensor>> parameters,
                                   std::vector<int> owner, std::int64_t bucket_bytes)
    : state_(std::make_shared<State>()) {
  if (owner.size() != parameters.size()) throw std::invalid_argument("ShardedGradients: one owner per parameter");
  if (bucket_bytes < 1) throw std::invalid_argument("ShardedGradients: buckets need at least one byte");
  auto& s = *state_;
  s.group = std::move(group);
  s.parameters = std::move(parameters);
  s.owner = std::move(owner);
  const auto n = s.parameters.size();
  s.sums.resize(n);
  s.bucket_of.resize(n);
  s.ready.assign(n, 0);
  torch::NoGradGuard no_grad;
  std::int64_t filled = 0;
  for (std::size_t k = n; k-- > 0;) {  // the backward finishes the last parameters first
    const auto& p = s.parameters[k].second;
    if (p.scalar_type() != torch::kFloat) {
      throw std::invalid_argument("ZeRO stage 2 needs float32 parameters; " + s.parameters[k].first + " is not");
    }
    const auto bytes = static_cast<std::int64_t>(p.numel()) * 4;
    if (s.buckets.empty() || filled + bytes > bucket_bytes) {
      s.buckets.emplace_back();
      filled = 0;
    }
    s.buckets.back().push_back(k);
    filled += bytes;
    s.bucket_of[k] = s.buckets.size() - 1;
    if (s.owns(k)) s.sums[k] = torch::zeros_like(p, at::MemoryFormat::Contiguous);
  }
  s.summed.assign(s.buckets.size(), 0);
  s.waiting.assign(s.buckets.size(), 0);
  for (std::size_t k = 0; k < n; ++k) {
    auto& p = s.parameters[k].second;
    p.mutable_grad() = torch::Tensor();
    auto accumulator = torch::autograd::impl::grad_accumulator(p);
    if (!accumulator) throw std::invalid_argument(s.parameters[k].first + " is not a trainable leaf tensor");
    accumulator->add_post_hook(std::make_unique<ReadyHook>(state_, k));
    s.accumulators.push_back(std::move(accumulator));
  }
}

ShardedGradients::~ShardedGradients() = default;

void ShardedGradients::begin_backward(bool last_part) {
  auto& s = *state_;
  s.in_backward = true;
  s.last_part = last_part;
  if (!last_part) return;
  std::fill(s.ready.begin(), s.ready.end(), 0);
  for (std::size_t b = 0; b < s.buckets.size(); ++b) s.waiting[b] = s.buckets[b].size();
  s.next = 0;
}

void ShardedGradients::end_backward() {
  auto& s = *state_;
  s.release_summed();
  if (s.last_part) {
    for (; s.next < s.buckets.size(); ++s.next) {
      if (s.summed[s.next] == 0) s.sum_bucket(s.next);
    }
    s.end_micro_batch();
  }
  s.in_backward = false;
}

void ShardedGradients::abandon_micro_batch() {
  auto& s = *state_;
  for (std::size_t i = 0; i < s.parameters.size(); ++i) s.release(i);
  s.in_backward = false;
}

void ShardedGradients::reduce_nothing() {
  begin_backward(true);
  end_backward();
}

void ShardedGradients::expose_owned() {
  auto& s = *state_;
  for (std::size_t i = 0; i < s.parameters.size(); ++i) {
    if (s.owns(i)) s.parameters[i].second.mutable_grad() = s.sums[i];
  }
}

void ShardedGradients::clear() {
  auto& s = *state_;
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < s.parameters.size(); ++i) {
    s.release(i);
    if (s.sums[i].defined()) s.sums[i].zero_();
  }
  s.end_micro_batch();
  s.in_backward = false;
}

}  // namespace fitsum::train
