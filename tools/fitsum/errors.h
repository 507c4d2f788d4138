// How fitsum reports a failure: one line on stderr, "fitsum: error: <message>", and an exit status (1 for a bad file
// or state, 2 for bad usage, 3 when no plan fits the memory budget, what a command asked for otherwise). LibTorch's
// c10::Error carries a stack trace in what(); only its message is shown unless FITSUM_DEBUG=1 asks for everything.
#pragma once

#include <exception>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace fitsum::cli {

// Prints the exception in flight as one line (or CLI11's help/version text) and returns the exit status.
int report_exception(std::exception_ptr error, CLI::App& app);

// `message` on one line: line breaks become "; ", other control characters \xNN escapes, and very long messages
// are shortened (a tensor name from a hostile file can hold anything).
std::string one_line(std::string_view message);

}  // namespace fitsum::cli
