// Tokenization throughput on SAMSum's train split, in dialogues per second: SentencePiece alone (the baseline,
// measured in the same run), PEGASUS's id mapping on top, whole examples (dialogue + summary, truncation), and
// the streamed pipeline of `fitsum tokenize` (read, tokenize, format JSON lines; no disk write). Best of
// --repeat runs each.
//
//   bench/tokenize_throughput [--model DIR] [--input FILE] [--repeat N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fitsum/data/dataset.h"
#include "fitsum/data/records.h"
#include "fitsum/tokenizer/pegasus_tokenizer.h"

namespace {

namespace fs = std::filesystem;
using namespace fitsum;

double best_seconds(int repeat, const std::function<void()>& run) {
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path model = fs::path(FITSUM_SOURCE_DIR) / "data" / "pegasus";
  fs::path input = fs::path(FITSUM_SHARED_DIR) / "data" / "samsum" / "train.jsonl";
  if (!fs::exists(input)) {
    input = fs::path(FITSUM_SOURCE_DIR) / "data" / "samsum" / "train.jsonl";  // the bundled 300 dialogues
  }
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--model") == 0) {
      model = argv[i + 1];
    } else if (std::strcmp(argv[i], "--input") == 0) {
      input = argv[i + 1];
    } else if (std::strcmp(argv[i], "--repeat") == 0) {
      repeat = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: %s [--model DIR] [--input FILE] [--repeat N]\n", argv[0]);
      return 2;
    }
  }
  try {
    const tokenizer::PegasusTokenizer tokenizer = tokenizer::PegasusTokenizer::from_folder(model);
    const tokenizer::SentencePieceModel sentencepiece(model / "spiece.model");
    const data::DataOptions options;

    std::vector<data::Record> records;
    std::vector<std::string> dialogues;
    std::size_t bytes = 0;
    data::RecordReader reader(input);
    for (data::Record record; reader.next(record);) {
      dialogues.push_back(record.fields.value(options.text_column, std::string()));
      bytes += dialogues.back().size();
      records.push_back(std::move(record));
    }
    const double count = static_cast<double>(dialogues.size());
    std::printf("tokenize_throughput: %zu dialogues (%.1f MB) from %s, best of %d\n", dialogues.size(), bytes / 1e6,
                input.c_str(), repeat);

    std::size_t sink = 0;  // keeps the work observable
    const double sentencepiece_s = best_seconds(repeat, [&] {
      std::vector<std::int32_t> ids;
      for (const std::string& text : dialogues) {
        ids.clear();
        sentencepiece.encode(text, ids);
        sink += ids.size();
      }
    });
    const double pegasus_s = best_seconds(repeat, [&] {
      for (const std::string& text : dialogues) {
        sink += tokenizer.encode(text, 1024).size();
      }
    });
    const double examples_s = best_seconds(repeat, [&] {
      for (const data::Record& record : records) {
        sink += data::make_example(record, input, tokenizer, options).input_ids.size();
      }
    });
    const double pipeline_s = best_seconds(repeat, [&] {
      data::ExampleReader examples(input, tokenizer, options);
      std::string out;
      for (data::Example example; examples.next(example);) {
        data::append_json_line(out, example);
        if (out.size() > (1u << 20)) {
          sink += out.size();
          out.clear();
        }
      }
      sink += out.size();
    });

    std::printf("\n%-44s %10s %14s %10s\n", "stage", "seconds", "dialogues/s", "vs base");
    const auto row = [&](const char* name, double seconds) {
      std::printf("%-44s %10.3f %14.0f %9.2fx\n", name, seconds, count / seconds, sentencepiece_s / seconds);
    };
    row("SentencePiece encode (baseline)", sentencepiece_s);
    row("PegasusTokenizer encode (ids + 103, </s>)", pegasus_s);
    row("examples: dialogue + summary, truncated", examples_s);
    row("fitsum tokenize pipeline (read+tok+format)", pipeline_s);
    std::printf("\n(checksum %zu)\n", sink);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenize_throughput: %s\n", e.what());
    return 1;
  }
  return 0;
}
