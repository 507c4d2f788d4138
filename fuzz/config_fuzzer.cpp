// libFuzzer target: config.json and generation_config.json. The input is one JSON document, or two separated by a
// NUL byte (config.json, then generation_config.json); each goes through the depth-bounded parser, the PEGASUS
// config adapter, the parameter arithmetic of `fitsum info`, HF's --config_overrides, and the generation options.
#include <nlohmann/json.hpp>

#include "fitsum/generate/options.h"
#include "fitsum/io/hf_config.h"
#include "fitsum/memory/static_memory.h"
#include "fitsum/model/config.h"
#include "fitsum/util/files.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = fitsum::fuzz::as_text(data, size);
  const auto documents = fitsum::fuzz::two_documents(text);  // the lambdas capture them: no structured binding
  const auto config_text = documents.first;
  const auto generation_text = documents.second;
  fitsum::fuzz::expect_only_documented_errors([&] {
    auto config = fitsum::util::parse_json(config_text, "config.json");
    const auto model = fitsum::io::model_config_from_hf(config, "config.json");
    const auto counts = fitsum::model::count_parameters(model);
    if (counts.trainable < 0 || counts.frozen < 0 || counts.total() < counts.trainable) __builtin_trap();
    (void)fitsum::memory::static_training_memory(counts, fitsum::optim::OptimizerType::adafactor,
                                                 fitsum::memory::StorageDtype::fp32);
    const auto generation = generation_text.empty()
                                ? nlohmann::json()
                                : fitsum::util::parse_json(generation_text, "generation_config.json");
    (void)fitsum::generate::generation_options_from_hf(config, generation, "fuzz").validate_for(model);
  });
  fitsum::fuzz::expect_only_documented_errors([&] {
    auto config = fitsum::util::parse_json(R"({"model_type": "pegasus", "dropout": 0.1, "vocab_size": 100,
        "d_model": 16, "encoder_attention_heads": 2, "decoder_attention_heads": 2, "scale_embedding": true})",
                                           "config.json");
    fitsum::io::apply_config_overrides(config, std::string(config_text));
    (void)fitsum::io::model_config_from_hf(config, "config.json");
  });
  return 0;
}
