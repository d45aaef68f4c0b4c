#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <set>

#include "graphs.h"
#include "ops/checks.h"

namespace {

using quiver::testing::OnEveryDevice;

class SampleSubgraph : public OnEveryDevice {};

TEST_P(SampleSubgraph, KeepsSeedsFirstAndMapsBack) {
  auto g = quiver::testing::random_graph(300, 4000, at::kInt);
  at::Tensor seeds = at::tensor({7, 3, 7, 250}, at::kLong);
  auto [node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop] =
      quiver::sample_subgraph(place_topology(g.indptr), place_topology(g.indices),
                              seeds.to(op_device()), {5, 3}, false, place_topology(g.edge_ids));
  node_ids = node_ids.cpu(), rows = rows.cpu(), cols = cols.cpu(), eids = eids.cpu();
  EXPECT_TRUE(at::equal(node_ids.slice(0, 0, 4), seeds));
  EXPECT_EQ(nodes_per_hop.sum().item<int64_t>(), node_ids.numel());
  EXPECT_EQ(edges_per_hop.sum().item<int64_t>(), rows.numel());
  EXPECT_TRUE(at::equal(g.row.index_select(0, eids), node_ids.index_select(0, cols)));
  EXPECT_TRUE(at::equal(g.col.index_select(0, eids), node_ids.index_select(0, rows)));
  std::set<int64_t> rest;
  for (int64_t i = 4; i < node_ids.numel(); ++i) rest.insert(node_ids[i].item<int64_t>());
  EXPECT_EQ(static_cast<int64_t>(rest.size()), node_ids.numel() - 4);
  // Each target of hop h got min(degree, fanouts[h]) edges (every neighbor taken passed the
  // checks above).
  const at::Tensor per_target = at::bincount(cols, {}, node_ids.numel());
  const at::Tensor degree = g.degree().to(at::kLong).index_select(0, node_ids);
  const int64_t hop0 = nodes_per_hop[0].item<int64_t>(), hop1 = nodes_per_hop[1].item<int64_t>();
  EXPECT_TRUE(at::equal(per_target.slice(0, 0, hop0), degree.slice(0, 0, hop0).clamp_max(5)));
  EXPECT_TRUE(at::equal(per_target.slice(0, hop0, hop0 + hop1),
                        degree.slice(0, hop0, hop0 + hop1).clamp_max(3)));
}

TEST_P(SampleSubgraph, OwnGeneratorReproduces) {
  auto g = quiver::testing::random_graph(300, 4000, at::kLong);
  at::Tensor indptr = place_topology(g.indptr), indices = place_topology(g.indices);
  const at::Tensor seeds = at::arange(0, 300, 11, at::kLong).to(op_device());
  // A generator of our own: a copy of the device's default one.
  at::Generator gen = at::globalContext().defaultGenerator(op_device()).clone();
  gen.set_current_seed(17);
  const auto first = quiver::sample_subgraph(indptr, indices, seeds, {4, 4}, false,
                                             std::nullopt, gen);
  gen.set_current_seed(17);
  const auto again = quiver::sample_subgraph(indptr, indices, seeds, {4, 4}, false,
                                             std::nullopt, gen);
  EXPECT_TRUE(at::equal(std::get<0>(first).cpu(), std::get<0>(again).cpu()));
  EXPECT_TRUE(at::equal(std::get<1>(first).cpu(), std::get<1>(again).cpu()));
  gen.set_current_seed(18);  // and another seed draws another subgraph (it is not ignored)
  const auto other = quiver::sample_subgraph(indptr, indices, seeds, {4, 4}, false,
                                             std::nullopt, gen);
  EXPECT_FALSE(at::equal(std::get<0>(first).cpu(), std::get<0>(other).cpu()));
}

TEST_P(SampleSubgraph, BadInputThrowsTypedErrors) {
  auto g = quiver::testing::random_graph(50, 500, at::kLong);
  at::Tensor indptr = place_topology(g.indptr), indices = place_topology(g.indices);
  const auto dev = op_device();
  EXPECT_THROW(quiver::sample_subgraph(indptr, indices, at::tensor({1.0}).to(dev), {2}),
               c10::TypeError);
  EXPECT_THROW(quiver::sample_subgraph(indptr, indices, at::tensor({1}).to(dev), {}),
               c10::ValueError);
  EXPECT_THROW(quiver::sample_subgraph(indptr, indices, at::tensor({0, 50}).to(dev), {2}),
               c10::IndexError);
}

QUIVER_ON_EVERY_DEVICE(SampleSubgraph);

}  // namespace

// The guard that keeps local indices (int32) from wrapping, with an injected small limit:
// real batches would need 2^31 nodes to reach it.
TEST(SampleSubgraphLimits, BatchNodeGuardRaisesPastItsLimit) {
  EXPECT_NO_THROW(quiver::check_batch_nodes(10, 10));
  EXPECT_THROW(quiver::check_batch_nodes(11, 10), c10::ValueError);
}
