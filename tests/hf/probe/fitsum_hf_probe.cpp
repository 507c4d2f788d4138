// A test-only program for the live Hugging Face comparisons (tests/hf, `make test-hf`): it loads an HF model folder
// with fitsum's loader and writes what fitsum computes, so that the Python side can compare it with transformers.
//
//   fitsum_hf_probe forward  --model DIR --batch BATCH.safetensors --out OUT.safetensors
//       BATCH holds input_ids, attention_mask, labels (int64). OUT holds `logits`, `loss` (Seq2SeqLM::forward), the
//       gradient of that loss for every trainable parameter (`grad.NAME`), and the same loss and gradients through
//       the training path (fused LM head + summed token loss / label tokens: `train_loss`, `train_grad.NAME`).
//       `--dtype float64` runs Seq2SeqLM::forward in double precision (no training path, whose fused kernels are
//       float32): at long inputs, float32's rounding of the gradients exceeds the comparison's tolerance on both
//       sides.
//   fitsum_hf_probe generate --model DIR --batch BATCH.safetensors --cases CASES.json --out OUT.json
//       CASES is a list of generate() keyword arguments (HF names). Each case starts from the folder's generation
//       config, as generate(**kwargs) does; OUT lists each case's `sequences` and `sequence_scores`.
// Both take `--adapter ADAPTER_DIR`: a PEFT LoRA adapter folder loaded onto the model (io/adapter.h), which then
// trains only what the adapter trains: the gradients written are the adapter's.
// Not installed; built with the tests. Errors go to stderr with exit status 1.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fitsum/generate/generate.h"
#include "fitsum/generate/options.h"
#include "fitsum/io/adapter.h"
#include "fitsum/io/model_loader.h"
#include "fitsum/io/safetensors.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Args {
  std::string command;
  std::string model, adapter, batch, cases, out;
  std::string dtype = "float32";  // forward: "float64" runs the model in double precision
};

Args parse(int argc, char** argv) {
  if (argc < 2) throw std::invalid_argument("usage: fitsum_hf_probe forward|generate --model DIR ...");
  Args a;
  a.command = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    std::string* target = flag == "--model"     ? &a.model
                          : flag == "--adapter" ? &a.adapter
                          : flag == "--batch"   ? &a.batch
                          : flag == "--cases"   ? &a.cases
                          : flag == "--out"     ? &a.out
                          : flag == "--dtype"   ? &a.dtype
                                                : nullptr;
    if (target == nullptr) throw std::invalid_argument("unknown flag " + flag);
    *target = argv[i + 1];
  }
  if (a.model.empty() || a.batch.empty() || a.out.empty()) {
    throw std::invalid_argument("--model, --batch and --out are required");
  }
  return a;
}

fitsum::model::Seq2SeqLM load(const Args& a) {
  fitsum::io::ModelSource source;
  source.model_name_or_path = a.model;
  auto loaded = fitsum::io::load_model(source, 0);
  if (!a.adapter.empty()) fitsum::io::load_adapter(*loaded.model, fitsum::io::open_adapter_folder(a.adapter));
  return loaded.model;
}

// Every trainable parameter's gradient under `prefix`, zeros where autograd left none (HF reports zeros as well).
void add_gradients(fitsum::model::Seq2SeqLMImpl& model, const std::string& prefix,
                   std::vector<std::pair<std::string, at::Tensor>>& out) {
  for (const auto& p : model.named_parameters()) {
    if (!p.value().requires_grad()) continue;
    const auto& g = p.value().grad();
    out.emplace_back(prefix + p.key(), g.defined() ? g.clone() : torch::zeros_like(p.value()));
  }
}

void zero_gradients(fitsum::model::Seq2SeqLMImpl& model) {
  for (auto& p : model.parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

void run_forward(const Args& a) {
  auto model = load(a);
  if (a.dtype == "float64") {
    model->to(torch::kDouble);
  } else if (a.dtype != "float32") {
    throw std::invalid_argument("--dtype is float32 or float64, not " + a.dtype);
  }
  model->train(true);  // as in training; the tests' configs set every dropout to 0
  fitsum::io::SafetensorsReader batch(a.batch);
  const auto input_ids = batch.read("input_ids");            // (B, S)
  const auto attention_mask = batch.read("attention_mask");  // (B, S)
  const auto labels = batch.read("labels");                  // (B, T), -100 ignored

  std::vector<std::pair<std::string, at::Tensor>> out;
  auto output = model->forward(input_ids, attention_mask, labels);
  output.loss.backward();
  out.emplace_back("logits", output.logits.detach().contiguous());
  out.emplace_back("loss", output.loss.detach().reshape({1}));
  add_gradients(*model, "grad.", out);
  if (a.dtype == "float64") {  // the fused training path computes in float32 only
    fitsum::io::write_safetensors(a.out, out);
    return;
  }

  // The training path: what fitsum train differentiates.
  zero_gradients(*model);
  const auto encoded = model->encode(input_ids, attention_mask);
  const auto hidden = model->decode(model->shift_tokens_right(labels), encoded, attention_mask);
  const auto token_loss = model->token_loss(hidden, labels);
  const auto loss = token_loss.sum / static_cast<double>(token_loss.tokens);
  loss.backward();
  out.emplace_back("train_loss", loss.detach().reshape({1}));
  add_gradients(*model, "train_grad.", out);
  fitsum::io::write_safetensors(a.out, out);
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  return json::parse(in);
}

void run_generate(const Args& a) {
  auto model = load(a);
  fitsum::io::SafetensorsReader batch(a.batch);
  const auto input_ids = batch.read("input_ids");
  const auto attention_mask = batch.read("attention_mask");
  const auto config = read_json((fs::path(a.model) / "config.json").string());
  const auto generation_path = fs::path(a.model) / "generation_config.json";
  // The model's generation config: generation_config.json, else config.json's generation fields (as from_pretrained).
  const auto base = fs::exists(generation_path) ? read_json(generation_path.string()) : config;

  json results = json::array();
  for (const auto& kwargs : read_json(a.cases)) {
    // generate(**kwargs): the keyword arguments override the model's generation config field by field.
    auto merged = base;
    for (const auto& [key, value] : kwargs.items()) merged[key] = value;
    merged.erase("_from_model_config");
    const auto options = fitsum::generate::generation_options_from_hf(config, merged, a.model);
    const auto result = fitsum::generate::generate(*model, input_ids, attention_mask, options);
    json entry;
    std::vector<std::vector<std::int64_t>> sequences;
    for (std::int64_t b = 0; b < result.sequences.size(0); ++b) {
      const auto row = result.sequences[b].contiguous();
      sequences.emplace_back(row.data_ptr<std::int64_t>(), row.data_ptr<std::int64_t>() + row.numel());
    }
    entry["sequences"] = sequences;
    if (result.sequence_scores.defined()) {
      const auto scores = result.sequence_scores.to(torch::kDouble).contiguous();
      entry["sequence_scores"] =
          std::vector<double>(scores.data_ptr<double>(), scores.data_ptr<double>() + scores.numel());
    }
    results.push_back(entry);
  }
  std::ofstream(a.out) << results.dump() << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto args = parse(argc, argv);
    if (args.command == "forward") {
      run_forward(args);
    } else if (args.command == "generate") {
      if (args.cases.empty()) throw std::invalid_argument("generate needs --cases CASES.json");
      run_generate(args);
    } else {
      throw std::invalid_argument("unknown command '" + args.command + "' (forward or generate)");
    }
  } catch (const std::exception& e) {
    std::cerr << "fitsum_hf_probe: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
