// `fitsum summarize` as a filter on a stream: each dialogue's summary is printed as soon as the dialogue ends (a blank
// line) while stdin stays open, and endless input is read only as fast as it is summarized (bounded memory). The
// process is driven through pipes, as a program that talks to it would.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "test_support.h"

namespace fitsum::test {
namespace {

// fitsum summarize with stdin and stdout on pipes (stderr discarded).
class SummarizeProcess {
 public:
  explicit SummarizeProcess(const std::string& extra_flags) {
    int in[2], out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 2);
      for (int fd : {in[0], in[1], out[0], out[1], null}) ::close(fd);
      const std::string command = "exec " + fitsum_binary().string() + " summarize --model '" +
                                  (shared_dir() / "data" / "pegasus-tiny").string() +
                                  "' --min_length 1 --max_length 8 " + extra_flags;
      ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~SummarizeProcess() {
    close_stdin();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(stdout_);
  }

  void write_all(const std::string& text) {
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(stdin_, text.data() + done, text.size() - done);
      ASSERT_GT(n, 0);
      done += static_cast<std::size_t>(n);
    }
  }
  // Writes what the pipe takes now (stdin non-blocking); returns the bytes taken.
  std::size_t write_what_fits(const std::string& text) {
    ::fcntl(stdin_, F_SETFL, ::fcntl(stdin_, F_GETFL) | O_NONBLOCK);
    const ssize_t n = ::write(stdin_, text.data(), text.size());
    return n > 0 ? static_cast<std::size_t>(n) : 0;
  }
  void close_stdin() {
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
  }

  // The next line of stdout, or nullopt when none arrives within `timeout` (or stdout ends).
  std::optional<std::string> read_line(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (const auto end = pending_.find('\n'); end != std::string::npos) {
        std::string line = pending_.substr(0, end);
        pending_.erase(0, end + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                              std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{stdout_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(stdout_, buffer, sizeof buffer);
      if (n <= 0) return std::nullopt;
      pending_.append(buffer, static_cast<std::size_t>(n));
    }
  }
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  std::string pending_;
};

TEST(SummarizeStream, EachDialogueIsSummarizedWhileStdinStaysOpen) {
  FITSUM_REQUIRE_SHARED();
  SummarizeProcess fitsum("--per_device_eval_batch_size 8");
  fitsum.write_all("Amanda: I baked cookies. Do you want some?\nJerry: Sure!\n\n");
  // One dialogue of a batch of 8 has arrived and ended: its summary comes now, not when stdin ends.
  EXPECT_TRUE(fitsum.read_line(std::chrono::seconds(60)).has_value());
  fitsum.write_all("Olivia: Who are you voting for in this election?\nOliver: Liberals as always.\n\n");
  EXPECT_TRUE(fitsum.read_line(std::chrono::seconds(60)).has_value());
  // A dialogue not yet ended (no blank line) waits for its end: here the end of input.
  fitsum.write_all("Tim: Hi, what's up?\n");
  EXPECT_FALSE(fitsum.read_line(std::chrono::seconds(2)).has_value());
  fitsum.close_stdin();
  EXPECT_TRUE(fitsum.read_line(std::chrono::seconds(60)).has_value());
  EXPECT_FALSE(fitsum.read_line(std::chrono::seconds(60)).has_value());  // stdout ended
  EXPECT_EQ(fitsum.wait(), 0);
}

TEST(SummarizeStream, EndlessInputIsReadOnlyAsFastAsItIsSummarized) {
  FITSUM_REQUIRE_SHARED();
  SummarizeProcess fitsum("--per_device_eval_batch_size 2");
  std::string dialogues;
  while (dialogues.size() < (std::size_t{1} << 20)) dialogues += "Amanda: I baked cookies. Do you want some?\n\n";
  // For 10 s, offer 1 MiB of dialogues at a time: a reader that holds every dialogue takes all of it (tens of MiB);
  // one that waits for the model takes the pipe's buffer, its own and a few batches' worth.
  std::size_t taken = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until && taken < (std::size_t{64} << 20)) {
    taken += fitsum.write_what_fits(dialogues);
    ::usleep(20000);
  }
  EXPECT_LT(taken, std::size_t{4} << 20) << taken << " bytes of stdin taken in 10 s";
  // And it was summarizing all along.
  EXPECT_TRUE(fitsum.read_line(std::chrono::seconds(30)).has_value());
}

}  // namespace
}  // namespace fitsum::test
