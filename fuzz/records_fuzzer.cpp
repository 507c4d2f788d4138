// libFuzzer target: the dataset record readers (JSON Lines, JSON array, csv; the first byte picks one, and whether
// the rest is stored plain, gzip-compressed, or as a raw deflate stream behind a gzip header, so that both valid and
// damaged gzip streams are read) and the pre-tokenized example builder on arbitrary bytes. A malformed record may
// only be a BadRecord (the reader carries on) or a runtime_error for a broken file.
#include <zlib.h>

#include <string>
#include <vector>

#include "fitsum/data/dataset.h"
#include "fitsum/data/records.h"
#include "fuzz_support.h"

namespace {

// `text` as one gzip member.
std::string gzip(std::string_view text) {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) return "";
  std::string out(deflateBound(&z, static_cast<uLong>(text.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const char* names[] = {"records.jsonl", "records.json", "records.csv"};
  const auto text = fitsum::fuzz::as_text(data + 1, size - 1);
  std::string stored(text);
  switch (data[0] / 3 % 3) {
    case 1:
      stored = gzip(text);
      break;
    case 2:  // a gzip header (no flags) in front of the bytes, which inflate then reads as deflate data
      stored = std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10) + stored;
      break;
    default:
      break;
  }
  const auto file = fitsum::fuzz::input_file(names[data[0] % 3], stored);
  fitsum::data::DataOptions options;
  options.max_source_length = 1 + data[0] % 64;
  options.max_target_length = 1 + data[0] % 16;
  fitsum::fuzz::expect_only_documented_errors([&] {
    fitsum::data::RecordReader reader(file);
    fitsum::data::Record record;
    for (int i = 0; i < 10000; ++i) {
      try {
        if (!reader.next(record)) break;
        (void)fitsum::data::make_example(record, file, nullptr, 96103, options);
      } catch (const fitsum::data::BadRecord&) {
        // the reader stays usable after a bad record
      }
    }
  });
  return 0;
}
