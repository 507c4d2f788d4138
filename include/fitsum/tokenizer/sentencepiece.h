// A SentencePiece model, used through libfitsum_sentencepiece.so, which is opened at run time (dlopen with
// RTLD_LOCAL | RTLD_DEEPBIND) instead of linked: Debian's libsentencepiece carries a protobuf that clashes with
// LibTorch's in one process (src/tokenizer/spm_shim/spm_shim.h explains). Ids here are SentencePiece's own; the
// PEGASUS id mapping lives in pegasus_tokenizer.h.
//
// The library is looked for, in order: at $FITSUM_SENTENCEPIECE_LIB; beside the running executable, in its
// parent folder, and in ../lib (an installed layout); at the build folder recorded when fitsum was compiled.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

struct fitsum_spm_model;

namespace fitsum::tokenizer {

namespace fs = std::filesystem;

// The file name of the shim library, as built beside the fitsum executable.
inline constexpr const char* kSentencePieceLibraryName = "libfitsum_sentencepiece.so";

// Where the shim library was loaded from; loads it on first use. Throws std::runtime_error naming the places
// searched when it is nowhere.
fs::path sentencepiece_library_path();

class SentencePieceModel {
 public:
  // Loads a serialized model (e.g. spiece.model); throws std::runtime_error naming the file on failure.
  explicit SentencePieceModel(const fs::path& model_file);
  // Loads a serialized ModelProto built in memory (tokenizer_json.h); `source` names the file it came from.
  static SentencePieceModel from_serialized(const std::string& serialized, const fs::path& source);
  ~SentencePieceModel();
  SentencePieceModel(SentencePieceModel&& other) noexcept;
  SentencePieceModel& operator=(SentencePieceModel&& other) noexcept;
  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;

  std::int32_t piece_size() const;
  std::int32_t unk_id() const;
  bool is_unknown(std::int32_t id) const;
  bool is_control(std::int32_t id) const;
  std::string id_to_piece(std::int32_t id) const;

  // Appends the piece ids of `text` (deterministic Viterbi, as EncodeAsIds) to `ids`.
  void encode(std::string_view text, std::vector<std::int32_t>& ids) const;
  std::vector<std::int32_t> encode(std::string_view text) const;

  // DecodeIds: unknown pieces render as " \u2047 ", control pieces as nothing. Throws std::invalid_argument for
  // an id outside 0 .. piece_size()-1.
  std::string decode(const std::vector<std::int32_t>& ids) const;

  const fs::path& file() const { return file_; }

 private:
  SentencePieceModel() = default;
  fitsum_spm_model* model_ = nullptr;
  fs::path file_;
};

}  // namespace fitsum::tokenizer
