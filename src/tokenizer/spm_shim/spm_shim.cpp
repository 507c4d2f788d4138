// Implements spm_shim.h on top of SentencePiece's C++ API. This file is the only one that includes
// <sentencepiece_processor.h>; it is built into its own shared library (libfitsum_sentencepiece.so), never into
// fitsum_core, for the reason given in spm_shim.h. Exceptions never cross the C boundary.
#include "spm_shim.h"

#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

#define FITSUM_SPM_EXPORT extern "C" __attribute__((visibility("default")))

struct fitsum_spm_model {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

thread_local std::string last_error;

int64_t fail(std::string message) {
  last_error = std::move(message);
  return -1;
}

template <typename T>
int64_t copy_out(const T* data, size_t count, T* out, size_t capacity) {
  if (out != nullptr && count > 0) {
    std::memcpy(out, data, sizeof(T) * (count < capacity ? count : capacity));
  }
  return static_cast<int64_t>(count);
}

bool valid_id(const fitsum_spm_model* model, int32_t id) { return id >= 0 && id < model->processor.GetPieceSize(); }

}  // namespace

FITSUM_SPM_EXPORT int fitsum_spm_abi_version(void) { return FITSUM_SPM_ABI_VERSION; }

FITSUM_SPM_EXPORT const char* fitsum_spm_last_error(void) { return last_error.c_str(); }

namespace {

template <typename LoadFunction>
fitsum_spm_model* load_with(LoadFunction load) {
  try {
    auto* model = new fitsum_spm_model();
    const auto status = load(model->processor);
    if (!status.ok()) {
      last_error = status.ToString();
      delete model;
      return nullptr;
    }
    return model;
  } catch (const std::exception& e) {
    last_error = e.what();
    return nullptr;
  }
}

}  // namespace

FITSUM_SPM_EXPORT fitsum_spm_model* fitsum_spm_load(const char* path) {
  return load_with([&](sentencepiece::SentencePieceProcessor& processor) { return processor.Load(path); });
}

FITSUM_SPM_EXPORT fitsum_spm_model* fitsum_spm_load_serialized(const char* data, size_t size) {
  return load_with([&](sentencepiece::SentencePieceProcessor& processor) {
    return processor.LoadFromSerializedProto(std::string_view(data, size));
  });
}

FITSUM_SPM_EXPORT void fitsum_spm_free(fitsum_spm_model* model) { delete model; }

FITSUM_SPM_EXPORT int32_t fitsum_spm_piece_size(const fitsum_spm_model* model) {
  return model->processor.GetPieceSize();
}

FITSUM_SPM_EXPORT int32_t fitsum_spm_unk_id(const fitsum_spm_model* model) { return model->processor.unk_id(); }

FITSUM_SPM_EXPORT int fitsum_spm_is_unknown(const fitsum_spm_model* model, int32_t id) {
  return valid_id(model, id) && model->processor.IsUnknown(id) ? 1 : 0;
}

FITSUM_SPM_EXPORT int fitsum_spm_is_control(const fitsum_spm_model* model, int32_t id) {
  return valid_id(model, id) && model->processor.IsControl(id) ? 1 : 0;
}

FITSUM_SPM_EXPORT int64_t fitsum_spm_encode(const fitsum_spm_model* model, const char* text, size_t size, int32_t* ids,
                                            size_t capacity) {
  try {
    std::vector<int> encoded;
    const auto status = model->processor.Encode(std::string_view(text, size), &encoded);
    if (!status.ok()) {
      return fail(status.ToString());
    }
    static_assert(sizeof(int) == sizeof(int32_t), "SentencePiece ids are int");
    return copy_out(reinterpret_cast<const int32_t*>(encoded.data()), encoded.size(), ids, capacity);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

FITSUM_SPM_EXPORT int64_t fitsum_spm_decode(const fitsum_spm_model* model, const int32_t* ids, size_t count, char* text,
                                            size_t capacity) {
  try {
    std::vector<int> pieces(ids, ids + count);
    for (const int id : pieces) {
      if (!valid_id(model, id)) {
        return fail("piece id " + std::to_string(id) + " is outside the model's 0.." +
                    std::to_string(model->processor.GetPieceSize() - 1));
      }
    }
    std::string decoded;
    const auto status = model->processor.Decode(pieces, &decoded);
    if (!status.ok()) {
      return fail(status.ToString());
    }
    return copy_out(decoded.data(), decoded.size(), text, capacity);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

FITSUM_SPM_EXPORT int64_t fitsum_spm_id_to_piece(const fitsum_spm_model* model, int32_t id, char* text,
                                                 size_t capacity) {
  if (!valid_id(model, id)) {
    return fail("piece id " + std::to_string(id) + " is outside the model's 0.." +
                std::to_string(model->processor.GetPieceSize() - 1));
  }
  const std::string& piece = model->processor.IdToPiece(id);
  return copy_out(piece.data(), piece.size(), text, capacity);
}
