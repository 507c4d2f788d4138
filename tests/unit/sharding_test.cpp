// ZeRO stage 1's partition of the parameters (optim/sharding.h) and the optimizer shard files of a checkpoint
// (io/checkpoint_folders.h).
#include <gtest/gtest.h>

#include "fitsum/io/checkpoint_folders.h"
#include "fitsum/optim/sharding.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

TEST(Sharding, LargestTensorsGoFirstToTheLeastLoadedProcess) {
  const std::vector<std::int64_t> elements = {3, 10, 4, 8, 5};
  const auto owner = optim::partition_by_size(elements, 2);
  // Largest first: 10 -> 0; 8 -> 1; 5 -> 1 (8 < 10); 4 -> 0 (10 < 13); 3 -> 1 (13 < 14).
  EXPECT_EQ(owner, (std::vector<int>{1, 0, 0, 1, 1}));
  EXPECT_EQ(optim::largest_share(elements, {3, 10, 4, 8, 5}, 2), 16u);
  // Equal sizes go round the processes, the lowest rank first.
  EXPECT_EQ(optim::partition_by_size({7, 7, 7, 7}, 3), (std::vector<int>{0, 1, 2, 0}));
  // One process owns everything; more processes than tensors leave some with none.
  EXPECT_EQ(optim::partition_by_size({1, 2}, 1), (std::vector<int>{0, 0}));
  EXPECT_EQ(optim::partition_by_size({1, 2}, 4), (std::vector<int>{1, 0}));
  EXPECT_EQ(optim::largest_share({1, 2}, {100, 200}, 4), 200u);
  EXPECT_THROW(optim::partition_by_size({1}, 0), std::invalid_argument);
}

TEST(Sharding, TheBroadcastBucketIsTheLargestShareOfSmallTensorsAtMostABucket) {
  const std::int64_t bucket_elements = optim::kBroadcastBucketBytes / 4;
  // Small tensors only: 300 + 100 on one process, 200 + 150 on the other -> 400 elements x 4 B.
  EXPECT_EQ(optim::largest_broadcast_bucket({300, 200, 150, 100}, 2), 1600u);
  // A tensor of a bucket or more travels alone and needs none: the big one on process 0, 20 + 10 on process 1.
  EXPECT_EQ(optim::largest_broadcast_bucket({bucket_elements * 3, 10, 20}, 2), 120u);
  // Many small tensors: at most one bucket.
  EXPECT_EQ(optim::largest_broadcast_bucket(std::vector<std::int64_t>(100, bucket_elements / 4), 2),
            static_cast<std::uint64_t>(optim::kBroadcastBucketBytes));
  EXPECT_EQ(optim::largest_broadcast_bucket({300, 200}, 1), 0u);
}

TEST(Sharding, TheStateFilesOfACheckpointAreTheWholeFileOrEveryShard) {
  const auto dir = temp_dir("optimizer-shards");
  EXPECT_EQ(io::optimizer_shard_name(0, 2), "optimizer-00001-of-00002.safetensors");
  fs::create_directories(dir / "none");
  EXPECT_THROW(
      {
        try {
          io::optimizer_state_files(dir / "none");
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("has no optimizer state"), std::string::npos) << e.what();
          throw;
        }
      },
      std::runtime_error);
  fs::create_directories(dir / "whole");
  write_bytes(dir / "whole" / "optimizer.safetensors", "x");
  EXPECT_EQ(io::optimizer_state_files(dir / "whole"), std::vector<fs::path>{dir / "whole" / "optimizer.safetensors"});
  fs::create_directories(dir / "sharded");
  for (const auto* name : {"optimizer-00002-of-00002.safetensors", "optimizer-00001-of-00002.safetensors",
                           "optimizer-00001-of-00002.safetensors.tmp-12", "optimizer-1-of-2.safetensors"}) {
    write_bytes(dir / "sharded" / name, "x");
  }
  EXPECT_EQ(io::optimizer_state_files(dir / "sharded"),
            (std::vector<fs::path>{dir / "sharded" / "optimizer-00001-of-00002.safetensors",
                                   dir / "sharded" / "optimizer-00002-of-00002.safetensors"}));
  fs::remove(dir / "sharded" / "optimizer-00002-of-00002.safetensors");
  try {
    io::optimizer_state_files(dir / "sharded");
    ADD_FAILURE() << "a missing shard was not noticed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("lacks optimizer-00002-of-00002.safetensors (optimizer shard 2 of 2)"),
              std::string::npos)
        << e.what();
  }
  write_bytes(dir / "sharded" / "optimizer-00001-of-00003.safetensors", "x");
  try {
    io::optimizer_state_files(dir / "sharded");
    ADD_FAILURE() << "shards of two runs were not noticed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("mixes optimizer shards"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fitsum::test
