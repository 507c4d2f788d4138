// libFuzzer target: the dataset record readers (JSON Lines, JSON array, csv; the first byte picks one) and the
// pre-tokenized example builder on arbitrary bytes. A malformed record may only be a BadRecord (the reader carries
// on) or a runtime_error for a broken file.
#include "fitsum/data/dataset.h"
#include "fitsum/data/records.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const char* names[] = {"records.jsonl", "records.json", "records.csv"};
  const auto file = fitsum::fuzz::input_file(names[data[0] % 3], fitsum::fuzz::as_text(data + 1, size - 1));
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
