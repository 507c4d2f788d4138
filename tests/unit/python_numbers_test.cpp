// Numbers as Hugging Face's argument parser reads them (Python's int() and float()), checked against what CPython
// 3.11 returns for each text.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "fitsum/util/python_numbers.h"

namespace fitsum::util {
namespace {

TEST(PythonNumbers, IntegersAreDecimalWithLeadingZeros) {
  EXPECT_EQ(parse_python_int("010"), 10);    // strtoll with base 0: 8
  EXPECT_EQ(parse_python_int("00042"), 42);  // strtoll with base 0: 34
  EXPECT_EQ(parse_python_int("0"), 0);
  EXPECT_EQ(parse_python_int("-0"), 0);
  EXPECT_EQ(parse_python_int("+3"), 3);
  EXPECT_EQ(parse_python_int(" \t7\n"), 7);
  EXPECT_EQ(parse_python_int("1_000"), 1000);
  EXPECT_EQ(parse_python_int("0_0"), 0);
  EXPECT_EQ(parse_python_int("-9223372036854775808"), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(parse_python_int("9223372036854775807"), std::numeric_limits<std::int64_t>::max());
}

TEST(PythonNumbers, IntegersPythonRefusesAreRefused) {
  for (const char* text :
       {"0x10", "0o7", "0b1", "1e3", "1.0", "", " ", "1__0", "_1", "1_", "+_1", "1 0", "--1", "+", "inf"}) {
    try {
      parse_python_int(text);
      ADD_FAILURE() << "'" << text << "' was read as an integer";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("is not a decimal integer"), std::string::npos) << e.what();
    }
  }
  try {
    parse_python_int("9223372036854775808");
    ADD_FAILURE() << "2^63 was read as an int64";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

TEST(PythonNumbers, FloatsAsPythonReadsThem) {
  EXPECT_EQ(parse_python_float("5e-05"), 5e-05);
  EXPECT_EQ(parse_python_float(" 1.5 "), 1.5);
  EXPECT_EQ(parse_python_float(".5"), 0.5);
  EXPECT_EQ(parse_python_float("5."), 5.0);
  EXPECT_EQ(parse_python_float("+.5e-3"), 0.0005);
  EXPECT_EQ(parse_python_float("010"), 10.0);
  EXPECT_EQ(parse_python_float("1_000.5"), 1000.5);
  EXPECT_EQ(parse_python_float("1e1_0"), 1e10);
  EXPECT_EQ(parse_python_float("1e300"), 1e300);
  EXPECT_EQ(parse_python_float("1e400"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(parse_python_float("-Infinity"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(parse_python_float("iNF"), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(parse_python_float("nan")));
  EXPECT_TRUE(std::isnan(parse_python_float("-NaN")));
  EXPECT_EQ(parse_python_float("0.1"), 0.1);  // correctly rounded, as Python's
}

TEST(PythonNumbers, FloatsPythonRefusesAreRefused) {
  for (const char* text :
       {"0x1p-3", "0x10", "1_e5", "1e", "e5", ".", "", "infinit", "nan(0)", "1.0f", "1,5", "1e+", "--1", "1__0.5"}) {
    try {
      parse_python_float(text);
      ADD_FAILURE() << "'" << text << "' was read as a float";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("is not a number"), std::string::npos) << e.what();
    }
  }
}

TEST(PythonNumbers, ExactDecimalReadsBackToTheSameDouble) {
  EXPECT_EQ(exact_decimal(0.1), "0.1");
  EXPECT_EQ(exact_decimal(5e-05), "5e-05");
  EXPECT_EQ(exact_decimal(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(exact_decimal(std::nan("")), "nan");
  for (const double value : {1.0 / 3.0, 2.0 / 3.0, 1e-308, 4.9e-324, 1.7976931348623157e308, 123456789.123456789}) {
    EXPECT_EQ(std::strtod(exact_decimal(value).c_str(), nullptr), value) << exact_decimal(value);
  }
}

}  // namespace
}  // namespace fitsum::util
