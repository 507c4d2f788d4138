// --max_memory auto on the CPU: MemAvailable read from /proc/meminfo's text; none available is an error that says
// what to do, not a budget of 0 bytes.
#include <gtest/gtest.h>

#include "fitsum/memory/planner.h"
#include "fitsum/util/bytes.h"

namespace fitsum::memory {
namespace {

std::string error_of(const std::string& meminfo) {
  try {
    mem_available_bytes(meminfo);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(MemoryBudget, MemAvailableIsReadFromMeminfo) {
  EXPECT_EQ(mem_available_bytes("MemTotal:       16384000 kB\nMemFree:         1000 kB\n"
                                "MemAvailable:    8054012 kB\nBuffers:          1 kB\n"),
            8054012ULL * 1024);
}

TEST(MemoryBudget, NoAvailableMemoryIsAnErrorNamingTheFix) {
  auto message = error_of("MemTotal: 16384000 kB\nMemAvailable:          0 kB\n");
  EXPECT_NE(message.find("MemAvailable: 0 kB"), std::string::npos) << message;
  EXPECT_NE(message.find("--max_memory 6GiB"), std::string::npos) << message;
  message = error_of("MemTotal: 16384000 kB\n");
  EXPECT_NE(message.find("MemAvailable not found"), std::string::npos) << message;
  message = error_of("MemAvailable: lots\n");
  EXPECT_NE(message.find("cannot read"), std::string::npos) << message;
  message = error_of("MemAvailable: 99999999999999999999 kB\n");
  EXPECT_NE(message.find("cannot read"), std::string::npos) << message;
}

TEST(MemoryBudget, SizesAreDecimalAndNeverWrap) {
  EXPECT_THROW(util::parse_bytes("0x10GiB"), std::invalid_argument);
  EXPECT_THROW(util::parse_bytes("nan"), std::invalid_argument);
  EXPECT_THROW(util::parse_bytes("1e300"), std::invalid_argument);
  EXPECT_THROW(util::parse_bytes("16EiB"), std::invalid_argument);
  EXPECT_THROW(util::parse_bytes("20000000TB"), std::invalid_argument);  // 2e19 bytes: past 2^64
  EXPECT_EQ(util::parse_bytes("10000000TB"), 10000000000000000000ULL);   // past 2^63: llround would overflow
}

}  // namespace
}  // namespace fitsum::memory
