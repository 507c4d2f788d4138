// `fitsum train` processes meeting at the rendezvous, launched the way torchrun launches them (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT): a peer that never arrives, or a port where nothing answers, ends the process
// within --ddp_timeout in one line naming the rank, the address and the world size; a port in use is one line naming
// it, without c10d's log; and only rank 0 prints the run's report.
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <chrono>
#include <sstream>

#include <gtest/gtest.h>

#include "fitsum/train/local_launch.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

// A TCP socket listening on 127.0.0.1 that never accepts nor answers (the kernel completes connections into its
// backlog): a port in use, and a "rendezvous" that never replies.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t length = sizeof address;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

struct Rank {
  int exit_code = 0;
  std::string out, err;  // stdout and stderr apart
  double seconds = 0;
};

// Starts the processes `ranks` of a job of `world` processes at 127.0.0.1:`port` (each killed after 60 s) and waits
// for them.
std::vector<Rank> start_ranks(const std::vector<int>& ranks, int world, int port, const std::string& flags,
                              const fs::path& dir) {
  const fs::path data = write_copy_task_records(dir / "train.jsonl");
  std::string script = "cd '" + dir.string() + "'; ";
  for (const int r : ranks) {
    const std::string name = "rank-" + std::to_string(r);
    script += "(s=$(date +%s%N); RANK=" + std::to_string(r) + " WORLD_SIZE=" + std::to_string(world) +
              " LOCAL_RANK=" + std::to_string(r) + " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
              " timeout -s KILL 60 '" + fitsum_binary().string() + "' train --model_name_or_path '" +
              (shared_dir() / "fixtures" / "tiny-pegasus").string() + "' --train_file '" + data.string() +
              "' --output_dir out --max_steps 1 --save_strategy no --disable_tqdm " + flags + " > " + name +
              ".out 2> " + name + ".err; echo $? > " + name + ".rc; echo $(( ($(date +%s%N) - s) / 1000000 )) > " +
              name + ".ms) & ";
  }
  script += "wait\n";
  write_bytes(dir / "launch.sh", script);
  const auto launched = run_command("bash '" + (dir / "launch.sh").string() + "'");
  EXPECT_EQ(launched.exit_code, 0) << launched.output;
  std::vector<Rank> result;
  for (const int r : ranks) {
    const std::string name = "rank-" + std::to_string(r);
    Rank rank;
    rank.exit_code = std::stoi(util::read_file(dir / (name + ".rc")));
    rank.seconds = std::stod(util::read_file(dir / (name + ".ms"))) / 1000.0;
    rank.out = util::read_file(dir / (name + ".out"));
    rank.err = util::read_file(dir / (name + ".err"));
    result.push_back(rank);
  }
  return result;
}

// stderr holds fitsum's own lines only (its warnings, then one error as the last line): no c10d log ("E1205
// 07:37:05.276141 22725 socket.cpp:860] [c10d] ...", "WARNING: Logging before InitGoogleLogging()").
std::string only_error_line(const Rank& rank) {
  std::vector<std::string> lines;
  std::istringstream in(rank.err);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  int errors = 0;
  for (const auto& line : lines) {
    EXPECT_EQ(line.rfind("fitsum: ", 0), 0u) << "not fitsum's: " << line;
    errors += line.rfind("fitsum: error: ", 0) == 0 ? 1 : 0;
  }
  EXPECT_EQ(errors, 1) << rank.err;
  EXPECT_EQ(rank.err.find("[c10d]"), std::string::npos) << rank.err;
  return lines.empty() ? "" : lines.back();
}

// Before: rank 0 alone waited for its store's clients, then again for the process group's keys, 2 x ddp_timeout;
// a client whose port accepted the connection and never answered waited forever (killed at 120 s).
TEST(DistributedRendezvous, APeerThatNeverAnswersEndsWithinDdpTimeoutInOneLine) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("rendezvous-missing");
  const int timeout = 5;
  const auto alone = start_ranks({0}, 2, train::free_local_port(), "--ddp_timeout 5", dir);
  EXPECT_EQ(alone[0].exit_code, 1) << alone[0].err;
  EXPECT_LT(alone[0].seconds, timeout + 4.0) << "process start, ddp_timeout, then one line";
  EXPECT_EQ(only_error_line(alone[0]).rfind("fitsum: error: rank 0 of 2 waited 5 s (ddp_timeout) at the rendezvous "
                                            "127.0.0.1:",
                                            0),
            0u)
      << alone[0].err;
  EXPECT_NE(alone[0].err.find(": rank 1 never arrived (1 of 2 processes joined); start every process of the job "
                              "with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE=2"),
            std::string::npos)
      << alone[0].err;

  const SilentListener silent;
  const auto client = start_ranks({1}, 2, silent.port(), "--ddp_timeout 3", temp_dir("rendezvous-silent"));
  EXPECT_EQ(client[0].exit_code, 1) << client[0].err;
  EXPECT_LT(client[0].seconds, 3 + 4.0) << client[0].err;
  EXPECT_EQ(only_error_line(client[0]),
            "fitsum: error: rank 1 of 2 connected to 127.0.0.1:" + std::to_string(silent.port()) +
                ", but nothing answered there as a rendezvous within 3 s (ddp_timeout): the port belongs to another "
                "program, not to rank 0's rendezvous; check MASTER_ADDR and MASTER_PORT");
  EXPECT_EQ(client[0].out, "") << "rank 1 prints no report";
}

// Before: four raw glog lines from c10d's socket code, then "could not join the rendezvous ... within 20 s" one
// second after the start.
TEST(DistributedRendezvous, APortInUseIsOneLineNamingIt) {
  FITSUM_REQUIRE_SHARED();
  const SilentListener taken;
  const auto rank0 = start_ranks({0}, 2, taken.port(), "--ddp_timeout 20", temp_dir("rendezvous-in-use"));
  EXPECT_EQ(rank0[0].exit_code, 1) << rank0[0].err;
  EXPECT_LT(rank0[0].seconds, 10.0) << "not a wait for the timeout";
  const std::string port = std::to_string(taken.port());
  EXPECT_EQ(only_error_line(rank0[0]),
            "fitsum: error: rank 0 of 2 cannot host the rendezvous at 127.0.0.1:" + port + ": port " + port +
                " is in use (another program, or another job's rank 0, listens there); choose a free port with "
                "MASTER_PORT, the same for every process (fitsum train --nproc_per_node picks one itself)");
}

// Before: rank 1 printed its own "data" block (and its warnings) while preparing, before it knew its group.
TEST(DistributedRendezvous, OnlyRankZeroPrintsTheRunsReport) {
  FITSUM_REQUIRE_SHARED();
  const auto ranks =
      start_ranks({0, 1}, 2, train::free_local_port(), "--ddp_timeout 60", temp_dir("rendezvous-report"));
  ASSERT_EQ(ranks[0].exit_code, 0) << ranks[0].out << ranks[0].err;
  ASSERT_EQ(ranks[1].exit_code, 0) << ranks[1].out << ranks[1].err;
  EXPECT_EQ(ranks[0].out.rfind("data\n  ", 0), 0u) << ranks[0].out;
  EXPECT_NE(ranks[0].out.find("train_file "), std::string::npos) << ranks[0].out;
  EXPECT_NE(ranks[0].err.find("max_source_length 1024 is above"), std::string::npos) << ranks[0].err;
  EXPECT_EQ(ranks[1].out, "");
  // What the preparation warns of is rank 0's to say; what is about rank 1 alone goes to its stderr (a warning of
  // its own, such as its measured matrix speed, may be there too).
  EXPECT_EQ(ranks[1].err.find("max_source_length"), std::string::npos) << ranks[1].err;
  EXPECT_NE(ranks[1].err.find("fitsum: rank 1: process 1 of 2 (torchrun), rendezvous 127.0.0.1:"), std::string::npos)
      << ranks[1].err;
  EXPECT_NE(ranks[0].out.find("  process 0 of 2 (torchrun), rendezvous 127.0.0.1:"), std::string::npos)
      << ranks[0].out;
}

}  // namespace
}  // namespace fitsum::test
