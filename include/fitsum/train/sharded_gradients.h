// ZeRO stage 2 (Rajbhandari et al. 2020, the DeepSpeed paper): besides the optimizer state (ZeRO stage 1,
// optim/sharding.h), each process keeps only the gradients of the parameters it owns. Every gradient is summed over
// the processes as soon as the backward has finished it, in buckets (hooks on the parameters' gradient
// accumulators), and then released: the owner adds the sum to its own accumulated gradient, the others drop it.
//
// The sums run in the order of the buckets, on every process, once per micro-batch: a process that has fewer
// micro-batches in a step than another contributes zeros for the missing ones (reduce_nothing()). A micro-batch
// may run in parts (an out-of-memory split stays local to its process): only the backward of the last part sums;
// the parts before it accumulate into .grad as one process does. When a backward runs out of memory after some
// buckets were summed, those buckets are complete for the micro-batch (every part before was in them): the redone
// parts' gradients for them are dropped and the other buckets are summed by the last redone part, so the others
// only wait, and every process runs the same collectives in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace fitsum::train {

class ProcessGroup;

class ShardedGradients {
 public:
  // `parameters`: the trainable float32 parameters by name, in the same order on every process; `owner`: the process
  // that keeps each one's gradient (optim::partition_by_size). Buckets hold at most `bucket_bytes` (a larger parameter
  // is a bucket of its own), filled in reverse order, the order in which the backward finishes them.
  ShardedGradients(std::shared_ptr<ProcessGroup> group, std::vector<std::pair<std::string, torch::Tensor>> parameters,
                   std::vector<int> owner, std::int64_t bucket_bytes);
  ~ShardedGradients();
  ShardedGradients(const ShardedGradients&) = delete;
  ShardedGradients& operator=(const ShardedGradients&) = delete;

  // Around each backward of a micro-batch's part; `last_part`: the micro-batch ends with it, so its buckets are
  // summed (during the backward as they complete; at end_backward() those no hook completed, such as a gradient
  // written in place or a parameter the batch did not use).
  void begin_backward(bool last_part);
  void end_backward();
  // A backward that ran out of memory: releases the micro-batch's gradients not yet summed; it is redone from its
  // first part (the buckets already summed stay summed).
  void abandon_micro_batch();
  // A micro-batch another process has and this one does not: this process contributes zeros to every sum.
  void reduce_nothing();
  // Before the update: the owned parameters' .grad become their summed gradients (the others have none).
  void expose_owned();
  // After the update or an interrupted step: the sums restart from zero and no parameter holds a .grad.
  void clear();

  struct State;  // what the hooks see (they hold it weakly: a hook outliving this object does nothing)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace fitsum::train
