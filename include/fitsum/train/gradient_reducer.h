// The sum of the gradients over the processes of a data-parallel job, in buckets started during the backward that
// finishes them (hooks on the parameters' gradient accumulators, as PyTorch's DDP Reducer does), so that the
// communication overlaps with the rest of that backward. Two ways to keep the sums:
//
//  - every process keeps them all (ZeRO stages 0 and 1): one float32 buffer whose slices are the parameters' .grad,
//    so that the micro-batches of a step accumulate into it with no communication, and the backward of the step's
//    last micro-batch sums it, bucket by bucket, in place (one collective per bucket, nothing copied);
//  - the owner keeps each (ZeRO stage 2; Rajbhandari et al. 2020, the DeepSpeed paper): every micro-batch's
//    gradients are summed during its backward and released, the owner adding the sum to its own accumulated gradient
//    (a reduce-scatter, emulated with all-reduce: Gloo has none). At most two buckets are in flight.
//
// A unit is what one set of sums covers: a step (every process) or a micro-batch (owner). Its sums run in the order
// of the buckets, on every process, once per unit: a process with nothing to contribute to a unit another process has
// sums what it holds (finish(): zeros for the owner, its gradients for every process). A unit may run in several
// backwards (micro-batches, parts of a micro-batch after an out-of-memory split): only the last one sums; the ones
// before accumulate into .grad as one process does. When a backward runs out of memory after some buckets were
// summed, those buckets were complete for the unit (every backward before was in them): the unit is redone from its
// first backward, the redone gradients for those buckets are dropped, and its last backward sums the others. The
// other processes only wait: an out-of-memory split stays local to its process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace fitsum::train {

class ProcessGroup;

class GradientReducer {
 public:
  // `parameters`: the trainable float32 parameters by name, in the same order on every process; `owner`: empty for
  // every process to keep every sum, else the process that keeps each one's (optim::partition_by_size). Buckets hold
  // at most `bucket_bytes` (a larger parameter is a bucket of its own), filled in reverse order, the order in which
  // the backward finishes them. Every process keeping every sum: the parameters' .grad become the buffer's slices.
  GradientReducer(std::shared_ptr<ProcessGroup> group, std::vector<std::pair<std::string, torch::Tensor>> parameters,
                  std::vector<int> owner, std::int64_t bucket_bytes);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Around each backward; `last`: the unit ends with it, so its buckets are summed (during the backward as they
  // complete; at end_backward() those no hook completed, such as a gradient written in place or a parameter the
  // batch did not use), and end_backward() returns when every sum is done.
  void begin_backward(bool last);
  void end_backward();
  // A backward that ran out of memory: the unit's gradients not yet summed are dropped (zeroed where every process
  // keeps them); the unit is redone from its first backward.
  void abandon();
  // Ends the unit where this process's last backward did not: sums what it holds (nothing: zeros, or its
  // accumulated gradients) into the buckets not summed yet. Does nothing where the unit has ended.
  void finish();
  // A unit this process has no backward for (owner: a micro-batch another process has): its sums, with zeros.
  void reduce_nothing();
  // Owner: before the update, the owned parameters' .grad become their summed gradients (the others have none).
  void expose_owned();
  // After the update or an interrupted step: the sums restart from zero (every process: the buffer is zeroed and
  // is .grad again; owner: no parameter holds a .grad).
  void clear();

  std::size_t buckets() const;
  // The buckets of the unit under way (or just ended) whose sums have started.
  std::size_t buckets_started() const;

  struct State;  // what the hooks see (they hold it weakly: a hook outliving this object does nothing)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace fitsum::train
