// The files fitsum writes, as a user names them: a device node (a /dev/null the test makes; the tests run as root),
// a FIFO with a reader and a symbolic link are written through and stay what they are; an output that is an input
// is refused before any work; every output path is checked before the model loads; a file size limit (`ulimit -f`)
// is an error, not a silent kill; an interrupted or killed `tokenize` leaves no temporary file for good; and a
// failed write to standard output (a full device, a closed descriptor) is exit status 1 with one line.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace fitsum::test {
namespace {

std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

fs::path tiny_model() { return shared_dir() / "data" / "pegasus-tiny"; }

std::string fitsum(const std::string& arguments) { return quoted(fitsum_binary()) + " " + arguments; }

std::string eval(const fs::path& data, const std::string& flags) {
  return fitsum("eval --model " + quoted(tiny_model()) + " --test_file " + quoted(data) +
                " --num_beams 1 --max_length 8 --min_length 0 --disable_tqdm " + flags);
}

std::string tokenize(const fs::path& input, const std::string& output) {
  return fitsum("tokenize --model " + quoted(tiny_model()) + " --input_file " + quoted(input) + " --output_file " +
                output);
}

std::string plan(const fs::path& data, const std::string& flags) {
  return fitsum("plan --config_name " + quoted(source_dir() / "configs" / "pegasus-tiny" / "config.json") +
                " --train_file " + quoted(data) + " --max_memory 400MiB --device cpu " + flags);
}

// Three dialogue records with summaries: what eval, tokenize and rouge all read.
fs::path write_dialogues(const fs::path& file) {
  std::ofstream out(file);
  for (int i = 0; i < 3; ++i) {
    out << nlohmann::json{{"id", std::to_string(i)},
                          {"dialogue", "Amanda: I baked cookies. Do you want some?\nJerry: Sure! " + std::to_string(i)},
                          {"summary", "Amanda baked cookies for Jerry."},
                          {"prediction", "Amanda will bring Jerry cookies."},
                          {"reference", "Amanda baked cookies for Jerry."}}
               .dump()
        << "\n";
  }
  return file;
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void expect_one_line_error(const CommandResult& r, int status, const std::string& needle) {
  EXPECT_EQ(r.exit_code, status) << r.output;
  const auto line = r.output.find("fitsum: error: ");
  ASSERT_NE(line, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n', line), r.output.size() - 1) << r.output;  // the last line, and one line
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

// The character device 1,3 (what /dev/null is), made in `dir`: the machine's own is never put at risk.
fs::path make_null_device(const fs::path& dir) {
  const auto null = dir / "null";
  EXPECT_EQ(::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0) << "mknod needs root, as the tests run";
  return null;
}

bool is_the_null_device(const fs::path& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
}

std::vector<std::string> temporaries_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name.find(".tmp-") != std::string::npos) names.push_back(name);
  }
  return names;
}

TEST(OutputFiles, ADeviceNodeGivenAsEveryOutputStaysADevice) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("device");
  const auto data = write_dialogues(dir / "test.jsonl");
  const auto null = make_null_device(dir);
  // Before: `--metrics_file /dev/null` run as root turned the machine's /dev/null into a regular file.
  auto r = run_command(eval(data, "--metrics_file " + quoted(null) + " --predictions_file " + quoted(null)));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(is_the_null_device(null)) << "eval replaced the device";
  r = run_command(tokenize(data, quoted(null)));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(is_the_null_device(null)) << "tokenize replaced the device";
  r = run_command(fitsum("rouge --input_file " + quoted(data) + " --per_record_file " + quoted(null)));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(is_the_null_device(null)) << "rouge replaced the device";
  r = run_command(plan(write_copy_task_records(dir / "copy.jsonl"), "--memory_report " + quoted(null)));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + null.string()), std::string::npos) << r.output;
  EXPECT_TRUE(is_the_null_device(null)) << "plan replaced the device";
  EXPECT_TRUE(temporaries_in(dir).empty());
}

TEST(OutputFiles, AFifoWithAReaderAndASymbolicLinkAreWrittenThrough) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("fifo");
  const auto data = write_dialogues(dir / "test.jsonl");
  ASSERT_EQ(::mkfifo((dir / "ids.fifo").c_str(), 0600), 0);
  // The reader starts first, as in `cat ids.fifo > got.jsonl & fitsum tokenize --output_file ids.fifo`.
  auto r = run_command("cat " + quoted(dir / "ids.fifo") + " > " + quoted(dir / "got.jsonl") + " & " +
                       tokenize(data, quoted(dir / "ids.fifo")) + "; status=$?; wait; exit $status");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(dir / "ids.fifo")));
  r = run_command(tokenize(data, quoted(dir / "direct.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_text(dir / "got.jsonl"), read_text(dir / "direct.jsonl"));
  EXPECT_NE(read_text(dir / "direct.jsonl").find("\"input_ids\""), std::string::npos);

  fs::create_directories(dir / "runs");
  fs::create_symlink("runs/ids-v2.jsonl", dir / "ids.jsonl");
  r = run_command(tokenize(data, quoted(dir / "ids.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(dir / "ids.jsonl")) << "the link was replaced by a regular file";
  EXPECT_EQ(read_text(dir / "runs" / "ids-v2.jsonl"), read_text(dir / "direct.jsonl"));
}

TEST(OutputFiles, AnOutputThatIsAnInputIsRefusedBeforeAnyWork) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("same");
  const auto data = write_dialogues(dir / "test.jsonl");
  const auto original = read_text(data);
  fs::create_symlink("test.jsonl", dir / "alias.jsonl");
  struct Case {
    std::string command;
    std::string message;
  };
  const std::vector<Case> cases = {
      {eval(data, "--predictions_file " + quoted(data)),
       "--predictions_file '" + data.string() + "' is the same file as --test_file"},
      {eval(data, "--metrics_file " + quoted(dir / "alias.jsonl")),
       "--metrics_file '" + (dir / "alias.jsonl").string() + "' is the same file as --test_file"},
      {eval(data, "--predictions_file " + quoted(dir / "r.json") + " --metrics_file " + quoted(dir / "." / "r.json")),
       "--predictions_file '" + (dir / "r.json").string() + "' and --metrics_file"},
      {tokenize(data, quoted(data)), "--output_file '" + data.string() + "' is the same file as --input_file"},
      {fitsum("rouge --input_file " + quoted(data) + " --per_record_file " + quoted(data)),
       "--per_record_file '" + data.string() + "' is the same file as --input_file"},
      {plan(write_copy_task_records(dir / "copy.jsonl"), "--memory_report " + quoted(dir / "copy.jsonl")),
       "--memory_report '" + (dir / "copy.jsonl").string() + "' is the same file as --train_file"},
      {fitsum("train --model_name_or_path " + quoted(tiny_model()) + " --train_file " + quoted(dir / "copy.jsonl") +
              " --validation_file " + quoted(data) + " --output_dir " + quoted(dir / "out") +
              " --max_memory 400MiB --max_steps 1 --memory_report " + quoted(data)),
       "--memory_report '" + data.string() + "' is the same file as --validation_file"},
  };
  for (const auto& c : cases) {
    const auto r = run_command(c.command);
    expect_one_line_error(r, 2, c.message);
    EXPECT_EQ(r.output.find("fitsum eval\n"), std::string::npos) << "the model was loaded first: " << r.output;
    EXPECT_EQ(r.output.find("fitsum tokenize\n"), std::string::npos) << r.output;
    EXPECT_EQ(read_text(data), original) << c.command;
    write_bytes(data, original);  // so that each command is judged on its own
  }
  EXPECT_FALSE(fs::exists(dir / "r.json"));
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(OutputFiles, EveryOutputPathIsCheckedBeforeTheModelLoads) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("paths");
  const auto data = write_dialogues(dir / "test.jsonl");
  fs::create_directories(dir / "o");
  const std::string long_name(250, 'p');  // a valid name, but not with ".tmp-<pid>" added
  struct Case {
    std::string command;
    std::string message;
  };
  const std::vector<Case> cases = {
      {eval(data, "--predictions_file " + quoted(dir / "o") + "/"),
       "--predictions_file '" + (dir / "o").string() + "/' is a folder"},
      {eval(data, "--metrics_file " + quoted(dir / long_name)), "has a name too long to write"},
      {eval(data, "--metrics_file " + quoted(dir / "missing" / "m.json")), "does not exist"},
      {tokenize(data, quoted(dir / "o")), "--output_file '" + (dir / "o").string() + "' is a folder"},
      {tokenize(data, quoted(dir / long_name)), "--output_file"},
      {fitsum("rouge --input_file " + quoted(data) + " --per_record_file " + quoted(dir / "missing" / "r.jsonl")),
       "--per_record_file"},
      {plan(write_copy_task_records(dir / "copy.jsonl"), "--memory_report " + quoted(dir / long_name)),
       "--memory_report"},
  };
  for (const auto& c : cases) {
    const auto r = run_command(c.command);
    expect_one_line_error(r, 1, c.message);
    EXPECT_EQ(r.output.find("fitsum eval\n"), std::string::npos) << "the model was loaded first: " << r.output;
    EXPECT_EQ(r.output.find("fitsum tokenize\n"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("calibration"), std::string::npos) << r.output;
  }
  // A folder the user may not write to: run as nobody (the tests run as root, for whom permissions do not count).
  if (::geteuid() == 0 && ::access("/usr/bin/setpriv", X_OK) == 0) {
    fs::create_directories(dir / "locked");
    fs::permissions(dir / "locked", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                        fs::perms::others_read | fs::perms::others_exec);
    const auto r = run_command(
        "setpriv --reuid=65534 --regid=65534 --clear-groups " +
        fitsum("rouge --input_file " + quoted(data) + " --per_record_file " + quoted(dir / "locked" / "r.jsonl")));
    expect_one_line_error(r, 1, "takes no new file (Permission denied)");
  }
  EXPECT_EQ(temporaries_in(dir), std::vector<std::string>{});
}

// A tokenize that runs long enough to be interrupted while it writes: SAMSum's training split, four times over.
fs::path write_long_input(const fs::path& dir) {
  const auto file = dir / "long.jsonl";
  const auto split = read_text(shared_dir() / "data" / "samsum" / "train.jsonl");
  std::ofstream out(file, std::ios::binary);
  for (int i = 0; i < 4; ++i) out << split;
  return file;
}

// Runs tokenize with SIGINT and SIGTERM at their default action (a shell would start a background job with SIGINT
// ignored), sends `signal_number` once its temporary file exists, and returns the wait status; `seen` says whether
// the temporary file was there to be interrupted.
int interrupted_tokenize(const fs::path& input, const fs::path& output, int signal_number, bool& seen) {
  const std::vector<std::string> args = {fitsum_binary().string(), "tokenize",     "--model",
                                         tiny_model().string(),    "--input_file", input.string(),
                                         "--output_file",          output.string()};
  std::vector<char*> argv;
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const fs::path temporary = output.string() + ".tmp-" + std::to_string(child);
  for (int i = 0; i < 800 && !fs::exists(temporary); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  seen = fs::exists(temporary);
  ::kill(child, signal_number);
  int status = 0;
  ::waitpid(child, &status, 0);
  return status;
}

TEST(OutputFiles, AnInterruptedTokenizeLeavesNoTemporaryFile) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("interrupted");
  const auto input = write_long_input(dir);
  for (const int signal_number : {SIGINT, SIGTERM}) {
    bool seen = false;
    const int status = interrupted_tokenize(input, dir / "ids.jsonl", signal_number, seen);
    EXPECT_TRUE(seen) << "tokenize ended before it could be interrupted";
    // Still ended by the signal, as before (a shell reports 130 / 143).
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal_number) << status;
    EXPECT_EQ(temporaries_in(dir), std::vector<std::string>{}) << signal_number;
    EXPECT_FALSE(fs::exists(dir / "ids.jsonl"));
  }
}

TEST(OutputFiles, AKilledWritersTemporaryIsRemovedByTheNextWrite) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("killed");
  const auto input = write_long_input(dir);
  bool seen = false;
  const int status = interrupted_tokenize(input, dir / "ids.jsonl", SIGKILL, seen);
  EXPECT_TRUE(WIFSIGNALED(status)) << status;
  ASSERT_EQ(temporaries_in(dir).size(), 1u) << "kill -9 left no temporary file to clean";
  // One named for a live process that is no fitsum writer (pid 1): the lock decides, not the pid.
  std::ofstream(dir / "ids.jsonl.tmp-1") << "partial";
  const auto r = run_command(tokenize(write_dialogues(dir / "small.jsonl"), quoted(dir / "ids.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(temporaries_in(dir), std::vector<std::string>{});
  EXPECT_TRUE(fs::exists(dir / "ids.jsonl"));
}

TEST(OutputFiles, AFileSizeLimitIsAnErrorNotASilentKill) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("ulimit");
  const auto input = shared_dir() / "data" / "samsum" / "test.jsonl";
  // Before: SIGXFSZ killed fitsum (status 153) with nothing on stderr and the temporary file left behind.
  const auto r = run_command("ulimit -f 64; " + tokenize(input, quoted(dir / "ids.jsonl")));
  expect_one_line_error(r, 1,
                        "File too large; the file would pass the largest size this process may write (ulimit -f)");
  EXPECT_NE(r.output.find("cannot write '" + (dir / "ids.jsonl").string() + "'"), std::string::npos) << r.output;
  EXPECT_EQ(temporaries_in(dir), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(dir / "ids.jsonl"));
}

TEST(OutputFiles, AFileSizeLimitDuringASaveIsAnErrorAndLeavesNoTemporaryFolder) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("ulimit-train");
  const auto data = write_copy_task_records(dir / "copy.jsonl");
  const auto out = dir / "out";
  const std::string train = fitsum("train --model_name_or_path " + quoted(shared_dir() / "fixtures" / "tiny-pegasus") +
                                   " --train_file " + quoted(data) + " --output_dir " + quoted(out) +
                                   " --optim adafactor --per_device_train_batch_size 4 --max_steps 1 --save_steps 1");
  // The fixture's weights take 270 KB, more than 64 blocks (of 512 or 1024 bytes, by shell). Before: killed by
  // SIGXFSZ with nothing said, its .checkpoint-1.tmp-PID folder left behind.
  auto r = run_command("ulimit -f 64; " + train);
  expect_one_line_error(r, 1, "model.safetensors': File too large; the file would pass the largest size");
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(out)) {
    const auto name = entry.path().filename().string();
    if (name.find(".tmp-") != std::string::npos || name.find("checkpoint-") != std::string::npos) left.push_back(name);
  }
  EXPECT_EQ(left, std::vector<std::string>{});
  // trainer_state.json, written when training starts, marks the folder as holding a run, as after a full disk.
  r = run_command(train + " --overwrite_output_dir");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out / "checkpoint-1" / "model.safetensors")) << r.output;
}

TEST(OutputFiles, AFailedWriteToStandardOutputIsStatusOneAndOneLine) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("stdout");
  const auto data = write_dialogues(dir / "test.jsonl");
  const std::vector<std::string> commands = {
      fitsum("rouge --input_file " + quoted(data)),
      fitsum("info --model " + quoted(tiny_model())),
      eval(data, ""),
      plan(write_copy_task_records(dir / "copy.jsonl"), ""),
      fitsum("summarize --model " + quoted(tiny_model()) + " --input_file " + quoted(data) +
             " --max_length 8 --min_length 0"),
  };
  for (const auto& command : commands) {
    // In a subshell: run_command sends stderr to the captured output after it.
    const auto r = run_command("(" + command + " > /dev/full)");
    expect_one_line_error(r, 1, "cannot write to standard output: No space left on device");
  }
  for (const auto& command : {commands[0], commands[2]}) {
    const auto r = run_command("(" + command + " >&-)");
    expect_one_line_error(r, 1, "cannot write to standard output: Bad file descriptor");
  }
}

}  // namespace
}  // namespace fitsum::test
