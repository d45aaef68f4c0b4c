// The runtime class as a C++ program uses it.
#include <c10/util/Exception.h>
#include <quiver/feature_tiers.h>

#include "graphs.h"

namespace {

using quiver::testing::OnEveryDevice;

class FeatureTiers : public OnEveryDevice {
 protected:
  // A 300-row table in hot order behind random positions: two memory tiers, then the host.
  c10::intrusive_ptr<quiver::runtime::FeatureTiers> layout(const at::Tensor& table) {
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
    return c10::make_intrusive<quiver::runtime::FeatureTiers>(tiers, positions.to(dev));
  }
};

TEST_P(FeatureTiers, GathersEveryTier) {
  at::manual_seed(7);
  at::Tensor table = at::randn({300, 9});
  auto tiers = layout(table);
  EXPECT_EQ(tiers->num_rows(), 300);
  EXPECT_EQ(tiers->leading_rows(), 100);
  EXPECT_EQ(tiers->shape(), (std::vector<int64_t>{300, 9}));
  at::Tensor ids = at::randint(300, {1000});
  at::Tensor rows = tiers->gather(ids.to(op_device()));
  EXPECT_EQ(rows.device().type(), op_device().type());
  EXPECT_TRUE(at::equal(rows.cpu(), table.index_select(0, ids)));
  EXPECT_THROW(tiers->gather(at::tensor({0, 300}).to(op_device())), c10::IndexError);
}

TEST_P(FeatureTiers, StateRoundTripsThroughTheValidatingConstructor) {
  at::Tensor table = at::randn({300, 9});
  auto tiers = layout(table);
  auto restored = quiver::runtime::FeatureTiers::from_state(tiers->state());
  at::Tensor ids = at::randint(300, {64}).to(op_device());
  EXPECT_TRUE(at::equal(restored->gather(ids).cpu(), tiers->gather(ids).cpu()));
  // How host rows are read travels too; a state without it (saved before 2026-12-02: one
  // flag per tier and one for the positions) restores the defaults.
  tiers->set_stage_host_rows(true);
  tiers->set_group_host_reads(false);
  restored = quiver::runtime::FeatureTiers::from_state(tiers->state());
  EXPECT_TRUE(restored->stages_host_rows());
  EXPECT_FALSE(restored->groups_host_reads());
  // So do (since 2026-12-06) a fixed GPU share of staged reads and the pace flag; a state of
  // 2026-12-02's form (two host-read flags) restores a learned share that follows the pace.
  tiers->set_host_read_share(0.2);
  tiers->set_follow_loader_pace(false);
  restored = quiver::runtime::FeatureTiers::from_state(tiers->state());
  EXPECT_TRUE(restored->host_read_share_fixed());
  EXPECT_EQ(restored->host_read_share(), 0.2);
  EXPECT_FALSE(restored->follows_loader_pace());
  auto before_split = tiers->state();
  std::get<2>(before_split).resize(std::get<0>(before_split).size() + 3);
  restored = quiver::runtime::FeatureTiers::from_state(before_split);
  EXPECT_TRUE(restored->stages_host_rows());
  EXPECT_FALSE(restored->host_read_share_fixed());
  EXPECT_TRUE(restored->follows_loader_pace());
  auto older = tiers->state();
  std::get<2>(older).resize(std::get<0>(older).size() + 1);
  restored = quiver::runtime::FeatureTiers::from_state(older);
  EXPECT_FALSE(restored->stages_host_rows());
  EXPECT_TRUE(restored->groups_host_reads());
  std::get<2>(older).push_back(1);  // neither form
  EXPECT_THROW(quiver::runtime::FeatureTiers::from_state(older), c10::ValueError);
  auto state = tiers->state();
  std::get<0>(state)[1] = std::get<0>(state)[1].to(at::kDouble);
  EXPECT_THROW(quiver::runtime::FeatureTiers::from_state(state), c10::TypeError);
  // A doctored state's flags are 0 or 1 and its share word -1 or a share's bits (a flag of
  // 5 was read as true, a negative word as "learned").
  const size_t flags = std::get<2>(tiers->state()).size();
  for (const auto& [at, value] : std::vector<std::pair<size_t, int64_t>>{
           {0, 5}, {flags - 1, 2}, {flags - 2, -7}}) {
    auto doctored = tiers->state();
    std::get<2>(doctored)[at] = value;
    EXPECT_THROW(quiver::runtime::FeatureTiers::from_state(doctored), c10::ValueError) << at;
  }
}

TEST_P(FeatureTiers, GathersIntoAKeptBufferOnTheCpu) {
  at::manual_seed(8);
  at::Tensor table = at::randn({300, 9});
  auto tiers = layout(table);
  at::Tensor ids = at::randint(300, {500});
  at::Tensor out = at::empty({500, 9});
  if (GetParam() != "cpu") {  // tiers in GPU memory: only gather() reads them
    EXPECT_THROW(tiers->gather_into(ids, out), c10::ValueError);
    return;
  }
  for (int round = 0; round < 2; ++round) {  // the same buffer, other ids
    tiers->gather_into(ids, out);
    EXPECT_TRUE(at::equal(out, table.index_select(0, ids)));
    ids = at::randint(300, {500});
  }
  at::Tensor narrow = at::empty({500, 8});
  EXPECT_THROW(tiers->gather_into(ids, narrow), c10::ValueError);
  at::Tensor doubles = at::empty({500, 9}, at::kDouble);
  EXPECT_THROW(tiers->gather_into(ids, doubles), c10::ValueError);
  at::Tensor strided = at::empty({9, 500}).t();
  EXPECT_THROW(tiers->gather_into(ids, strided), c10::ValueError);
  EXPECT_THROW(tiers->gather_into(at::tensor({0, 300}), out.narrow(0, 0, 2)), c10::IndexError);
}

QUIVER_ON_EVERY_DEVICE(FeatureTiers);

}  // namespace
