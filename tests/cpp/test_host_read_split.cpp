// The rule that splits a staged gather's host rows between the GPU and the CPU
// (ops/cuda/host_read_split.h): plain C++, tested without a GPU.
#include <gtest/gtest.h>

#include <limits>

#include "ops/cuda/host_read_split.h"

namespace {

using quiver::cuda::HostReadSplit;

TEST(HostReadSplit, StartsAtTheFirstShareForEveryTable) {
  HostReadSplit split;
  int table = 0;
  EXPECT_DOUBLE_EQ(split.share(0, &table), HostReadSplit::kFirstShare);
  EXPECT_DOUBLE_EQ(split.share(3, nullptr), HostReadSplit::kFirstShare);
}

TEST(HostReadSplit, MovesHalfwayToTheShareThatBalancesBothParts) {
  HostReadSplit split;
  int table = 0;
  // Equal speeds: balanced at 0.5; halfway from 0.3.
  split.update(0, &table, 100, 1.0f, 100, 1.0f);
  EXPECT_NEAR(split.share(0, &table), 0.4, 1e-12);
  // The GPU half as fast as the CPU: balanced at 1/3, reached within a few calls whatever
  // the share the rows were split by.
  for (int call = 0; call < 40; ++call) {
    const double share = split.share(0, &table);
    const int64_t gpu_rows = static_cast<int64_t>(share * 1'000'000);
    const int64_t cpu_rows = 1'000'000 - gpu_rows;
    split.update(0, &table, gpu_rows, gpu_rows / 1000.0f, cpu_rows, cpu_rows / 2000.0f);
  }
  EXPECT_NEAR(split.share(0, &table), 1.0 / 3.0, 1e-4);
}

TEST(HostReadSplit, KeepsTablesAndGpusApart) {
  HostReadSplit split;
  int a = 0, b = 0;
  split.update(0, &a, 100, 1.0f, 100, 100.0f);  // the GPU far faster on table a
  EXPECT_GT(split.share(0, &a), HostReadSplit::kFirstShare);
  EXPECT_DOUBLE_EQ(split.share(0, &b), HostReadSplit::kFirstShare);
  EXPECT_DOUBLE_EQ(split.share(1, &a), HostReadSplit::kFirstShare);
}

TEST(HostReadSplit, StaysWithinItsBoundsSoBothSpeedsStayMeasured) {
  HostReadSplit split;
  int table = 0;
  for (int call = 0; call < 60; ++call) split.update(0, &table, 1000, 0.001f, 1, 1000.0f);
  EXPECT_DOUBLE_EQ(split.share(0, &table), HostReadSplit::kMaxShare);
  for (int call = 0; call < 60; ++call) split.update(0, &table, 1, 1000.0f, 1000, 0.001f);
  EXPECT_DOUBLE_EQ(split.share(0, &table), HostReadSplit::kMinShare);
}

TEST(HostReadSplit, IgnoresCallsWithNothingToMeasure) {
  HostReadSplit split;
  int table = 0;
  split.update(0, &table, 0, 1.0f, 100, 1.0f);
  split.update(0, &table, 100, 1.0f, 0, 1.0f);
  split.update(0, &table, 100, 0.0f, 100, 1.0f);
  split.update(0, &table, 100, 1.0f, 100, -1.0f);
  split.update(0, &table, 100, 1.0f, 100, std::numeric_limits<float>::quiet_NaN());
  EXPECT_DOUBLE_EQ(split.share(0, &table), HostReadSplit::kFirstShare);
}

}  // namespace
