// The family registry (families/family.h): every model_type finds its family, an unknown one is refused with the
// supported list, each family writes its own transformers class back, and the per-family facts that used to be
// string comparisons elsewhere (BART's <s>, T5's task prefix, the tokenizer a folder declares) come from the record.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/data/dataset.h"
#include "fitsum/families/family.h"
#include "fitsum/io/hf_config.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

using nlohmann::json;

TEST(FamilyRegistry, EveryModelTypeFindsItsFamily) {
  EXPECT_EQ(families::find_family("pegasus"), &families::pegasus_family());
  EXPECT_EQ(families::find_family("bart"), &families::bart_family());
  EXPECT_EQ(families::find_family("t5"), &families::t5_family());
  EXPECT_EQ(families::find_family("mt5"), &families::t5_family());  // mT5 is T5's model under its own name
  EXPECT_EQ(families::find_family("pegasus_x"), &families::pegasus_x_family());
  EXPECT_EQ(families::find_family("longt5"), &families::long_t5_family());
  EXPECT_EQ(families::find_family("gpt2"), nullptr);
  EXPECT_EQ(families::find_family(""), nullptr);
  EXPECT_EQ(families::supported_model_types(), "'pegasus', 'bart', 't5', 'mt5', 'pegasus_x' and 'longt5'");
}

TEST(FamilyRegistry, AnUnknownModelTypeIsRefusedWithTheSupportedOnes) {
  const auto message = error_of<std::invalid_argument>([] { families::family_for("gpt2", "m/config.json"); });
  EXPECT_EQ(message, "m/config.json: config field 'model_type' is 'gpt2'; fitsum supports 'pegasus', 'bart', 't5', "
                     "'mt5', 'pegasus_x' and 'longt5'");
  // The config reader's error is the registry's.
  EXPECT_EQ(error_of<std::invalid_argument>([] { io::model_config_from_hf({{"model_type", "gpt2"}}, "m/config.json"); }),
            message);
}

TEST(FamilyRegistry, EachFamilyWritesItsOwnTransformersClass) {
  const std::vector<std::pair<std::string, std::string>> expected = {{"pegasus", "PegasusForConditionalGeneration"},
                                                                     {"bart", "BartForConditionalGeneration"},
                                                                     {"t5", "T5ForConditionalGeneration"},
                                                                     {"mt5", "MT5ForConditionalGeneration"},
                                                                     {"pegasus_x", "PegasusXForConditionalGeneration"},
                                                                     {"longt5", "LongT5ForConditionalGeneration"}};
  for (const auto& [model_type, architecture] : expected) {
    const auto config = io::model_config_from_hf({{"model_type", model_type}}, model_type);
    const json written = io::model_config_to_hf(config);
    EXPECT_EQ(written["architectures"], json::array({architecture})) << model_type;
    EXPECT_EQ(written["model_type"], model_type);
    // What it writes reads back as the same config.
    EXPECT_EQ(io::model_config_to_hf(io::model_config_from_hf(written, model_type)), written) << model_type;
  }
  // An architecture the original config.json names is kept.
  const auto bart = io::model_config_from_hf({{"model_type", "bart"}}, "bart");
  EXPECT_EQ(io::model_config_to_hf(bart, {{"architectures", {"BartModel"}}})["architectures"],
            json::array({"BartModel"}));
}

TEST(FamilyRegistry, OnlyT5ExpectsASourcePrefix) {
  EXPECT_EQ(families::source_prefix_family("t5"), "T5");
  EXPECT_EQ(families::source_prefix_family("mt5"), "");  // pretrained on mC4 alone, without task prefixes
  EXPECT_EQ(families::source_prefix_family("pegasus"), "");
  EXPECT_EQ(families::source_prefix_family("bart"), "");
  EXPECT_EQ(families::source_prefix_family("gpt2"), "");
  data::DataOptions options;
  EXPECT_EQ(data::source_prefix_warning("T5", options),
            "this is a T5 model and no --source_prefix is set; T5 expects its task prefix, e.g. --source_prefix "
            "'summarize: '");
  EXPECT_EQ(data::source_prefix_warning("", options), "");
  options.source_prefix = "summarize: ";
  EXPECT_EQ(data::source_prefix_warning("T5", options), "");
}

TEST(FamilyRegistry, AnEmptyTextIsTheFamilysTemplate) {
  // BART: <s> </s> (bos 0, eos 2); PEGASUS and T5: </s>.
  using Ids = std::vector<tokenizer::TokenId>;
  EXPECT_EQ(families::empty_text_ids(io::model_config_from_hf({{"model_type", "bart"}}, "bart")), (Ids{0, 2}));
  EXPECT_EQ(families::empty_text_ids(io::model_config_from_hf({{"model_type", "pegasus"}}, "pegasus")), Ids{1});
  EXPECT_EQ(families::empty_text_ids(io::model_config_from_hf({{"model_type", "t5"}}, "t5")), Ids{1});
}

TEST(FamilyRegistry, T5ReadsAsBlocks) {
  // The feature field the model reads for T5's module tree is set by the family's reader.
  for (const char* model_type : {"t5", "mt5"}) {
    EXPECT_EQ(io::model_config_from_hf({{"model_type", model_type}}, "c").module_layout, model::ModuleLayout::blocks);
  }
  for (const char* model_type : {"pegasus", "bart"}) {
    EXPECT_EQ(io::model_config_from_hf({{"model_type", model_type}}, "c").module_layout, model::ModuleLayout::layers);
  }
}

TEST(FamilyRegistry, ATokenizerFolderSaysWhichFamilyItIs) {
  // tokenizer_config.json's tokenizer_class wins over the files present: a T5Tokenizer folder with spiece.model is
  // T5's, not PEGASUS's (the family a lone spiece.model has always meant).
  const auto dir = temp_dir("declared_t5");
  fs::copy_file(source_dir() / "data" / "pegasus" / "spiece.model", dir / "spiece.model");
  EXPECT_EQ(families::load_tokenizer(dir)->name(), "PegasusTokenizer");
  std::ofstream(dir / "tokenizer_config.json") << R"({"tokenizer_class": "T5TokenizerFast"})";
  EXPECT_EQ(families::load_tokenizer(dir)->name(), "T5Tokenizer");
  std::ofstream(dir / "tokenizer_config.json", std::ios::trunc) << R"({"tokenizer_class": "PegasusTokenizerFast"})";
  EXPECT_EQ(families::load_tokenizer(dir)->name(), "PegasusTokenizer");
}

}  // namespace
}  // namespace fitsum::test
