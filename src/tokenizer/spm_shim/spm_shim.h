// The C interface of libfitsum_sentencepiece, a small shared library that wraps SentencePiece.
//
// Why a separate library: Debian's libsentencepiece.so.0 carries its own protobuf-lite (3.14) and exports those
// symbols, while LibTorch loads libprotobuf 3.21. Linked into one binary, one protobuf interposes the other and
// the process crashes while loading (or aborts on a version check). fitsum_core therefore never links
// SentencePiece: it opens this library with dlopen(RTLD_LOCAL | RTLD_DEEPBIND), so that SentencePiece and its
// protobuf resolve against each other and stay invisible to the rest of the process. Only plain C types cross
// the boundary.
//
// Output buffers follow one convention: the caller passes a buffer and its capacity; the function returns the
// number of elements the full result has (which may exceed the capacity; then only `capacity` were written and
// the caller retries with a larger buffer), or -1 on error, with the reason in fitsum_spm_last_error().
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Bumped whenever a signature below changes, so that a stale library is refused instead of misused.
#define FITSUM_SPM_ABI_VERSION 2

typedef struct fitsum_spm_model fitsum_spm_model;

int fitsum_spm_abi_version(void);

// The reason for the last failure on this thread ("" when none).
const char* fitsum_spm_last_error(void);

// Loads a serialized SentencePiece model file; NULL on failure.
fitsum_spm_model* fitsum_spm_load(const char* path);
// Loads a model from its serialized bytes (a ModelProto built in memory); NULL on failure.
fitsum_spm_model* fitsum_spm_load_serialized(const char* data, size_t size);
void fitsum_spm_free(fitsum_spm_model* model);

// Number of pieces in the model (its own ids are 0 .. size-1).
int32_t fitsum_spm_piece_size(const fitsum_spm_model* model);
int32_t fitsum_spm_unk_id(const fitsum_spm_model* model);
int fitsum_spm_is_unknown(const fitsum_spm_model* model, int32_t id);
int fitsum_spm_is_control(const fitsum_spm_model* model, int32_t id);

// Encodes UTF-8 text (`size` bytes, need not be NUL-terminated) to piece ids, deterministic Viterbi.
int64_t fitsum_spm_encode(const fitsum_spm_model* model, const char* text, size_t size, int32_t* ids, size_t capacity);

// Decodes piece ids to UTF-8 text (not NUL-terminated); unknown pieces render as " \xE2\x81\x87 ".
int64_t fitsum_spm_decode(const fitsum_spm_model* model, const int32_t* ids, size_t count, char* text, size_t capacity);

// The piece string of an id (UTF-8, not NUL-terminated).
int64_t fitsum_spm_id_to_piece(const fitsum_spm_model* model, int32_t id, char* text, size_t capacity);

#ifdef __cplusplus
}
#endif
