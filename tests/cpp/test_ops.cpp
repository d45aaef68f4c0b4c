// The ops through the dispatcher from C++ (ops/quiver_ops.h), on every device present.
#include "ops/quiver_ops.h"
#include "runtime/feature_tiers.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <set>

namespace {

struct Csr {
  at::Tensor indptr, indices, edge_ids, row, col;
  int64_t num_nodes;
};

// A random multigraph whose last tenth of nodes has no out-edges.
Csr random_csr(int64_t num_nodes, int64_t num_edges, at::ScalarType dtype) {
  at::manual_seed(num_edges);
  at::Tensor row = at::randint(num_nodes * 9 / 10, {num_edges});
  at::Tensor col = at::randint(num_nodes, {num_edges});
  auto [indptr, indices, eid] = quiver::csr_from_coo(row.to(dtype), col.to(dtype), num_nodes);
  return {indptr, indices, eid, row, col, num_nodes};
}

class OpsOnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() != "cpu" && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  }
  // GPU mode keeps the topology in device memory, UVA in pinned host memory.
  at::Tensor place_topology(const at::Tensor& t) const {
    if (GetParam() == "gpu") return t.cuda();
    if (GetParam() == "uva") return t.pin_memory();
    return t;
  }
  at::Device seed_device() const { return GetParam() == "cpu" ? at::kCPU : at::kCUDA; }
};

TEST(CsrFromCoo, SortsRowsStablyAndKeepsEdgeIds) {
  at::Tensor row = at::tensor({2, 0, 2, 1, 0}, at::kLong);
  at::Tensor col = at::tensor({0, 1, 1, 2, 2}, at::kLong);
  auto [indptr, indices, eid] = quiver::csr_from_coo(row, col, 4);
  EXPECT_TRUE(at::equal(indptr, at::tensor({0, 2, 3, 5, 5}, at::kLong)));
  EXPECT_TRUE(at::equal(indices, at::tensor({1, 2, 2, 0, 1}, at::kLong)));
  EXPECT_TRUE(at::equal(eid, at::tensor({1, 4, 3, 0, 2}, at::kLong)));
}

TEST(CsrFromCoo, RejectsOutOfRangeIds) {
  at::Tensor row = at::tensor({0, 5}, at::kInt);
  EXPECT_THROW(quiver::csr_from_coo(row, row, 3), c10::IndexError);
}

TEST_P(OpsOnDevice, SampleNeighborsPicksDistinctRealNeighbors) {
  for (auto dtype : {at::kInt, at::kLong}) {
    Csr g = random_csr(200, 3000, dtype);
    at::Tensor seeds = at::arange(0, 200, 3);
    auto [counts, neighbors, eids] =
        quiver::sample_neighbors(place_topology(g.indptr), place_topology(g.indices),
                                 seeds.to(seed_device()), 4, false, place_topology(g.edge_ids));
    counts = counts.cpu(), neighbors = neighbors.cpu(), eids = eids.cpu();
    at::Tensor degree = (g.indptr.slice(0, 1) - g.indptr.slice(0, 0, -1)).index_select(0, seeds);
    EXPECT_TRUE(at::equal(counts, degree.clamp_max(4)));
    at::Tensor owner = at::repeat_interleave(seeds, counts);
    EXPECT_TRUE(at::equal(g.row.index_select(0, eids), owner));
    EXPECT_TRUE(at::equal(g.col.index_select(0, eids), neighbors));
    int64_t offset = 0;
    for (int64_t i = 0; i < counts.numel(); ++i) {
      const int64_t c = counts[i].item<int64_t>();
      at::Tensor part = eids.slice(0, offset, offset + c);
      EXPECT_EQ(std::get<0>(at::_unique(part)).numel(), c);
      offset += c;
    }
  }
}

TEST_P(OpsOnDevice, SampleSubgraphKeepsSeedsFirstAndMapsBack) {
  Csr g = random_csr(300, 4000, at::kInt);
  at::Tensor seeds = at::tensor({7, 3, 7, 250}, at::kLong);
  auto [node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop] = quiver::sample_subgraph(
      place_topology(g.indptr), place_topology(g.indices), seeds.to(seed_device()), {5, 3},
      false, place_topology(g.edge_ids));
  node_ids = node_ids.cpu(), rows = rows.cpu(), cols = cols.cpu(), eids = eids.cpu();
  EXPECT_TRUE(at::equal(node_ids.slice(0, 0, 4), seeds));
  EXPECT_EQ(nodes_per_hop.sum().item<int64_t>(), node_ids.numel());
  EXPECT_EQ(edges_per_hop.sum().item<int64_t>(), rows.numel());
  EXPECT_TRUE(at::equal(g.row.index_select(0, eids), node_ids.index_select(0, cols)));
  EXPECT_TRUE(at::equal(g.col.index_select(0, eids), node_ids.index_select(0, rows)));
  std::set<int64_t> rest;
  for (int64_t i = 4; i < node_ids.numel(); ++i) rest.insert(node_ids[i].item<int64_t>());
  EXPECT_EQ(static_cast<int64_t>(rest.size()), node_ids.numel() - 4);
}

TEST_P(OpsOnDevice, ManualSeedReproduces) {
  Csr g = random_csr(100, 2000, at::kLong);
  at::Tensor indptr = place_topology(g.indptr), indices = place_topology(g.indices);
  at::Tensor seeds = at::arange(0, 90, 2).to(seed_device());
  at::manual_seed(3);
  at::Tensor first = std::get<1>(quiver::sample_neighbors(indptr, indices, seeds, 3));
  at::Tensor second = std::get<1>(quiver::sample_neighbors(indptr, indices, seeds, 3));
  at::manual_seed(3);
  at::Tensor again = std::get<1>(quiver::sample_neighbors(indptr, indices, seeds, 3));
  EXPECT_TRUE(at::equal(first, again));
  EXPECT_FALSE(at::equal(first, second));
}

TEST_P(OpsOnDevice, BadInputThrowsTypedErrors) {
  Csr g = random_csr(50, 500, at::kLong);
  at::Tensor indptr = place_topology(g.indptr), indices = place_topology(g.indices);
  const auto dev = seed_device();
  EXPECT_THROW(quiver::sample_neighbors(indptr, indices, at::tensor({50}).to(dev), 2),
               c10::IndexError);
  EXPECT_THROW(quiver::sample_neighbors(indptr, indices, at::tensor({1}).to(dev), -3),
               c10::ValueError);
  EXPECT_THROW(quiver::sample_subgraph(indptr, indices, at::tensor({1.0}).to(dev), {2}),
               c10::TypeError);
  EXPECT_THROW(quiver::sample_subgraph(indptr, indices, at::tensor({1}).to(dev), {}),
               c10::ValueError);
}

TEST(GatherRows, EqualsIndexSelect) {
  at::Tensor table = at::randn({100, 33});
  at::Tensor ids = at::randint(100, {500});
  EXPECT_TRUE(at::equal(quiver::gather_rows(table, ids), table.index_select(0, ids)));
  EXPECT_THROW(quiver::gather_rows(table, at::tensor({100})), c10::IndexError);
}

// The runtime class as a C++ program uses it: hot rows in (GPU) memory tiers, the rest in
// the host tier, rows found through a position table.
TEST_P(OpsOnDevice, FeatureTiersGatherEveryTier) {
  at::manual_seed(7);
  at::Tensor table = at::randn({300, 9});
  at::Tensor order = at::randperm(300);
  at::Tensor positions = at::empty({300}, at::kInt);
  positions.index_put_({order}, at::arange(300, at::kInt));
  at::Tensor hot_first = table.index_select(0, order);
  const auto dev = seed_device();
  auto memory_tier = [&](const at::Tensor& t) { return GetParam() == "cpu" ? t : t.to(dev); };
  auto host_tier = [&](const at::Tensor& t) { return GetParam() == "cpu" ? t : t.pin_memory(); };
  std::vector<at::Tensor> tiers = {memory_tier(hot_first.slice(0, 0, 40)),
                                   memory_tier(hot_first.slice(0, 40, 100)),
                                   host_tier(hot_first.slice(0, 100))};
  const auto layout = c10::make_intrusive<quiver::runtime::FeatureTiers>(tiers, positions.to(dev));
  EXPECT_EQ(layout->num_rows(), 300);
  EXPECT_EQ(layout->leading_rows(), 100);
  at::Tensor ids = at::randint(300, {1000});
  at::Tensor rows = layout->gather(ids.to(dev));
  EXPECT_EQ(rows.device().type(), dev.type());
  EXPECT_TRUE(at::equal(rows.cpu(), table.index_select(0, ids)));
  EXPECT_THROW(layout->gather(at::tensor({0, 300}).to(dev)), c10::IndexError);
  EXPECT_THROW(quiver::runtime::FeatureTiers({tiers[0], tiers[1].to(at::kDouble)}, std::nullopt),
               c10::TypeError);
}

INSTANTIATE_TEST_SUITE_P(Devices, OpsOnDevice, ::testing::Values("cpu", "gpu", "uva"),
                         [](const auto& info) { return info.param; });

}  // namespace
