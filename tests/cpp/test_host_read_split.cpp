// The rule that splits a staged gather's host rows between the GPU and the CPU
// (ops/internal/host_read_split.h): plain C++, tested without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/internal/host_read_split.h"

namespace {

using quiver::internal::HostReadSplit;

TEST(HostReadSplit, StartsAtTheFirstShare) {
  HostReadSplit split;
  EXPECT_DOUBLE_EQ(split.share(), HostReadSplit::kFirstShare);
}

TEST(HostReadSplit, MovesHalfwayToTheShareThatBalancesBothParts) {
  HostReadSplit split;
  // Equal speeds: balanced at 0.5; halfway from 0.3.
  split.update(100, 1.0f, 100, 1.0f);
  EXPECT_NEAR(split.share(), 0.4, 1e-12);
  // The GPU half as fast as the CPU: balanced at 1/3, reached within a few calls whatever
  // the share the rows were split by.
  for (int call = 0; call < 40; ++call) {
    const double share = split.share();
    const int64_t gpu_rows = static_cast<int64_t>(share * 1'000'000);
    const int64_t cpu_rows = 1'000'000 - gpu_rows;
    split.update(gpu_rows, gpu_rows / 1000.0f, cpu_rows, cpu_rows / 2000.0f);
  }
  EXPECT_NEAR(split.share(), 1.0 / 3.0, 1e-4);
}

TEST(HostReadSplit, EachLayoutLearnsItsOwn) {
  HostReadSplit a, b;  // two layouts' splits (two tables, or two GPUs)
  a.update(100, 1.0f, 100, 100.0f);  // the GPU far faster on layout a's table
  EXPECT_GT(a.share(), HostReadSplit::kFirstShare);
  EXPECT_DOUBLE_EQ(b.share(), HostReadSplit::kFirstShare);
}

TEST(HostReadSplit, StaysWithinItsBoundsSoBothSpeedsStayMeasured) {
  HostReadSplit split;
  for (int call = 0; call < 60; ++call) split.update(1000, 0.001f, 1, 1000.0f);
  EXPECT_DOUBLE_EQ(split.share(), HostReadSplit::kMaxShare);
  for (int call = 0; call < 60; ++call) split.update(1, 1000.0f, 1000, 0.001f);
  EXPECT_DOUBLE_EQ(split.share(), HostReadSplit::kMinShare);
}

TEST(HostReadSplit, IgnoresCallsWithNothingToMeasure) {
  HostReadSplit split;
  split.update(0, 1.0f, 100, 1.0f);
  split.update(100, 1.0f, 0, 1.0f);
  split.update(100, 0.0f, 100, 1.0f);
  split.update(100, 1.0f, 100, -1.0f);
  split.update(100, 1.0f, 100, std::numeric_limits<float>::quiet_NaN());
  EXPECT_DOUBLE_EQ(split.share(), HostReadSplit::kFirstShare);
}

TEST(HostReadSplit, AFixedShareHoldsUntilLearningIsAskedBack) {
  HostReadSplit split;
  split.fix(0.0);  // every host row to the CPU threads: none is read by the SMs
  EXPECT_TRUE(split.fixed());
  for (int call = 0; call < 10; ++call) split.update(1000, 0.001f, 1, 1000.0f);
  EXPECT_DOUBLE_EQ(split.share(), 0.0);
  split.fix(1.0);
  EXPECT_DOUBLE_EQ(split.share(), 1.0);
  // Learning again starts from the fixed share, within the learned bounds.
  split.fix(std::nullopt);
  EXPECT_FALSE(split.fixed());
  EXPECT_DOUBLE_EQ(split.share(), HostReadSplit::kMaxShare);
  split.update(100, 1.0f, 100, 1.0f);
  EXPECT_NEAR(split.share(), 0.5 * HostReadSplit::kMaxShare + 0.25, 1e-12);
}

TEST(HostReadSplit, ALoaderAheadOfTheModelLeavesTheGpuLessOfTheBalancedShare) {
  HostReadSplit split;
  for (int call = 0; call < 60; ++call) split.update(100, 1.0f, 100, 1.0f);
  ASSERT_NEAR(split.share(), 0.5, 1e-9);
  for (int batch = 0; batch < 5; ++batch) split.note_pace(/*loader_ahead=*/true);
  EXPECT_NEAR(split.yield(), std::pow(HostReadSplit::kYieldAhead, 5), 1e-12);
  EXPECT_NEAR(split.share(), 0.5 * std::pow(HostReadSplit::kYieldAhead, 5), 1e-9);
  // The balance is still learned beneath: the GPU now twice as fast as the CPU.
  for (int call = 0; call < 60; ++call) split.update(200, 1.0f, 100, 1.0f);
  EXPECT_NEAR(split.share(), 2.0 / 3.0 * split.yield(), 1e-9);
  // The model waited for a batch: the GPU takes part of it back, faster than it gave it.
  const double before = split.yield();
  split.note_pace(/*loader_ahead=*/false);
  EXPECT_NEAR(split.yield(), before * HostReadSplit::kReclaimBehind, 1e-12);
}

TEST(HostReadSplit, ThePaceMovesThePartWithinItsBounds) {
  HostReadSplit split;
  for (int batch = 0; batch < 200; ++batch) split.note_pace(true);
  EXPECT_DOUBLE_EQ(split.yield(), HostReadSplit::kMinYield);
  EXPECT_GE(split.share(), HostReadSplit::kMinShare);
  for (int batch = 0; batch < 8; ++batch) split.note_pace(false);
  EXPECT_DOUBLE_EQ(split.yield(), 1.0);
  EXPECT_DOUBLE_EQ(split.share(), HostReadSplit::kFirstShare);
}

TEST(HostReadSplit, AFixedShareIgnoresThePace) {
  HostReadSplit split;
  split.fix(0.4);
  for (int batch = 0; batch < 10; ++batch) split.note_pace(true);
  EXPECT_DOUBLE_EQ(split.share(), 0.4);
  // Learning again starts from the fixed share whole.
  split.fix(std::nullopt);
  EXPECT_DOUBLE_EQ(split.yield(), 1.0);
  EXPECT_DOUBLE_EQ(split.share(), 0.4);
}

TEST(HostReadSplit, NotFollowingThePaceKeepsTheBalancedShare) {
  HostReadSplit split;
  for (int call = 0; call < 60; ++call) split.update(100, 1.0f, 100, 1.0f);
  for (int batch = 0; batch < 5; ++batch) split.note_pace(true);
  ASSERT_LT(split.share(), 0.4);
  split.follow_pace(false);  // gives the GPU its whole part back at once
  EXPECT_FALSE(split.follows_pace());
  EXPECT_NEAR(split.share(), 0.5, 1e-9);
  for (int batch = 0; batch < 20; ++batch) split.note_pace(batch % 3 != 0);
  EXPECT_DOUBLE_EQ(split.yield(), 1.0);
  EXPECT_NEAR(split.share(), 0.5, 1e-9);
  split.follow_pace(true);
  split.note_pace(true);
  EXPECT_NEAR(split.share(), 0.5 * HostReadSplit::kYieldAhead, 1e-9);
}

}  // namespace
