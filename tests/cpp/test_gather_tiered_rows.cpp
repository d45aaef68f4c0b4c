#include <c10/util/Exception.h>

#include "graphs.h"

namespace {

using quiver::testing::OnEveryDevice;

class GatherTieredRows : public OnEveryDevice {};

// Hot rows in memory tiers (on the GPU in GPU mode), the rest in the host tier (pinned on a
// GPU), rows found through a position table.
TEST_P(GatherTieredRows, ReadsEveryTierThroughPositions) {
  at::manual_seed(7);
  at::Tensor table = at::randn({300, 9});
  at::Tensor order = at::randperm(300);
  at::Tensor positions = at::empty({300}, at::kInt);
  positions.index_put_({order}, at::arange(300, at::kInt));
  at::Tensor hot_first = table.index_select(0, order);
  const auto dev = op_device();
  auto memory = [&](const at::Tensor& t) {
    return GetParam() == "gpu" ? t.to(dev) : place_topology(t);
  };
  auto host = [&](const at::Tensor& t) { return GetParam() == "cpu" ? t : t.pin_memory(); };
  std::vector<at::Tensor> tiers = {memory(hot_first.slice(0, 0, 40)),
                                   memory(hot_first.slice(0, 40, 100)),
                                   host(hot_first.slice(0, 100))};
  at::Tensor ids = at::randint(300, {1000});
  at::Tensor rows = quiver::gather_tiered_rows(tiers, positions.to(dev), ids.to(dev));
  EXPECT_TRUE(at::equal(rows.cpu(), table.index_select(0, ids)));
  EXPECT_THROW(quiver::gather_tiered_rows(tiers, positions.to(dev), at::tensor({300}).to(dev)),
               c10::IndexError);
}

QUIVER_ON_EVERY_DEVICE(GatherTieredRows);

}  // namespace
