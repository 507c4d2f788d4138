// Implements include/fitsum/tokenizer/sentencepiece.h: finds and opens libfitsum_sentencepiece.so once per process
// and forwards to its C functions (src/tokenizer/spm_shim/spm_shim.h).
#include "fitsum/tokenizer/sentencepiece.h"

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>
#include <utility>

#include "fitsum/util/files.h"
#include "spm_shim/spm_shim.h"

#if defined(__SANITIZE_ADDRESS__)
#define FITSUM_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FITSUM_SANITIZED 1
#endif
#endif
#ifndef FITSUM_SANITIZED
#define FITSUM_SANITIZED 0
#endif

namespace fitsum::tokenizer {

namespace {

// The shim's functions, resolved once. The library stays loaded for the life of the process.
struct ShimApi {
  fs::path path;
  decltype(&fitsum_spm_last_error) last_error = nullptr;
  decltype(&fitsum_spm_load) load = nullptr;
  decltype(&fitsum_spm_load_serialized) load_serialized = nullptr;
  decltype(&fitsum_spm_free) free = nullptr;
  decltype(&fitsum_spm_piece_size) piece_size = nullptr;
  decltype(&fitsum_spm_unk_id) unk_id = nullptr;
  decltype(&fitsum_spm_is_unknown) is_unknown = nullptr;
  decltype(&fitsum_spm_is_control) is_control = nullptr;
  decltype(&fitsum_spm_encode) encode = nullptr;
  decltype(&fitsum_spm_decode) decode = nullptr;
  decltype(&fitsum_spm_id_to_piece) id_to_piece = nullptr;
};

std::vector<fs::path> candidate_paths() {
  if (const char* override_path = std::getenv("FITSUM_SENTENCEPIECE_LIB"); override_path && *override_path) {
    return {fs::path(override_path)};
  }
  std::vector<fs::path> candidates;
  std::error_code error;
  const fs::path executable = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    // The fitsum binary sits beside the library in the build folder; test and bench binaries one level below.
    const fs::path dir = executable.parent_path();
    candidates.push_back(dir / kSentencePieceLibraryName);
    candidates.push_back(dir.parent_path() / kSentencePieceLibraryName);
    candidates.push_back(dir.parent_path() / "lib" / kSentencePieceLibraryName);
  }
#ifdef FITSUM_SENTENCEPIECE_BUILD_PATH
  candidates.emplace_back(FITSUM_SENTENCEPIECE_BUILD_PATH);
#endif
  return candidates;
}

template <typename Function>
void resolve(void* handle, const fs::path& path, const char* name, Function& function) {
  function = reinterpret_cast<Function>(::dlsym(handle, name));
  if (function == nullptr) {
    throw std::runtime_error("'" + path.string() + "' has no symbol " + name +
                             ": it is not a fitsum SentencePiece library of this version; rebuild fitsum");
  }
}

// RTLD_LOCAL keeps the shim's symbols (and SentencePiece's protobuf) out of the global namespace; RTLD_DEEPBIND
// makes them resolve against each other before anything LibTorch has loaded. Sanitizer runtimes refuse
// RTLD_DEEPBIND, so a sanitized build loads the shim into a link namespace of its own, which isolates its protobuf
// as well and keeps the uninstrumented shim away from the sanitizer runtime.
void* open_isolated(const fs::path& path) {
#if FITSUM_SANITIZED
  return ::dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
#else
  return ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#endif
}

ShimApi open_shim() {
  const std::vector<fs::path> candidates = candidate_paths();
  std::string searched;
  for (const fs::path& path : candidates) {
    searched += "\n  " + path.string();
    std::error_code error;
    if (!fs::is_regular_file(path, error)) {
      continue;
    }
    void* handle = open_isolated(path);
    if (handle == nullptr) {
      const char* reason = ::dlerror();
      throw std::runtime_error("cannot load '" + path.string() + "': " + (reason ? reason : "unknown reason") +
                               " (is libsentencepiece0 installed?)");
    }
    ShimApi api;
    api.path = path;
    decltype(&fitsum_spm_abi_version) abi_version = nullptr;
    resolve(handle, path, "fitsum_spm_abi_version", abi_version);
    if (abi_version() != FITSUM_SPM_ABI_VERSION) {
      throw std::runtime_error("'" + path.string() + "' speaks interface version " + std::to_string(abi_version()) +
                               ", this fitsum needs " + std::to_string(FITSUM_SPM_ABI_VERSION) + ": rebuild fitsum");
    }
    resolve(handle, path, "fitsum_spm_last_error", api.last_error);
    resolve(handle, path, "fitsum_spm_load", api.load);
    resolve(handle, path, "fitsum_spm_load_serialized", api.load_serialized);
    resolve(handle, path, "fitsum_spm_free", api.free);
    resolve(handle, path, "fitsum_spm_piece_size", api.piece_size);
    resolve(handle, path, "fitsum_spm_unk_id", api.unk_id);
    resolve(handle, path, "fitsum_spm_is_unknown", api.is_unknown);
    resolve(handle, path, "fitsum_spm_is_control", api.is_control);
    resolve(handle, path, "fitsum_spm_encode", api.encode);
    resolve(handle, path, "fitsum_spm_decode", api.decode);
    resolve(handle, path, "fitsum_spm_id_to_piece", api.id_to_piece);
    return api;
  }
  throw std::runtime_error(std::string("cannot find ") + kSentencePieceLibraryName +
                           " (fitsum's SentencePiece library); looked at:" + searched +
                           "\nkeep it beside the fitsum executable or point FITSUM_SENTENCEPIECE_LIB at it");
}

const ShimApi& shim() {
  // A throwing initializer leaves the static uninitialized, so a later call searches again.
  static const ShimApi api = open_shim();
  return api;
}

// Calls `fill(buffer, capacity)` (which returns the full result size, or -1) until the buffer was large enough.
template <typename T, typename Fill>
std::vector<T> read_sized(std::size_t first_guess, const char* what, Fill fill) {
  std::vector<T> buffer(first_guess);
  for (;;) {
    const std::int64_t size = fill(buffer.data(), buffer.size());
    if (size < 0) {
      throw std::invalid_argument(std::string("SentencePiece ") + what + " failed: " + shim().last_error());
    }
    if (static_cast<std::size_t>(size) <= buffer.size()) {
      buffer.resize(static_cast<std::size_t>(size));
      return buffer;
    }
    buffer.resize(static_cast<std::size_t>(size));
  }
}

}  // namespace

fs::path sentencepiece_library_path() { return shim().path; }

SentencePieceModel::SentencePieceModel(const fs::path& model_file) : file_(model_file) {
  util::require_regular_file(model_file, "the SentencePiece model");  // a FIFO would block SentencePiece's read
  model_ = shim().load(model_file.c_str());
  if (model_ == nullptr) {
    throw std::runtime_error("cannot load SentencePiece model '" + model_file.string() + "': " + shim().last_error());
  }
}

SentencePieceModel SentencePieceModel::from_serialized(const std::string& serialized, const fs::path& source) {
  SentencePieceModel model;
  model.file_ = source;
  model.model_ = shim().load_serialized(serialized.data(), serialized.size());
  if (model.model_ == nullptr) {
    throw std::runtime_error("cannot load the SentencePiece model rebuilt from '" + source.string() +
                             "': " + shim().last_error());
  }
  return model;
}

SentencePieceModel::~SentencePieceModel() {
  if (model_ != nullptr) {
    shim().free(model_);
  }
}

SentencePieceModel::SentencePieceModel(SentencePieceModel&& other) noexcept
    : model_(std::exchange(other.model_, nullptr)), file_(std::move(other.file_)) {}

SentencePieceModel& SentencePieceModel::operator=(SentencePieceModel&& other) noexcept {
  if (this != &other) {
    if (model_ != nullptr) {
      shim().free(model_);
    }
    model_ = std::exchange(other.model_, nullptr);
    file_ = std::move(other.file_);
  }
  return *this;
}

std::int32_t SentencePieceModel::piece_size() const { return shim().piece_size(model_); }
std::int32_t SentencePieceModel::unk_id() const { return shim().unk_id(model_); }
bool SentencePieceModel::is_unknown(std::int32_t id) const { return shim().is_unknown(model_, id) != 0; }
bool SentencePieceModel::is_control(std::int32_t id) const { return shim().is_control(model_, id) != 0; }

std::string SentencePieceModel::id_to_piece(std::int32_t id) const {
  const std::vector<char> piece = read_sized<char>(32, "id_to_piece", [&](char* out, std::size_t capacity) {
    return shim().id_to_piece(model_, id, out, capacity);
  });
  return std::string(piece.begin(), piece.end());
}

void SentencePieceModel::encode(std::string_view text, std::vector<std::int32_t>& ids) const {
  // Pieces rarely outnumber bytes; NFKC expansions ("\u00BD" -> "1\u20442") can, and then the shim says how many.
  const std::size_t start = ids.size();
  std::size_t capacity = text.size() / 2 + 8;
  for (;;) {
    ids.resize(start + capacity);
    const std::int64_t count = shim().encode(model_, text.data(), text.size(), ids.data() + start, capacity);
    if (count < 0) {
      ids.resize(start);
      throw std::invalid_argument("SentencePiece cannot encode the text: " + std::string(shim().last_error()));
    }
    if (static_cast<std::size_t>(count) <= capacity) {
      ids.resize(start + static_cast<std::size_t>(count));
      return;
    }
    capacity = static_cast<std::size_t>(count);
  }
}

std::vector<std::int32_t> SentencePieceModel::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  encode(text, ids);
  return ids;
}

std::string SentencePieceModel::decode(const std::vector<std::int32_t>& ids) const {
  const std::vector<char> text = read_sized<char>(ids.size() * 8 + 16, "decode", [&](char* out, std::size_t capacity) {
    return shim().decode(model_, ids.data(), ids.size(), out, capacity);
  });
  return std::string(text.begin(), text.end());
}

}  // namespace fitsum::tokenizer
