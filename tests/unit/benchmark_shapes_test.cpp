// The benchmark shapes built in code equal the config files users can read (configs/, data/pegasus), and the
// FLOP count of a training step matches a hand count.
#include <algorithm>
#include <thread>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fitsum/families/family.h"
#include "fitsum/io/hf_config.h"
#include "fitsum/model/config.h"
#include "fitsum/util/threads.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

TEST(BenchmarkShapes, EqualTheConfigFiles) {
  const std::vector<std::pair<std::string, fs::path>> shapes = {{"tiny", source_dir() / "configs" / "pegasus-tiny"},
                                                                {"small", source_dir() / "configs" / "pegasus-small"},
                                                                {"base", source_dir() / "configs" / "pegasus-base"},
                                                                {"large", source_dir() / "data" / "pegasus"}};
  for (const auto& [name, dir] : shapes) {
    const auto built = model::pegasus_shape(name);
    const auto file = io::read_model_config(dir);
    EXPECT_EQ(built.vocab_size, file.vocab_size) << name;
    EXPECT_EQ(built.d_model, file.d_model) << name;
    EXPECT_EQ(built.encoder_layers, file.encoder_layers) << name;
    EXPECT_EQ(built.decoder_layers, file.decoder_layers) << name;
    EXPECT_EQ(built.encoder_attention_heads, file.encoder_attention_heads) << name;
    EXPECT_EQ(built.decoder_attention_heads, file.decoder_attention_heads) << name;
    EXPECT_EQ(built.encoder_ffn_dim, file.encoder_ffn_dim) << name;
    EXPECT_EQ(built.decoder_ffn_dim, file.decoder_ffn_dim) << name;
    EXPECT_EQ(built.dropout, file.dropout) << name;
    EXPECT_EQ(built.attention_dropout, file.attention_dropout) << name;
    EXPECT_EQ(built.activation_dropout, file.activation_dropout) << name;
    EXPECT_EQ(built.activation_function, file.activation_function) << name;
    EXPECT_EQ(built.max_position_embeddings, file.max_position_embeddings) << name;
    EXPECT_EQ(built.scale_embedding, file.scale_embedding) << name;
  }
  EXPECT_THROW(model::pegasus_shape("huge"), std::invalid_argument);
}

// `fitsum bench train --shape pegasus-x-base` (and the other released long-input shapes of the families) builds the
// model of the checkpoint's config.json, kept whole in configs/<shape>.
TEST(BenchmarkShapes, NamedFamilyShapesEqualTheConfigFiles) {
  const std::vector<std::string> names = {"pegasus-x-base", "pegasus-x-large", "long-t5-tglobal-base"};
  for (const auto& name : names) {
    const auto* shape = families::find_shape(name);
    ASSERT_NE(shape, nullptr) << name;
    const auto built = io::model_config_from_hf(nlohmann::json::parse(shape->config_json), name);
    const auto file = io::read_model_config(source_dir() / "configs" / name);
    EXPECT_EQ(io::model_config_to_hf(built).dump(1), io::model_config_to_hf(file).dump(1)) << name;
    EXPECT_EQ(built.model_type, file.model_type) << name;
  }
  EXPECT_EQ(families::find_shape("pegasus-x-huge"), nullptr);
  EXPECT_EQ(families::shape_names(), "pegasus-x-base, pegasus-x-large, long-t5-tglobal-base");
}

TEST(BenchmarkShapes, TrainingFlopsCountEveryProduct) {
  model::ModelConfig c;
  c.vocab_size = 10;
  c.d_model = 4;
  c.encoder_layers = 1;
  c.decoder_layers = 1;
  c.encoder_attention_heads = c.decoder_attention_heads = 2;
  c.encoder_ffn_dim = c.decoder_ffn_dim = 8;
  // batch 1, source 3, target 2; per forward:
  //   encoder: 4 projections 2*3*4*4 = 384, scores + values 2 * 2*3*4*3 = 144, ffn 2 * 2*3*4*8 = 384
  //   decoder: self 4 * 2*2*4*4 = 256 + 2 * 2*2*4*2 = 64; cross q,o 2 * 2*2*4*4 = 128, k,v 2 * 2*3*4*4 = 192,
  //            scores + values 2 * 2*2*4*3 = 96; ffn 2 * 2*2*4*8 = 256
  //   head 2*2*4*10 = 160
  const double forward = 384 + 144 + 384 + 256 + 64 + 128 + 192 + 96 + 256 + 160;
  EXPECT_DOUBLE_EQ(model::training_matmul_flops(c, 1, 3, 2), 3 * forward);
}

TEST(Threads, DefaultGivesTheCoresToOnePoolOnly) {
  const auto defaults = util::default_thread_settings();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(defaults.update, 1);
  if (util::blas_threading() == util::BlasThreading::own_pool) {
    // OpenBLAS with threads of its own: it gets the cores, LibTorch one thread.
    EXPECT_EQ(defaults.intra_op, 1);
    EXPECT_EQ(defaults.blas, cores);
  } else {
    // The products run on LibTorch's intra-op threads (MKL, OpenBLAS with OpenMP) or on one: LibTorch gets them.
    EXPECT_EQ(defaults.intra_op, cores);
    EXPECT_EQ(defaults.blas, 0);
  }
}

TEST(Threads, ProcessesOnOneMachineShareItsCores) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool blas_pool = util::blas_threading() == util::BlasThreading::own_pool;
  const auto widest = [&](const util::ThreadSettings& s) { return blas_pool ? s.blas : s.intra_op; };
  EXPECT_EQ(widest(util::default_thread_settings(1)), cores);
  EXPECT_EQ(widest(util::default_thread_settings(2)), std::max(1, cores / 2));
  EXPECT_EQ(widest(util::default_thread_settings(cores + 1)), 1);  // never none
  // The narrow pool stays one thread; a count the user gives is kept whatever the processes.
  EXPECT_EQ(blas_pool ? util::default_thread_settings(2).intra_op : util::default_thread_settings(2).blas,
            blas_pool ? 1 : 0);
  util::ThreadSettings requested;
  requested.intra_op = 3;
  requested.blas = 5;
  const auto resolved = util::resolve_thread_settings(requested, 4);
  EXPECT_EQ(resolved.intra_op, 3);
  EXPECT_EQ(resolved.blas, 5);
  EXPECT_EQ(resolved.update, 1);
}

TEST(Threads, TheBlasIsNamedAndItsThreadingKnown) {
  // Debian's LibTorch reaches OpenBLAS (make test installs libopenblas0-pthread); PyPI's links MKL.
  const auto description = util::blas_description();
  const auto threading = util::blas_threading();
  if (description.rfind("OpenBLAS", 0) == 0) {
    EXPECT_NE(threading, util::BlasThreading::unknown) << description;
  } else if (description.find("Math Kernel Library") != std::string::npos) {
    EXPECT_EQ(description.find(" for "), std::string::npos) << description;  // the version, not the sentence
    EXPECT_EQ(threading, util::BlasThreading::intra_op_pool) << description;
  } else {
    // Another BLAS is named by LibTorch's build configuration, not left "unknown BLAS".
    EXPECT_EQ(description.rfind("BLAS_INFO=", 0), 0u) << description;
  }
  // The count a product runs on, as the threading says.
  const util::IntraOpThreadsGuard two(2);
  switch (threading) {
    case util::BlasThreading::intra_op_pool:
      EXPECT_EQ(util::blas_threads(), 2);
      break;
    case util::BlasThreading::single:
      EXPECT_EQ(util::blas_threads(), 1);
      break;
    case util::BlasThreading::own_pool:
      EXPECT_GE(util::blas_threads(), 1);
      break;
    case util::BlasThreading::unknown:
      EXPECT_EQ(util::blas_threads(), 0);
      break;
  }
}

TEST(Threads, OnlyAnUnknownSlowBlasIsSuspectedOfBeingTheReferenceOne) {
  // OpenBLAS measures 2 GFLOP/s on a machine busy with other processes (its threads wait on each other): that is no
  // reason to blame the BLAS. What LibTorch names only by its build configuration is suspected when slow.
  EXPECT_FALSE(util::reference_blas_suspected("OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH Cooperlake", 2.0));
  EXPECT_FALSE(util::reference_blas_suspected("Intel(R) oneAPI Math Kernel Library Version 2024.2", 2.0));
  EXPECT_TRUE(util::reference_blas_suspected("BLAS_INFO=generic", 5.0));
  EXPECT_TRUE(util::reference_blas_suspected("unknown BLAS", 19.0));
  EXPECT_FALSE(util::reference_blas_suspected("BLAS_INFO=generic", 150.0));
  EXPECT_TRUE(util::optimised_blas(util::blas_description())) << util::blas_description();
}

}  // namespace
}  // namespace fitsum::test
