// T5 (transformers' T5ForConditionalGeneration: v1.0, v1.1, FLAN-T5) and mT5 (MT5ForConditionalGeneration, the same
// model under model_type "mt5" with other defaults): their own config field names, pre-RMSNorm blocks with a
// relative position bias and no biases, T5's module tree (blocks), a SentencePiece tokenizer with <extra_id_*>.
#include <string>

#include "fitsum/families/config_fields.h"
#include "fitsum/families/family.h"
#include "fitsum/families/t5_style_config.h"
#include "fitsum/tokenizer/t5_tokenizer.h"

namespace fitsum::families {

namespace {

using nlohmann::json;

// transformers 4.47's T5Config.__init__ and MT5Config.__init__ attributes and defaults.
constexpr const char* kT5ConfigAttributes = R"({
  "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8,
  "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128, "dropout_rate": 0.1,
  "classifier_dropout": 0.0, "layer_norm_epsilon": 1e-06, "initializer_factor": 1.0, "feed_forward_proj": "relu",
  "use_cache": true, "is_encoder_decoder": true, "pad_token_id": 0, "eos_token_id": 1
})";
constexpr const char* kMT5ConfigAttributes = R"({
  "vocab_size": 250112, "d_model": 512, "d_kv": 64, "d_ff": 1024, "num_layers": 8, "num_heads": 6,
  "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128, "dropout_rate": 0.1,
  "classifier_dropout": 0.0, "layer_norm_epsilon": 1e-06, "initializer_factor": 1.0,
  "feed_forward_proj": "gated-gelu", "use_cache": true, "is_encoder_decoder": true, "tokenizer_class": "T5Tokenizer",
  "tie_word_embeddings": false, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0
})";

constexpr const char* kT5 = "t5";
constexpr const char* kMT5 = "mt5";

// T5Config's defaults (t5-small) and MT5Config's (mt5-small: gated-gelu, untied), for fields a config.json leaves out.
struct T5Defaults {
  std::int64_t vocab_size, d_ff, num_layers, num_heads;
  const char* feed_forward_proj;
  bool tie_word_embeddings;
};
constexpr T5Defaults kT5Defaults{32128, 2048, 6, 8, "relu", true};
constexpr T5Defaults kMT5Defaults{250112, 1024, 8, 6, "gated-gelu", false};

// The architecture every T5 is: pre-RMSNorm, relative bias, no biases, unscaled scores, no embedding scale, T5's
// module tree. T5's nn.Embedding has no padding_idx.
void set_t5_layout(model::ModelConfig& c) {
  c.normalize_before = true;
  c.final_layer_norm = true;
  c.layernorm_embedding = false;
  c.position_embedding = model::PositionEmbedding::relative;
  c.module_layout = model::ModuleLayout::blocks;
  c.max_position_embeddings = model::kNoPositionLimit;
  c.normalization = model::Normalization::rms_norm;
  c.linear_bias = false;
  c.scale_attention_scores = false;
  c.scale_embedding = false;
  c.has_final_logits_bias = false;
  c.embedding_padding_idx = -1;
}

void read_t5_feed_forward(const json& j, const T5Defaults& d, model::ModelConfig& c, const std::string& source) {
  // feed_forward_proj "relu" (v1.0) or "gated-gelu" (v1.1: gelu_new); explicit dense_act_fn / is_gated_act win, as
  // they do when PretrainedConfig sets the remaining fields after T5Config's own.
  const std::string projection = field<std::string>(j, "feed_forward_proj", d.feed_forward_proj, source);
  const bool gated = projection.rfind("gated-", 0) == 0;
  std::string activation = gated ? projection.substr(6) : projection;
  if (projection == "gated-gelu") activation = "gelu_new";
  c.gated_ffn = field<bool>(j, "is_gated_act", gated, source);
  c.activation_function = model::activation_from_string(field<std::string>(j, "dense_act_fn", activation, source));
}

}  // namespace

model::ModelConfig read_t5_config(const json& j, const std::string& model_type, const std::string& source) {
  const bool mt5 = model_type == kMT5;
  const T5Defaults& d = mt5 ? kMT5Defaults : kT5Defaults;
  model::ModelConfig c;
  c.model_type = model_type;
  c.vocab_size = field<std::int64_t>(j, "vocab_size", d.vocab_size, source);
  c.d_model = field<std::int64_t>(j, "d_model", 512, source);
  c.head_dim = field<std::int64_t>(j, "d_kv", 64, source);
  c.encoder_ffn_dim = c.decoder_ffn_dim = field<std::int64_t>(j, "d_ff", d.d_ff, source);
  c.encoder_layers = field<std::int64_t>(j, "num_layers", d.num_layers, source);
  c.decoder_layers = field<std::int64_t>(j, "num_decoder_layers", c.encoder_layers, source);
  c.encoder_attention_heads = c.decoder_attention_heads = field<std::int64_t>(j, "num_heads", d.num_heads, source);
  c.relative_attention_num_buckets = field<std::int64_t>(j, "relative_attention_num_buckets", 32, source);
  c.relative_attention_max_distance = field<std::int64_t>(j, "relative_attention_max_distance", 128, source);
  // T5 uses dropout_rate everywhere: after each block, on the attention probabilities, inside the feed-forward.
  c.dropout = c.attention_dropout = c.activation_dropout = field<double>(j, "dropout_rate", 0.1, source);
  c.layer_norm_eps = field<double>(j, "layer_norm_epsilon", 1e-6, source);
  c.init_std = field<double>(j, "initializer_factor", 1.0, source);
  read_t5_feed_forward(j, d, c, source);
  c.tie_word_embeddings = field<bool>(j, "tie_word_embeddings", d.tie_word_embeddings, source);
  c.pad_token_id = token_field(j, "pad_token_id", 0, source);
  c.eos_token_id = token_field(j, "eos_token_id", 1, source);
  c.bos_token_id = c.pad_token_id;  // T5 has no <s>
  c.decoder_start_token_id = token_field(j, "decoder_start_token_id", c.pad_token_id, source);
  c.forced_eos_token_id = token_field(j, "forced_eos_token_id", -1, source);
  set_t5_layout(c);
  // The d_model^-0.5 rescale before a tied head: transformers < 5 rescales exactly when the head is tied;
  // transformers 5 writes the switch apart (scale_decoder_outputs, false for v1.1) and saves v1.1 models as tied to
  // model.shared when their head is. Its mT5 always ties (unless the checkpoint stores a different head) and never
  // rescales; no released mT5 is tied.
  c.scale_decoder_outputs = field<bool>(j, "scale_decoder_outputs", mt5 ? false : c.tie_word_embeddings, source);
  return c;
}

// T5's own field names; what T5Config.to_dict would write for them.
void write_t5_config(const model::ModelConfig& c, json& j) {
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.d_model;
  j["d_kv"] = c.encoder_head_dim();
  j["d_ff"] = c.encoder_ffn_dim;
  j["num_layers"] = c.encoder_layers;
  j["num_decoder_layers"] = c.decoder_layers;
  j["num_heads"] = c.encoder_attention_heads;
  j["relative_attention_num_buckets"] = c.relative_attention_num_buckets;
  j["relative_attention_max_distance"] = c.relative_attention_max_distance;
  j["dropout_rate"] = c.dropout;
  j["layer_norm_epsilon"] = c.layer_norm_eps;
  j["initializer_factor"] = c.init_std;
  const std::string activation = model::to_string(c.activation_function);
  j["feed_forward_proj"] = c.gated_ffn ? (activation == "gelu_new" ? "gated-gelu" : "gated-" + activation) : activation;
  j["dense_act_fn"] = activation;
  j["is_gated_act"] = c.gated_ffn;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["scale_decoder_outputs"] = c.scale_decoder_outputs;  // transformers 5 reads it; earlier versions keep it as is
  j["pad_token_id"] = c.pad_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["decoder_start_token_id"] = c.decoder_start_token_id;
  j["is_encoder_decoder"] = true;
}

json t5_derived_attributes(const json& attributes) {
  json derived = json::object();
  derived["num_decoder_layers"] = attributes.at("num_layers");  // T5Config: None means num_layers
  const auto& proj = attributes.at("feed_forward_proj");
  const auto projection = proj.is_string() ? proj.get<std::string>() : std::string();
  const auto dash = projection.find('-');
  derived["dense_act_fn"] = projection == "gated-gelu" ? "gelu_new" : projection.substr(dash + 1);
  derived["is_gated_act"] = projection.rfind("gated-", 0) == 0;
  return derived;
}


const Family& t5_family() {
  static const Family family = [] {
    Family f;
    f.name = "T5";
    // T5 was pretrained on a task mixture, each task's inputs behind its prefix; mT5 on mC4 alone, without one.
    f.model_types = {{kT5, "T5ForConditionalGeneration", "T5Config", kT5ConfigAttributes, true},
                     {kMT5, "MT5ForConditionalGeneration", "MT5Config", kMT5ConfigAttributes, false}};
    f.read_config = read_t5_config;
    f.write_config = write_t5_config;
    f.derived_attributes = t5_derived_attributes;
    f.attribute_map = {{"hidden_size", "d_model"}, {"num_attention_heads", "num_heads"},
                       {"num_hidden_layers", "num_layers"}, {"head_dim", "d_kv"}};
    f.tokenizer_class_prefixes = {"T5"};
    // A folder with spiece.model and no declaration is PEGASUS's (the registry's order), as it has always been.
    f.tokenizer_files = {};
    f.load_tokenizer = load_tokenizer_of<tokenizer::T5Tokenizer>;
    return f;
  }();
  return family;
}

}  // namespace fitsum::families
