// The CUDA caching allocator's own history of a run, recorded while it goes (LibTorch's recordHistory: every
// allocation, free and segment action) and written with a snapshot of the segments at the end, gzip JSON in the
// layout allocator_replay.h reads (PyTorch's memory snapshot). CUDA only: the CPU has no caching allocator.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <c10/core/Device.h>

namespace fitsum::memory {

// Throws std::invalid_argument naming `flag` when the history cannot be recorded on `device`: off CUDA, or in a
// build without CUDA.
void check_allocator_history_available(const c10::Device& device, const std::string& flag);

// Records from construction. The allocator keeps the *last* `max_entries` entries; a replay needs the first ones,
// so between_steps() stops the recording early (and writes) when one more step could overflow the buffer.
class AllocatorHistory {
 public:
  // `memory_limit`: the caching allocator's cap in bytes (--max_memory), 0 for none; the record carries it.
  AllocatorHistory(const c10::Device& device, std::filesystem::path path, std::uint64_t max_entries,
                   std::uint64_t memory_limit);
  ~AllocatorHistory();  // stops recording when finish() did not
  AllocatorHistory(const AllocatorHistory&) = delete;
  AllocatorHistory& operator=(const AllocatorHistory&) = delete;

  // Between micro-steps: when the entries so far plus twice the largest step's could pass max_entries, finishes
  // now (the record says where it stopped).
  void between_steps();
  // The snapshot, the recording stopped, the file written; once (later calls do nothing).
  void finish();
  bool finished() const { return finished_; }

 private:
  std::uint64_t entries_so_far() const;  // counted from the allocator's statistics

  c10::Device device_;
  std::filesystem::path path_;
  std::uint64_t max_entries_ = 0, memory_limit_ = 0;
  std::uint64_t start_count_ = 0, last_count_ = 0, largest_step_ = 0, steps_ = 0;
  bool finished_ = false;
};

}  // namespace fitsum::memory
