// Implements tools/fitsum/errors.h.
#include "errors.h"

#include <cstdlib>
#include <iostream>
#include <new>
#include <stdexcept>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "fitsum/memory/fit.h"

namespace fitsum::cli {

namespace {

constexpr std::size_t kMaxMessageBytes = 4000;

bool debug_requested() {
  const char* value = std::getenv("FITSUM_DEBUG");
  return value != nullptr && std::string_view(value) == "1";
}

int print(std::string_view message, int status) {
  std::cerr << "fitsum: error: " << one_line(message) << "\n";
  return status;
}

// The subcommand that was being parsed, for the usage hint.
std::string command_of(CLI::App& app) {
  const auto used = app.get_subcommands();
  return used.empty() ? "fitsum --help" : "fitsum " + used.front()->get_name() + " --help";
}

}  // namespace

std::string one_line(std::string_view message) {
  std::string out;
  static const char* hex = "0123456789abcdef";
  for (std::size_t i = 0; i < message.size() && out.size() < kMaxMessageBytes; ++i) {
    const auto c = static_cast<unsigned char>(message[i]);
    if (c == '\n') {
      while (!out.empty() && (out.back() == ' ' || out.back() == '.')) out.pop_back();
      if (i + 1 < message.size()) out += "; ";
    } else if (c == '\r') {
      continue;
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (out.size() >= kMaxMessageBytes) out += " ... (message shortened)";
  return out;
}

int report_exception(std::exception_ptr error, CLI::App& app) {
  try {
    std::rethrow_exception(error);
  } catch (const ExitStatus& status) {
    return status.code;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return print(std::string(e.what()) + "; see '" + command_of(app) + "' for the options", 2);
  } catch (const nlohmann::json::exception& e) {
    // A JSON value of the wrong type or a missing key that a reader did not check itself.
    std::string why = e.what();
    if (const auto end = why.find("] "); why.rfind("[json.exception", 0) == 0 && end != std::string::npos) {
      why.erase(0, end + 2);
    }
    return print("a JSON file has an unexpected value: " + why + "; check the files given to this command", 1);
  } catch (const c10::Error& e) {
    if (debug_requested()) return print(e.what(), 1);
    return print(e.msg() + " (LibTorch; FITSUM_DEBUG=1 shows where)", 1);
  } catch (const memory::PlanDoesNotFit& e) {
    return print(e.what(), 3);
  } catch (const std::invalid_argument& e) {
    return print(e.what(), 2);
  } catch (const std::bad_alloc&) {
    return print(
        "out of memory: an allocation failed; lower the batch size or sequence lengths, or set "
        "--max_memory to let fitsum plan within a budget",
        1);
  } catch (const std::exception& e) {
    return print(e.what(), 1);
  } catch (...) {
    return print("an unknown error stopped fitsum; run with FITSUM_DEBUG=1 and report it", 1);
  }
}

}  // namespace fitsum::cli
