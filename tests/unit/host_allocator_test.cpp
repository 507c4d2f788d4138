// util/host_allocator.h: training processes raise TCMalloc's release rate unless the environment sets one.
#include <cstdlib>

#include <gtest/gtest.h>

#include "fitsum/util/host_allocator.h"

namespace fitsum::test {
namespace {

TEST(HostAllocator, TrainingSetsTcmallocsReleaseRateUnlessTheEnvironmentDoes) {
  if (!util::host_allocator_is_tcmalloc()) {
    EXPECT_FALSE(FITSUM_LINKED_TCMALLOC) << "the test programs are linked with TCMalloc, yet malloc is not its";
    EXPECT_EQ(util::host_allocator_release_rate(), -1.0);
    GTEST_SKIP() << "malloc is not TCMalloc in this build";
  }
  const double initial = util::host_allocator_release_rate();
  ASSERT_GE(initial, 0.0) << "TCMalloc's extension interface was not built in (gperftools' headers missing)";
  ASSERT_NE(initial, util::kTrainingReleaseRate);
  // The user's setting stands: the rate TCMalloc read from the environment at start-up is left alone.
  ASSERT_EQ(::setenv("TCMALLOC_RELEASE_RATE", "3", 1), 0);
  util::tune_host_allocator_for_training();
  EXPECT_EQ(util::host_allocator_release_rate(), initial);
  ASSERT_EQ(::unsetenv("TCMALLOC_RELEASE_RATE"), 0);
  util::tune_host_allocator_for_training();
  EXPECT_EQ(util::host_allocator_release_rate(), util::kTrainingReleaseRate);
}

}  // namespace
}  // namespace fitsum::test
