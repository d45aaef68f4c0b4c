// How a block of rows is cut over Gloo lanes (runtime/lane_exchange.h): small blocks travel
// whole on one lane, larger ones in parts of at least kMinLanePartBytes, never more parts
// than lanes. Both hosts compute this from the same byte count, so the rule is all the
// agreement there is; the exchange itself is tested between processes (test_dist.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "runtime/lane_exchange.h"

namespace {

using quiver::runtime::kMinLanePartBytes;
using quiver::runtime::parts_for_block;

TEST(LaneParts, SmallBlocksTravelWholeOnOneLane) {
  for (const int64_t bytes : {int64_t{0}, int64_t{1}, int64_t{2048}, kMinLanePartBytes,
                              2 * kMinLanePartBytes - 1}) {
    EXPECT_EQ(parts_for_block(bytes, 8), 1) << bytes;
  }
}

TEST(LaneParts, OnePartPerMinimumUpToTheLanes) {
  EXPECT_EQ(parts_for_block(2 * kMinLanePartBytes, 8), 2);
  EXPECT_EQ(parts_for_block(5 * kMinLanePartBytes + 7, 8), 5);
  EXPECT_EQ(parts_for_block(8 * kMinLanePartBytes, 8), 8);
  EXPECT_EQ(parts_for_block(int64_t{45} << 20, 8), 8);  // the two-H200 host's 45 MB fetches
  EXPECT_EQ(parts_for_block(std::numeric_limits<int64_t>::max(), 64), 64);
  EXPECT_EQ(parts_for_block(int64_t{45} << 20, 1), 1);
}

}  // namespace
