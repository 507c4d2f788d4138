// Implements tests/support/torch_archive.h.
#include "torch_archive.h"

#include <cstring>

#include "fitsum/io/torch_zip.h"

namespace fitsum::test {

namespace {

void put(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

std::string stored_zip(const std::vector<ArchiveRecord>& records) {
  std::string out;
  std::string directory;
  for (const auto& r : records) {
    const std::uint64_t local = out.size();
    const auto crc = io::zip_crc32(reinterpret_cast<const unsigned char*>(r.data.data()), r.data.size());
    put(out, 0x04034b50, 4);
    put(out, 0, 2);
    put(out, 0x0808, 2);
    put(out, r.method, 2);
    put(out, 0, 4);
    put(out, 0, 4);  // crc and sizes deferred, as torch.save's writer does
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, r.name.size(), 2);
    put(out, 0, 2);
    out += r.name;
    out += r.data;
    put(directory, 0x02014b50, 4);
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0x0808, 2);
    put(directory, r.method, 2);
    put(directory, 0, 4);
    put(directory, crc, 4);
    put(directory, r.data.size(), 4);
    put(directory, r.data.size(), 4);
    put(directory, r.name.size(), 2);
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0, 4);
    put(directory, local, 4);
    directory += r.name;
  }
  const std::uint64_t directory_offset = out.size();
  out += directory;
  const std::uint64_t zip64_end = out.size();
  put(out, 0x06064b50, 4);
  put(out, 44, 8);
  put(out, 45, 2);
  put(out, 45, 2);
  put(out, 0, 4);
  put(out, 0, 4);
  put(out, records.size(), 8);
  put(out, records.size(), 8);
  put(out, directory.size(), 8);
  put(out, directory_offset, 8);
  put(out, 0x07064b50, 4);
  put(out, 0, 4);
  put(out, zip64_end, 8);
  put(out, 1, 4);
  put(out, 0x06054b50, 4);
  put(out, 0, 2);
  put(out, 0, 2);
  put(out, records.size(), 2);
  put(out, records.size(), 2);
  put(out, directory.size(), 4);
  put(out, directory_offset, 4);
  put(out, 0, 2);
  return out;
}

std::string pickle_string(const std::string& text) {
  std::string out = "X";
  put(out, text.size(), 4);
  return out + text;
}

std::string pickle_int(std::int64_t value) {
  std::string out;
  if (value >= 0 && value < 256) {
    out = "K";
    put(out, static_cast<std::uint64_t>(value), 1);
  } else if (value >= 0 && value < 65536) {
    out = "M";
    put(out, static_cast<std::uint64_t>(value), 2);
  } else if (value >= INT32_MIN && value <= INT32_MAX) {
    out = "J";
    put(out, static_cast<std::uint32_t>(static_cast<std::int32_t>(value)), 4);
  } else {
    out = "\x8a\x08";
    put(out, static_cast<std::uint64_t>(value), 8);
  }
  return out;
}

std::string pickle_ints(const std::vector<std::int64_t>& values) {
  std::string out = "(";
  for (const auto v : values) out += pickle_int(v);
  return out + "t";
}

std::string pickle_tensor(const std::string& storage_class, const std::string& key, std::int64_t numel,
                          std::int64_t offset, const std::vector<std::int64_t>& sizes,
                          const std::vector<std::int64_t>& strides) {
  std::string out = "ctorch._utils\n_rebuild_tensor_v2\n(";
  out += "(" + pickle_string("storage") + "ctorch\n" + storage_class + "\n" + pickle_string(key) +
         pickle_string("cpu") + pickle_int(numel) + "tQ";
  out += pickle_int(offset) + pickle_ints(sizes) + pickle_ints(strides);
  out += "\x89";                           // requires_grad False
  out += "ccollections\nOrderedDict\n)R";  // backward hooks
  return out + "tR";
}

std::string pickle_state_dict(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out = "\x80\x02}(";
  for (const auto& [name, value] : entries) out += pickle_string(name) + value;
  return out + "u.";
}

std::string torch_archive(const std::string& pickle, const std::vector<std::pair<std::string, std::string>>& storages) {
  std::vector<ArchiveRecord> records = {{"archive/data.pkl", pickle}};
  for (const auto& [key, bytes] : storages) records.push_back({"archive/data/" + key, bytes});
  records.push_back({"archive/version", "3\n"});
  return stored_zip(records);
}

std::string float_bytes(const std::vector<float>& values) {
  std::string out(values.size() * sizeof(float), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

}  // namespace fitsum::test
