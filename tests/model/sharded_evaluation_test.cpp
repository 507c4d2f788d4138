// Evaluation sharded over the processes of a data-parallel job (EvaluationOptions::shards), with threads standing for
// the processes and an in-memory sum for the collective: each shard runs only its batches (every shards-th of the
// one-process batching), and every shard ends with the one-process result, to the bit: the loss, ROUGE, gen_len and
// every prediction.
#include <condition_variable>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/families/family.h"
#include "fitsum/io/model_loader.h"
#include "fitsum/tokenizer/tokenizer.h"
#include "fitsum/train/evaluation.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

// A sum over `parties` threads, in place, as c10d's allreduce does over processes.
class ThreadSum {
 public:
  explicit ThreadSum(int parties) : parties_(parties) {}
  void sum(at::Tensor& tensor) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto round = round_;
    total_ = arrived_ == 0 ? tensor.clone() : total_ + tensor;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      result_ = total_;
      ++round_;
      ready_.notify_all();
    } else {
      ready_.wait(lock, [&] { return round_ != round; });
    }
    tensor.copy_(result_);
    ++calls_;
  }
  int calls() const { return calls_; }

 private:
  const int parties_;
  std::mutex mutex_;
  std::condition_variable ready_;
  int arrived_ = 0;
  long round_ = 0;
  int calls_ = 0;
  at::Tensor total_, result_;
};

model::Seq2SeqLM random_model() {
  io::ModelSource source;
  source.config_name = (source_dir() / "configs" / "pegasus-tiny").string();
  return io::load_model(source, 7).model;
}

void expect_same_result(const train::EvaluationResult& got, const train::EvaluationResult& want, const char* who) {
  ASSERT_FALSE(got.interrupted) << who;
  ASSERT_TRUE(got.eval_loss.has_value()) << who;
  EXPECT_EQ(*got.eval_loss, *want.eval_loss) << who;
  EXPECT_EQ(got.gen_len, want.gen_len) << who;
  ASSERT_TRUE(got.rouge.has_value()) << who;
  for (auto type : eval::kRougeTypes) {
    EXPECT_EQ((*got.rouge)[type].precision, (*want.rouge)[type].precision) << who;
    EXPECT_EQ((*got.rouge)[type].recall, (*want.rouge)[type].recall) << who;
    EXPECT_EQ((*got.rouge)[type].fmeasure, (*want.rouge)[type].fmeasure) << who;
  }
  ASSERT_EQ(got.predictions.size(), want.predictions.size()) << who;
  for (std::size_t i = 0; i < want.predictions.size(); ++i) {
    EXPECT_EQ(got.predictions[i].index, want.predictions[i].index) << who;
    EXPECT_EQ(got.predictions[i].generated_ids, want.predictions[i].generated_ids) << who << " example " << i;
    EXPECT_EQ(got.predictions[i].summary, want.predictions[i].summary) << who;
    EXPECT_EQ(got.predictions[i].reference, want.predictions[i].reference) << who;
  }
}

TEST(ShardedEvaluation, EachShardRunsItsBatchesAndEndsWithTheOneProcessResult) {
  FITSUM_REQUIRE_SHARED();
  const auto tokenizer = families::load_tokenizer(shared_dir() / "data" / "pegasus");
  torch::manual_seed(5);
  std::vector<data::Example> examples;
  // 7 examples in batches of 2: shard 0 of 2 runs batches 0 and 2, shard 1 batches 1 and 3 (a single example).
  for (int i = 0; i < 7; ++i) {
    data::Example e;
    auto ids = torch::randint(5, 20000, {4 + 3 * i}, torch::kLong);
    e.input_ids.assign(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel());
    e.input_ids.push_back(tokenizer->eos_id());
    examples.push_back(std::move(e));
  }
  train::EvaluationOptions options;
  options.batch_size = 2;
  options.generation.num_beams = 2;
  options.generation.max_length = 12;
  options.generation.pad_token_id = tokenizer->pad_id();
  options.generation.eos_token_id = tokenizer->eos_id();
  options.generation.decoder_start_token_id = tokenizer->pad_id();
  auto model = random_model();
  // References that score: every other example's own prediction, the others some of its input.
  const auto first = train::evaluate_model(*model, examples, tokenizer.get(), options, c10::Device(c10::kCPU));
  for (std::size_t i = 0; i < examples.size(); ++i) {
    const auto& generated = first.predictions[i].generated_ids;
    examples[i].labels =
        i % 2 == 0 ? std::vector<data::TokenId>(generated.begin() + 1, generated.end())
                   : std::vector<data::TokenId>(examples[i].input_ids.begin() + 2, examples[i].input_ids.end());
  }
  const auto want = train::evaluate_model(*model, examples, tokenizer.get(), options, c10::Device(c10::kCPU));
  ASSERT_GT((*want.rouge)[eval::RougeType::kRouge1].fmeasure, 0.2);
  ASSERT_LT((*want.rouge)[eval::RougeType::kRouge1].fmeasure, 0.99);

  ThreadSum sum(2);
  std::vector<train::EvaluationResult> results(2);
  std::vector<std::vector<std::string>> progress(2);
  std::vector<std::thread> threads;
  for (int shard = 0; shard < 2; ++shard) {
    threads.emplace_back([&, shard] {
      auto sharded = options;
      sharded.shard = shard;
      sharded.shards = 2;
      sharded.sum_over_processes = [&](at::Tensor& t) { sum.sum(t); };
      sharded.on_progress = [&, shard](const char* phase, std::size_t done, std::size_t total) {
        progress[static_cast<std::size_t>(shard)].push_back(std::string(phase) + " " + std::to_string(done) + "/" +
                                                            std::to_string(total));
      };
      auto own_model = random_model();  // each "process" its own copy of the weights
      results[static_cast<std::size_t>(shard)] =
          train::evaluate_model(*own_model, examples, tokenizer.get(), sharded, c10::Device(c10::kCPU));
    });
  }
  for (auto& t : threads) t.join();
  const std::vector<std::string> own_batches = {"eval loss 1/2", "eval loss 2/2", "generate 1/2", "generate 2/2"};
  EXPECT_EQ(progress[0], own_batches);
  EXPECT_EQ(progress[1], own_batches);
  expect_same_result(results[0], want, "shard 0");
  expect_same_result(results[1], want, "shard 1");
  EXPECT_EQ(sum.calls(), 2 * 4);  // the loss table, the lengths, the ids and the ROUGE table, on each
}

TEST(ShardedEvaluation, ShardsOutsideTheWorldAreRefused) {
  auto model = random_model();
  train::EvaluationOptions options;
  options.shard = 2;
  options.shards = 2;
  options.sum_over_processes = [](at::Tensor&) {};
  EXPECT_THROW(train::evaluate_model(*model, {}, nullptr, options, c10::Device(c10::kCPU)), std::invalid_argument);
  options.shard = 1;
  options.sum_over_processes = nullptr;
  EXPECT_THROW(train::evaluate_model(*model, {}, nullptr, options, c10::Device(c10::kCPU)), std::invalid_argument);
}

}  // namespace
}  // namespace fitsum::test
