#include <gtest/gtest.h>

#include "fitsum/util/bytes.h"

namespace fitsum::util {
namespace {

TEST(Bytes, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(parse_bytes("6GiB"), 6ULL << 30);
  EXPECT_EQ(parse_bytes("800MiB"), 800ULL << 20);
  EXPECT_EQ(parse_bytes("512MB"), 512000000ULL);
  EXPECT_EQ(parse_bytes("1.5G"), 3ULL << 29);
  EXPECT_EQ(parse_bytes("1000"), 1000ULL);
  EXPECT_EQ(parse_bytes("1e9"), 1000000000ULL);
}

TEST(Bytes, RejectsNonsenseWithAHint) {
  EXPECT_THROW(parse_bytes("lots"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("5 parsecs"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("-3GiB"), std::invalid_argument);
  try {
    parse_bytes("12XB");
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("6GiB"), std::string::npos);
  }
}

TEST(Bytes, FormatsWithBinaryUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3ULL << 30), "3.00 GiB");
}

}  // namespace
}  // namespace fitsum::util
