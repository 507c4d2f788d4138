// The data.pkl of a state dict saved with torch.save (pickle protocol 2, torch.serialization's default), read by a
// restricted unpickler that understands exactly what torch.save writes for a name -> tensor mapping and refuses
// everything else by name. It builds no Python objects: the result is a list of tensor descriptions (storage key,
// dtype, offset, sizes, strides) that pytorch_bin.h checks against the archive's records before reading any data.
//
// Accepted, as torch.save writes them (pickletools.dis of a saved state dict shows the same):
//   opcodes   PROTO 2, GLOBAL, REDUCE, BUILD, BINPERSID, MARK, STOP, EMPTY_DICT, SETITEM(S), EMPTY_TUPLE,
//             TUPLE(1/2/3), BINUNICODE, BININT(1/2), LONG1, NEWTRUE, NEWFALSE, NONE, (LONG_)BINPUT, (LONG_)BINGET
//   globals   collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter and the
//             typed storages torch.{Float,Double,Half,BFloat16,Long,Int,Short,Char,Byte,Bool}Storage
// The top level must be a dict (or OrderedDict, whose `_metadata` attribute arrives through BUILD and is ignored)
// from names to tensors. Containers nest at most kMaxPickleDepth deep and cannot refer to themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

namespace fitsum::io {

struct PickledTensor {
  std::string name;
  std::string storage_key;  // the record "<archive>/data/<storage_key>" holds the storage's bytes
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::int64_t storage_numel = 0;  // elements of the storage, as the pickle states it
  std::int64_t storage_offset = 0;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
};

constexpr int kMaxPickleDepth = 16;
constexpr std::size_t kMaxPickleBytes = std::size_t{256} << 20;

// Interprets `size` bytes of data.pkl. Throws std::runtime_error naming `source` and the byte offset of the first
// opcode, global or value that torch.save would not have written.
std::vector<PickledTensor> read_state_dict_pickle(const unsigned char* data, std::size_t size,
                                                  const std::string& source);

}  // namespace fitsum::io
