// `fitsum tokenize`: reads a dataset file (jsonl, json or csv) record by record, tokenizes the text and summary
// columns with the model's PEGASUS tokenizer, and writes one JSON line per record: "id" (when present),
// "input_ids", and "labels" when the record has a summary. The output is itself a valid pre-tokenized input for
// the other commands. Takes the same data flags as `train`.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "commands.h"
#include "data_flags.h"
#include "fitsum/data/dataset.h"
#include "fitsum/families/family.h"
#include "fitsum/tokenizer/tokenizer.h"
#include "fitsum/util/files.h"
#include "fitsum/util/output_paths.h"
#include "hub_flags.h"

namespace fitsum::cli {

namespace {

namespace fs = std::filesystem;

struct TokenizeArgs {
  fs::path model;
  fs::path tokenizer_name;
  fs::path input_file;
  fs::path output_file;
  std::optional<std::int64_t> max_samples;
  data::DataOptions data;
  io::ModelSource hub;  // --revision, --cache_dir, --token of a Hub id
};

void run_tokenize(TokenizeArgs args) {
  if (args.model.empty() && args.tokenizer_name.empty()) {
    throw std::invalid_argument(
        "fitsum tokenize needs --model DIR (a Hugging Face model folder with its tokenizer files) or "
        "--tokenizer_name DIR");
  }
  if (args.max_samples && *args.max_samples < 1) {
    throw std::invalid_argument("--max_samples must be at least 1");
  }
  args.data.validate_values();  // before config.json may lower the lengths
  util::require_output_files({{"--output_file", args.output_file}}, {{"--input_file", args.input_file}});
  // Hub ids: the tokenizer files (and the model's config.json), from the cache or the Hub.
  const auto options = hub_options(args.hub);
  args.model = io::resolve_model_folder(args.model.string(), {true, false, false, true}, options);
  args.tokenizer_name =
      io::resolve_model_folder(args.tokenizer_name.string(), io::HubFileSet::tokenizer_only(), options);
  if (!args.model.empty()) {
    clamp_lengths_to_model_config(args.data, args.model);
  }
  args.data.validate();
  const std::filesystem::path tokenizer_dir = args.tokenizer_name.empty() ? args.model : args.tokenizer_name;
  const auto tokenizer_owner = families::load_tokenizer(tokenizer_dir);
  const tokenizer::Tokenizer& tokenizer = *tokenizer_owner;
  // With --model, every id must fit its vocabulary: a --tokenizer_name of another model is refused at the first id
  // past it, naming both sizes, as train and eval refuse it.
  std::int64_t vocab_size = tokenizer.vocab_size();
  if (!args.model.empty() && std::filesystem::is_regular_file(args.model / "config.json")) {
    const auto config_file = args.model / "config.json";
    const nlohmann::json config = util::read_json_file(config_file);
    const auto it = config.find("vocab_size");
    if (it != config.end()) {
      if (!it->is_number_integer() || it->get<std::int64_t>() < 1) {
        throw std::runtime_error("'" + config_file.string() + "': vocab_size must be a positive integer");
      }
      vocab_size = it->get<std::int64_t>();
    }
  }
  data::ExampleReader reader(args.input_file, &tokenizer, vocab_size, args.data, args.max_samples);

  std::printf("fitsum tokenize\n");
  std::printf("  tokenizer          %s from %s (%d ids)\n", std::string(tokenizer.name()).c_str(),
              tokenizer_dir.c_str(), tokenizer.vocab_size());
  std::printf("  input_file         %s (%s)\n", args.input_file.c_str(), data::to_string(reader.format()));
  std::printf("  output_file        %s\n", args.output_file.c_str());
  std::printf("  text_column        %s\n", args.data.text_column.c_str());
  std::printf("  summary_column     %s\n", args.data.summary_column.c_str());
  if (!args.data.source_prefix.empty()) std::printf("  source_prefix      '%s'\n", args.data.source_prefix.c_str());
  std::printf("  max_source_length  %lld\n", static_cast<long long>(args.data.max_source_length));
  std::printf("  max_target_length  %lld\n", static_cast<long long>(args.data.max_target_length));
  std::printf("  max_samples        %s\n", args.max_samples ? std::to_string(*args.max_samples).c_str() : "all");
  std::printf("  skip_bad_records   %s\n", args.data.skip_bad_records ? "yes" : "no");
  std::fflush(stdout);

  const auto start = std::chrono::steady_clock::now();
  util::AtomicFileWriter writer(args.output_file);
  std::string buffer;
  data::Example example;
  while (reader.next(example)) {
    data::append_json_line(buffer, example);
    if (buffer.size() >= (1u << 20)) {
      writer.write(buffer.data(), buffer.size());
      buffer.clear();
    }
  }
  writer.write(buffer.data(), buffer.size());
  writer.commit();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const data::ReadStats& stats = reader.stats();
  for (const std::string& message : stats.first_skipped) {
    std::cerr << "fitsum: skipped " << message << "\n";
  }
  if (stats.skipped_bad > stats.first_skipped.size()) {
    std::cerr << "fitsum: ... and " << stats.skipped_bad - stats.first_skipped.size() << " more malformed records\n";
  }
  std::printf("wrote %zu records to %s in %.2f s (%.0f records/s)\n", stats.examples, args.output_file.c_str(), seconds,
              seconds > 0 ? static_cast<double>(stats.examples) / seconds : 0.0);
  std::printf("  %s\n", stats.summary(args.data).c_str());
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  CLI::App* command =
      app.add_subcommand("tokenize", "Tokenize a dataset file (jsonl, json, csv) and write token ids as JSON Lines");
  auto args = std::make_shared<TokenizeArgs>();
  // A folder, or a Hub id (org/name) looked up in the Hugging Face cache.
  const CLI::Validator folder_or_hub_id(
      [](std::string& name) {
        return std::filesystem::is_directory(name) || io::is_repo_id(name) ? "" : "Directory does not exist: " + name;
      },
      "DIR|ORG/NAME");
  command
      ->add_option("--model", args->model,
                   "Hugging Face model folder, or Hub id; its tokenizer files and config.json are read")
      ->check(folder_or_hub_id);
  command
      ->add_option("--tokenizer_name", args->tokenizer_name,
                   "Folder (or Hub id) with the tokenizer files to use instead of --model's")
      ->check(folder_or_hub_id);
  add_hub_flags(*command, args->hub);
  command->add_option("--input_file", args->input_file, "Dataset file: .jsonl, .json or .csv")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--output_file", args->output_file, "Where to write the token ids (JSON Lines)")->required();
  command->add_option_function<std::int64_t>(
      "--max_samples", [args](const std::int64_t& value) { args->max_samples = value; },
      "Tokenize only the first N records");
  add_tokenization_flags(*command, args->data);
  command->callback([args]() { run_tokenize(*args); });
}

}  // namespace fitsum::cli
