// libFuzzer target: a checkpoint's fitsum_state.json and trainer_state.json, as a resume reads them. The input is
// one JSON document, or two separated by a NUL byte (fitsum_state.json, then trainer_state.json); each goes through
// the depth-bounded parser and its typed reader, and a position that parses is checked against runs of several
// lengths (an epoch of 0, 1, 7 and 2^40 optimizer steps).
#include <nlohmann/json.hpp>

#include "fitsum/io/checkpoint_folders.h"
#include "fitsum/io/checkpoint_state.h"
#include "fitsum/util/files.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto documents = fitsum::fuzz::two_documents(fitsum::fuzz::as_text(data, size));  // captured: not a binding
  const auto position_text = documents.first;
  const auto state_text = documents.second;
  fitsum::fuzz::expect_only_documented_errors([&] {
    const auto position = fitsum::io::parse_checkpoint_position(
        fitsum::util::parse_json(position_text, "fitsum_state.json"), "fitsum_state.json");
    if (position.epoch < 0 || position.step_in_epoch < 0 || position.global_step < 0 || position.train_examples < 0 ||
        position.examples_per_step < 0) {
      __builtin_trap();  // the reader promised non-negative counts
    }
    for (const std::int64_t steps_per_epoch : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7}, std::int64_t{1} << 40}) {
      fitsum::fuzz::expect_only_documented_errors([&] {
        fitsum::io::check_checkpoint_position("fitsum_state.json", position.epoch, position.step_in_epoch,
                                              position.global_step, steps_per_epoch);
        if (position.step_in_epoch > steps_per_epoch) __builtin_trap();  // accepted a step past the epoch
      });
    }
  });
  fitsum::fuzz::expect_only_documented_errors([&] {
    const auto state = fitsum::io::parse_trainer_state(
        fitsum::util::parse_json(state_text.empty() ? position_text : state_text, "trainer_state.json"),
        "trainer_state.json");
    if (!state.log_history.is_array()) __builtin_trap();
  });
  return 0;
}
