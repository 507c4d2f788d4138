// Implements include/fitsum/train/run_folder.h with std::filesystem's non-throwing overloads only: what a user's path
// names is said in one line, never as a raw filesystem_error ("status: Too many levels of symbolic links").
#include "fitsum/train/run_folder.h"

#include <regex>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "fitsum/io/checkpoint.h"
#include "fitsum/io/checkpoint_folders.h"
#include "fitsum/io/model_loader.h"
#include "fitsum/train/distributed.h"
#include "fitsum/util/files.h"

namespace fitsum::train {

namespace {

[[noreturn]] void refuse(const fs::path& output_dir, const std::string& why, const std::string& hint) {
  throw std::runtime_error("output_dir '" + output_dir.string() + "' " + why + "; " + hint);
}

const char* kind_of(fs::file_type type) {
  switch (type) {
    case fs::file_type::regular:
      return "a regular file";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a folder";
  }
}

// Throws unless `prefix` (output_dir or one of its leading parts) is a folder or a link to one; false when it does not
// exist (the run creates it and what follows).
bool check_existing_part(const fs::path& output_dir, const fs::path& prefix, bool whole) {
  const std::string where = whole ? "" : "cannot be created: '" + prefix.string() + "' ";
  const std::string hint = "choose another output_dir";
  std::error_code error;
  const auto link = fs::symlink_status(prefix, error);
  if (link.type() == fs::file_type::not_found) return false;
  if (error) refuse(output_dir, where + "cannot be examined (" + error.message() + ")", hint);
  const auto target = fs::status(prefix, error);
  if (error == std::errc::too_many_symbolic_link_levels) {
    refuse(output_dir, where + "is a symbolic link loop (too many levels of symbolic links)",
           "remove or fix the link, or " + hint);
  }
  if (target.type() == fs::file_type::not_found) {
    std::error_code ignored;
    refuse(output_dir,
           where + "is a symbolic link to '" + fs::read_symlink(prefix, ignored).string() + "', which does not exist",
           "create that folder, or " + hint);
  }
  if (error) refuse(output_dir, where + "cannot be examined (" + error.message() + ")", hint);
  if (target.type() != fs::file_type::directory) {
    refuse(output_dir, where + "is " + kind_of(target.type()) + ", not a folder",
           whole ? "remove it or " + hint : hint);
  }
  return true;
}

}  // namespace

fs::path check_output_dir(const fs::path& output_dir) {
  if (output_dir.empty()) throw std::invalid_argument("output_dir is required");
  std::vector<fs::path> parts;
  for (const auto& part : output_dir) {
    if (!part.empty()) parts.push_back(part);  // not a trailing separator's empty part
  }
  fs::path prefix;
  fs::path nearest = output_dir.is_absolute() ? fs::path("/") : fs::path(".");
  bool exists = true;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    prefix /= parts[i];
    if (!check_existing_part(output_dir, prefix, i + 1 == parts.size())) {
      exists = false;
      break;
    }
    nearest = prefix;
  }
  if (exists) {
    util::require_writable_folder(output_dir, "output_dir", /*create=*/false);
    return output_dir;
  }
  try {
    util::require_writable_folder(nearest, "its nearest existing folder", /*create=*/false);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("output_dir '" + output_dir.string() + "' cannot be created: " + e.what());
  }
  return nearest;
}

std::optional<std::string> check_new_run_folder(const fs::path& output_dir) {
  std::error_code error;
  if (!fs::is_directory(output_dir, error)) return std::nullopt;
  static const std::regex old_copy(R"(\.checkpoint-([0-9]{1,18})\.old-[0-9]{1,9})");
  bool checkpoints = false, model = false, history = false;
  for (fs::directory_iterator it(output_dir, error), end; !error && it != end; it.increment(error)) {
    const auto name = it->path().filename().string();
    std::smatch match;
    if (name.rfind("checkpoint-", 0) == 0) {
      checkpoints = true;
    } else if (std::regex_match(name, match, old_copy)) {
      // A re-save moved the checkpoint aside and was killed before renaming the new one in: the next start moves it
      // back, so it is a checkpoint.
      std::error_code missing;
      checkpoints =
          checkpoints || !fs::exists(fs::symlink_status(output_dir / ("checkpoint-" + match[1].str()), missing));
    } else {
      model = model || name == "model.safetensors" || name == "adapter_model.safetensors";
      history = history || name == "trainer_state.json";
    }
  }
  if (error)
    refuse(output_dir, "cannot be listed (" + error.message() + ")",
           "check its permissions or choose another output_dir");
  if (checkpoints || model) {
    throw std::invalid_argument("output_dir '" + output_dir.string() + "' already holds a training run (" +
                                (checkpoints ? "checkpoint folders" : "a saved model") +
                                "); set overwrite_output_dir to write over it" +
                                (checkpoints ? " or resume_from_checkpoint latest to continue it" : ""));
  }
  if (!history) return std::nullopt;
  std::string step;
  try {
    const auto state = util::read_json_file(output_dir / "trainer_state.json");
    if (state.contains("global_step") && state["global_step"].is_number_integer()) {
      step = " (it reached step " + std::to_string(state["global_step"].get<long long>()) + ")";
    }
  } catch (const std::exception&) {
    // A damaged history names no step; the warning still names the file.
  }
  return "output_dir '" + output_dir.string() + "' holds the trainer_state.json of an earlier run that saved no " +
         "checkpoint and no model" + step + "; this run writes over it";
}

void refuse_inputs_in_removed_checkpoints(const fs::path& output_dir, const std::vector<io::RunInput>& inputs) {
  const auto read = io::checkpoints_holding(io::list_checkpoints(output_dir), inputs);
  if (read.empty()) return;
  const auto& [checkpoint, input] = read.front();
  throw std::invalid_argument(input.argument + " '" + input.path.string() + "' lies in " + checkpoint.string() +
                              ", a checkpoint of the earlier run that overwrite_output_dir removes (and this run's " +
                              "own checkpoints would replace); copy it out of output_dir first, or choose another " +
                              "output_dir");
}

CheckedOutputDir check_run_folder(const TrainingJob& job, const std::function<void(const std::string&)>& warn) {
  const auto& args = job.args;
  CheckedOutputDir checked;
  checked.nearest_folder = check_output_dir(args.output_dir);  // not after hours of training
  // Rank 0 writes into output_dir for the whole job; the other processes of a data-parallel job never do on their own.
  const bool writes_here = launch_environment().rank == 0;
  std::error_code error;
  if (writes_here && fs::is_directory(args.output_dir, error)) {
    checked.lock = std::make_shared<io::OutputFolderLock>(args.output_dir);
  }
  if (!args.resume_from_checkpoint.empty()) return checked;
  if (args.overwrite_output_dir) {
    // Keeping a checkpoint the run reads would not be enough: this run's own save of its step would replace it.
    refuse_inputs_in_removed_checkpoints(args.output_dir, {{"model_name_or_path", job.model.model_name_or_path},
                                                           {"config_name", job.model.config_name},
                                                           {"tokenizer_name", job.model.tokenizer_name},
                                                           {"train_file", job.train_file},
                                                           {"validation_file", job.validation_file},
                                                           {"test_file", job.test_file}});
  } else if (const auto warning = check_new_run_folder(args.output_dir)) {
    if (warn) warn(*warning);
  }
  return checked;
}

std::optional<std::string> free_disk_warning_for(const TrainingJob& job, const fs::path& folder) {
  const auto free_bytes = util::free_disk_bytes(folder);
  if (!free_bytes) return std::nullopt;
  const auto preview = io::preview_model(job.model);
  std::uint64_t tokenizer_bytes = 0;
  for (const auto& name : io::tokenizer_file_names()) {
    std::error_code error;
    const auto size = preview.tokenizer_dir.empty() ? 0 : fs::file_size(preview.tokenizer_dir / name, error);
    if (!error) tokenizer_bytes += size;
  }
  std::optional<optim::OptimizerType> optimizer;
  if (job.args.save_strategy != IntervalStrategy::no) {
    optimizer = job.args.optim.value_or(optim::OptimizerType::adamw_torch);
  }
  const auto needed = predicted_checkpoint_bytes(preview.config, optimizer, tokenizer_bytes);
  return free_disk_warning(job.args.output_dir, *free_bytes, needed);
}

}  // namespace fitsum::train
