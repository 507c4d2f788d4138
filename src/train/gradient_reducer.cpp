// Implements include/fitsum/train/gradient_reducer.h with post-hooks on the parameters' gradient accumulators (the
// autograd nodes that add a backward's gradient into .grad), which is how PyTorch's DDP Reducer learns that a
// gradient is finished. The accumulators are kept alive here: a parameter holds only a weak reference to its own,
// and a new one (without the hook) would be made at the next forward.
#include "fitsum/train/gradient_reducer.h"

#include <algorithm>
#include <deque>
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

struct GradientReducer::State {
  std::shared_ptr<ProcessGroup> group;
  std::vector<std::pair<std::string, torch::Tensor>> parameters;
  std::vector<int> owner;            // empty: every process keeps every sum
  torch::Tensor flat;                // every process: the gradients; each parameter's .grad is a slice
  std::vector<std::int64_t> offset;  // every process: where each parameter's slice starts
  std::vector<torch::Tensor> sums;   // owner: its parameters' gradients summed over processes and micro-batches
  std::vector<std::vector<std::size_t>> buckets;
  std::vector<std::size_t> bucket_of;
  std::vector<util::GradAccumulator> accumulators;
  struct InFlight {
    ProcessGroup::Pending pending;
    torch::Tensor buffer;  // owner: the packed gradients of the bucket's parameters, summed in place
    std::size_t bucket = 0;
  };
  std::deque<InFlight> in_flight;  // the sums started and not yet waited for, in bucket order

  // The unit under way.
  std::vector<char> summed;          // per bucket: its sum has started (and covers the whole unit)
  std::vector<std::size_t> waiting;  // per bucket, in the last backward: parameters without their gradient
  std::vector<char> ready;           // per parameter, in the last backward: its gradient is finished
  std::size_t next = 0;              // the next bucket to sum (they are summed in order)
  bool in_backward = false;
  bool last = false;
  bool unit_done = false;  // the unit's sums are all done (until the next unit begins)

  bool keeps_all() const { return owner.empty(); }
  bool owns(std::size_t i) const { return keeps_all() || owner[i] == group->rank(); }
  void release(std::size_t i) { parameters[i].second.mutable_grad() = torch::Tensor(); }
  void attach(std::size_t i) {
    auto& p = parameters[i].second;
    p.mutable_grad() = flat.narrow(0, offset[i], p.numel()).view(p.sizes());
  }
  // Every process: the slice of the buffer a bucket's parameters occupy (they are consecutive, in reverse order).
  torch::Tensor slice_of(std::size_t b) const {
    const auto& members = buckets[b];
    const auto begin = offset[members.back()];
    const auto end = offset[members.front()] + parameters[members.front()].second.numel();
    return flat.narrow(0, begin, end - begin);
  }

  void on_ready(std::size_t i) {
    if (!in_backward) return;  // a backward fitsum's trainer did not start
    const auto b = bucket_of[i];
    if (summed[b] != 0) {  // redone after running out of memory: the bucket is complete for this unit
      release(i);
      return;
    }
    if (!last) return;
    if (ready[i] != 0) {
      throw std::logic_error("parameter " + parameters[i].first +
                             " received a second gradient in one backward, after its bucket could have been summed "
                             "(data-parallel training needs each parameter's gradient to be finished once per "
                             "backward)");
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

  // Starts one bucket's collective. Every process: the buffer's slice, in place. Owner: a parameter of a bucket's
  // size alone, smaller ones packed into one buffer; a parameter without a gradient (unused by the batch, or the
  // zeros of reduce_nothing) contributes zeros; at most two buckets in flight, each holding its buffer.
  void sum_bucket(std::size_t b) {
    torch::NoGradGuard no_grad;
    summed[b] = 1;
    if (keeps_all()) {
      auto slice = slice_of(b);
      in_flight.push_back({group->all_reduce_sum_async(slice), torch::Tensor(), b});
      return;
    }
    while (in_flight.size() > 1) complete_oldest();
    const auto& members = buckets[b];
    torch::Tensor buffer;
    if (members.size() == 1) {
      const auto& p = parameters[members.front()].second;
      buffer = p.grad().defined() ? p.grad().contiguous().view(-1) : torch::zeros({p.numel()}, p.options());
    } else {
      std::int64_t elements = 0;
      for (auto i : members) elements += parameters[i].second.numel();
      buffer = torch::empty({elements}, parameters[members.front()].second.options());
      std::int64_t at = 0;
      for (auto i : members) {
        const auto& p = parameters[i].second;
        auto part = buffer.narrow(0, at, p.numel());
        if (p.grad().defined()) {
          part.copy_(p.grad().reshape(-1));
        } else {
          part.zero_();
        }
        release(i);  // one member at a time: the bucket is never held twice over
        at += p.numel();
      }
    }
    for (auto i : members) release(i);
    in_flight.push_back({group->all_reduce_sum_async(buffer), buffer, b});
  }

  // Waits for the oldest sum in flight; the owner adds its parameters' part to their sums.
  void complete_oldest() {
    auto done = std::move(in_flight.front());
    in_flight.pop_front();
    done.pending.wait();
    if (keeps_all()) return;
    torch::NoGradGuard no_grad;
    std::int64_t at = 0;
    for (auto i : buckets[done.bucket]) {
      const auto n = parameters[i].second.numel();
      if (owns(i)) sums[i].add_(done.buffer.narrow(0, at, n).view(sums[i].sizes()));
      at += n;
    }
  }

  void complete_all() {
    while (!in_flight.empty()) complete_oldest();
  }

  void release_summed() {
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      if (summed[b] == 0) continue;
      for (auto i : buckets[b]) release(i);  // e.g. a gradient written in place during a redone backward
    }
  }

  void end_unit() {
    complete_all();
    if (keeps_all()) {
      for (std::size_t i = 0; i < parameters.size(); ++i) attach(i);
    }
    unit_done = true;
  }

  void begin_unit() {
    std::fill(summed.begin(), summed.end(), 0);
    next = 0;
    unit_done = false;
  }
};

namespace {

class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::weak_ptr<GradientReducer::State> state, std::size_t index) : state_(std::move(state)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (auto state = state_.lock()) state->on_ready(index_);
    return outputs;
  }

 private:
  std::weak_ptr<GradientReducer::State> state_;
  std::size_t index_;
};

}  // namespace

GradientReducer::GradientReducer(std::shared_ptr<ProcessGroup> group,
                                 std::vector<std::pair<std::string, torch::Tensor>> parameters, std::vector<int> owner,
                                 std::int64_t bucket_bytes)
    : state_(std::make_shared<State>()) {
  if (!owner.empty() && owner.size() != parameters.size()) {
    throw std::invalid_argument("GradientReducer: one owner per parameter");
  }
  if (bucket_bytes < 1) throw std::invalid_argument("GradientReducer: buckets need at least one byte");
  auto& s = *state_;
  s.group = std::move(group);
  s.parameters = std::move(parameters);
  s.owner = std::move(owner);
  const auto n = s.parameters.size();
  s.sums.resize(n);
  s.bucket_of.resize(n);
  s.ready.assign(n, 0);
  s.offset.resize(n);
  torch::NoGradGuard no_grad;
  std::int64_t total = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const auto& p = s.parameters[k].second;
    if (p.scalar_type() != torch::kFloat) {
      throw std::invalid_argument("data-parallel training needs float32 parameters; " + s.parameters[k].first +
                                  " is not");
    }
    s.offset[k] = total;
    total += p.numel();
  }
  std::int64_t filled = 0;
  for (std::size_t k = n; k-- > 0;) {  // the backward finishes the last parameters first
    const auto& p = s.parameters[k].second;
    const auto bytes = static_cast<std::int64_t>(p.numel()) * 4;
    if (s.buckets.empty() || filled + bytes > bucket_bytes) {
      s.buckets.emplace_back();
      filled = 0;
    }
    s.buckets.back().push_back(k);
    filled += bytes;
    s.bucket_of[k] = s.buckets.size() - 1;
    if (!s.keeps_all() && s.owns(k)) s.sums[k] = torch::zeros_like(p, at::MemoryFormat::Contiguous);
  }
  s.summed.assign(s.buckets.size(), 0);
  s.waiting.assign(s.buckets.size(), 0);
  if (s.keeps_all() && n > 0) {
    s.flat = torch::zeros({total}, s.parameters.front().second.options());
  }
  for (std::size_t k = 0; k < n; ++k) {
    auto& p = s.parameters[k].second;
    if (s.keeps_all()) {
      s.attach(k);
    } else {
      s.release(k);
    }
    auto accumulator = torch::autograd::impl::grad_accumulator(p);
    if (!accumulator) throw std::invalid_argument(s.parameters[k].first + " is not a trainable leaf tensor");
    accumulator->add_post_hook(std::make_unique<ReadyHook>(state_, k));
    s.accumulators.push_back(std::move(accumulator));
  }
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::begin_backward(bool last) {
  auto& s = *state_;
  if (s.unit_done) s.begin_unit();
  s.in_backward = true;
  s.last = last;
  if (!last) return;
  std::fill(s.ready.begin(), s.ready.end(), 0);
  for (std::size_t b = 0; b < s.buckets.size(); ++b) s.waiting[b] = s.buckets[b].size();
  s.next = 0;
}

void GradientReducer::end_backward() {
  auto& s = *state_;
  s.in_backward = false;
  s.release_summed();
  if (!s.last) return;
  for (; s.next < s.buckets.size(); ++s.next) {
    if (s.summed[s.next] == 0) s.sum_bucket(s.next);
  }
  s.end_unit();
}

void GradientReducer::abandon() {
  auto& s = *state_;
  s.in_backward = false;
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < s.buckets.size(); ++b) {
    if (s.summed[b] != 0) {
      for (auto i : s.buckets[b]) s.release(i);  // complete: what the redo computes for them is dropped
    } else if (s.keeps_all()) {
      s.slice_of(b).zero_();  // this process's accumulation restarts
    } else {
      for (auto i : s.buckets[b]) s.release(i);
    }
  }
}

void GradientReducer::finish() {
  if (state_->unit_done) return;
  begin_backward(true);
  end_backward();
}

void GradientReducer::reduce_nothing() {
  begin_backward(true);
  end_backward();
}

void GradientReducer::expose_owned() {
  auto& s = *state_;
  if (s.keeps_all()) return;
  for (std::size_t i = 0; i < s.parameters.size(); ++i) {
    if (s.owns(i)) s.parameters[i].second.mutable_grad() = s.sums[i];
  }
}

void GradientReducer::clear() {
  auto& s = *state_;
  s.complete_all();
  torch::NoGradGuard no_grad;
  if (s.keeps_all()) {
    if (s.flat.defined()) s.flat.zero_();
    for (std::size_t i = 0; i < s.parameters.size(); ++i) s.attach(i);
  } else {
    for (std::size_t i = 0; i < s.parameters.size(); ++i) {
      s.release(i);
      if (s.sums[i].defined()) s.sums[i].zero_();
    }
  }
  s.begin_unit();
  s.in_backward = false;
}

std::size_t GradientReducer::buckets() const { return state_->buckets.size(); }

std::size_t GradientReducer::buckets_started() const {
  const auto& summed = state_->summed;
  return static_cast<std::size_t>(std::count(summed.begin(), summed.end(), 1));
}

}  // namespace fitsum::train
