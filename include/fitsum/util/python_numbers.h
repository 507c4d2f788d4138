// Numbers as Python's int() and float() read them, which is how Hugging Face's HfArgumentParser reads an int or
// float flag and PretrainedConfig.update_from_string an int or float config field. Decimal only: "010" is 10 and
// "00042" is 42 (C's strtol with base 0 reads them as octal 8 and 34), "0x10" and the hexadecimal float "0x1p-3" are
// refused; "1_000", a leading sign and surrounding whitespace are read as Python reads them; float() reads "nan",
// "inf" and "infinity" in any case, and a decimal past the double range as inf ("1e400"). Range checks are the
// caller's: a flag says which values it takes.
//
// Python's int() also reads non-ASCII decimal digits (Arabic-Indic, fullwidth, ...); these functions read ASCII
// digits only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fitsum::util {

// Throws std::invalid_argument for anything Python's int() refuses ("'0x10' is not a decimal integer ...") and for
// an integer outside int64 ("... is out of range ...").
std::int64_t parse_python_int(std::string_view text);

// Throws std::invalid_argument for anything Python's float() refuses. NaN and infinities come back as they are.
double parse_python_float(std::string_view text);

// The shortest decimal text that reads back as exactly `value` ("0.0001", "1e-08", "nan", "-inf"): how a parsed
// number is handed on as text.
std::string exact_decimal(double value);

}  // namespace fitsum::util
