// Ids grouped by owner on the CPU (runtime/cpu/owner_groups.h), against a stable sort.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "runtime/cpu/owner_groups.h"

namespace {

// The reference: group of each id, then a stable sort by group.
void expect_grouped_as_a_stable_sort_would(int64_t n, int64_t hosts, int64_t me, uint64_t seed) {
  at::manual_seed(seed);
  const at::Tensor owner = at::randint(-1, hosts, {n}, at::kLong);
  const at::Tensor local = at::randint(0, 1 << 30, {n}, at::kLong);
  const quiver::cpu::OwnerGroups groups = quiver::cpu::group_by_owner(owner, local, me, hosts);

  at::Tensor group = owner + 1;
  group.masked_fill_(owner == me, 0);
  const auto [sorted_group, order] = group.sort(/*stable=*/true, 0, false);
  EXPECT_TRUE(at::equal(groups.order, order)) << "n " << n << " hosts " << hosts;
  EXPECT_TRUE(at::equal(groups.sorted_local, local.index_select(0, order)));
  const at::Tensor count = at::bincount(group, {}, hosts + 1);
  ASSERT_EQ(static_cast<int64_t>(groups.count.size()), hosts + 1);
  for (int64_t g = 0; g <= hosts; ++g) {
    EXPECT_EQ(groups.count[g], count[g].item<int64_t>()) << "group " << g;
  }
}

TEST(OwnerGroups, MatchesAStableSortOverOneChunkAndMany) {
  // Up to 16,384 ids make one chunk; 300,000 make one per thread.
  for (const int64_t n : {0, 1, 7, 16'384, 16'385, 300'000}) {
    for (const int64_t hosts : {1, 2, 5}) {
      expect_grouped_as_a_stable_sort_would(n, hosts, hosts / 2, 1000 + n + hosts);
    }
  }
}

TEST(OwnerGroups, GivesTheSameOrderOnAnyNumberOfThreads) {
  const int threads = at::get_num_threads();
  for (const int t : {1, 3}) {
    at::set_num_threads(t);
    expect_grouped_as_a_stable_sort_would(200'000, 3, 1, 7);
  }
  at::set_num_threads(threads);
}

}  // namespace
