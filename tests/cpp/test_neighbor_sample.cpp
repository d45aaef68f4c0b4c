// quiver::neighbor_sample, quiver::hetero_neighbor_sample and quiver::sample_negatives
// through the C++ API (ops.h), as a libtorch program calls them: weighted rows (by keys and
// by prefix sums), temporal trees, relations with their own fanouts, and typed errors, on
// every device.
#include <c10/util/Exception.h>

#include <cmath>

#include "graphs.h"
#include "ops/sampling_rules.h"

namespace {

using quiver::testing::OnEveryDevice;

class NeighborSample : public OnEveryDevice {};

// Each row's inclusive prefix sums of `weight`, as ops.row_cumsum builds them.
at::Tensor row_sums(const at::Tensor& indptr, const at::Tensor& weight) {
  at::Tensor sums = weight.to(at::kDouble).cumsum(0);
  at::Tensor out = sums.clone();
  for (int64_t v = 0; v + 1 < indptr.numel(); ++v) {
    const int64_t begin = indptr[v].item<int64_t>(), end = indptr[v + 1].item<int64_t>();
    if (begin > 0 && end > begin) out.slice(0, begin, end) -= sums[begin - 1];
  }
  return out;
}

TEST_P(NeighborSample, WeightedTreesStayApartAndUseRealEdges) {
  auto g = quiver::testing::random_graph(200, 3000, at::kInt);
  const at::Tensor weight = at::rand({3000}) + 0.1;
  const at::Tensor seeds = at::tensor({3, 3, 150}, at::kLong);
  for (const bool with_sums : {false, true}) {
    std::optional<at::Tensor> sums;
    if (with_sums) sums = place_topology(row_sums(g.indptr, weight));
    auto [node_ids, batch, rows, cols, eids, nodes_per_hop, edges_per_hop] =
        quiver::neighbor_sample(place_topology(g.indptr), place_topology(g.indices),
                                seeds.to(op_device()), {4, 2}, false, place_topology(g.edge_ids),
                                place_topology(weight.to(at::kFloat)), std::nullopt,
                                std::nullopt, false, "uniform", /*disjoint=*/true, std::nullopt,
                                sums);
    node_ids = node_ids.cpu(), batch = batch.cpu(), rows = rows.cpu(), cols = cols.cpu();
    eids = eids.cpu();
    EXPECT_TRUE(at::equal(node_ids.slice(0, 0, 3), seeds));
    EXPECT_TRUE(at::equal(batch.slice(0, 0, 3), at::arange(3, at::kLong)));
    EXPECT_TRUE(at::equal(batch.index_select(0, rows), batch.index_select(0, cols)));
    EXPECT_TRUE(at::equal(g.row.index_select(0, eids), node_ids.index_select(0, cols)));
    EXPECT_TRUE(at::equal(g.col.index_select(0, eids), node_ids.index_select(0, rows)));
    EXPECT_EQ(edges_per_hop.sum().item<int64_t>(), rows.numel());
  }
}

TEST_P(NeighborSample, WeightsSteerTheDraws) {
  // The checks above hold for uniform draws too. Node 0 has ten neighbors: edges 0 and 1
  // weigh 1e4, the other eight 1e-4 (a light one is drawn 4e-8 of the time).
  at::manual_seed(5);
  const at::Tensor indptr = at::cat({at::zeros({1}, at::kLong), at::full({10}, 10, at::kLong)});
  const at::Tensor indices = at::arange(1, 11, at::kLong);
  at::Tensor weight = at::full({10}, 1e-4, at::kFloat);
  weight.slice(0, 0, 2).fill_(1e4);
  const at::Tensor seeds = at::zeros({200}, at::kLong);
  for (const bool with_sums : {false, true}) {
    std::optional<at::Tensor> sums;
    if (with_sums) sums = place_topology(row_sums(indptr, weight));
    auto out = quiver::neighbor_sample(place_topology(indptr), place_topology(indices),
                                       seeds.to(op_device()), {1}, false, std::nullopt,
                                       place_topology(weight), std::nullopt, std::nullopt, false,
                                       "uniform", /*disjoint=*/true, std::nullopt, sums);
    const at::Tensor eids = std::get<4>(out).cpu();
    ASSERT_EQ(eids.numel(), 200);
    EXPECT_EQ((eids >= 2).sum().item<int64_t>(), 0) << "light edges drawn, with_sums "
                                                     << with_sums;
    EXPECT_GT((eids == 0).sum().item<int64_t>(), 60);  // and both heavy ones
    EXPECT_GT((eids == 1).sum().item<int64_t>(), 60);
  }
}

TEST_P(NeighborSample, TemporalTreesTakeOnlyThePast) {
  // Node 0 has five neighbors at times 1, 2, 3, 5, 8.
  const at::Tensor indptr = at::tensor({0, 5, 5, 5, 5, 5, 5}, at::kLong);
  const at::Tensor indices = at::tensor({1, 2, 3, 4, 5}, at::kLong);
  const at::Tensor times = at::tensor({1, 2, 3, 5, 8}, at::kLong);
  const auto dev = op_device();
  auto [node_ids, batch, rows, cols, eids, nodes_per_hop, edges_per_hop] =
      quiver::neighbor_sample(place_topology(indptr), place_topology(indices),
                              at::tensor({0, 0}, at::kLong).to(dev), {2}, false, std::nullopt,
                              std::nullopt, place_topology(times),
                              at::tensor({3, 6}, at::kLong).to(dev), false, "last", true);
  eids = eids.cpu(), cols = cols.cpu();
  EXPECT_TRUE(at::equal(std::get<0>(eids.index({cols == 0}).sort()), at::tensor({1, 2}, at::kLong)));
  EXPECT_TRUE(at::equal(std::get<0>(eids.index({cols == 1}).sort()), at::tensor({2, 3}, at::kLong)));
}

TEST_P(NeighborSample, BadInputThrowsTypedErrors) {
  auto g = quiver::testing::random_graph(50, 500, at::kLong);
  const at::Tensor indptr = place_topology(g.indptr), indices = place_topology(g.indices);
  const at::Tensor seeds = at::tensor({1, 2}, at::kLong).to(op_device());
  EXPECT_THROW(quiver::neighbor_sample(indptr, indices, seeds, {2}, false, std::nullopt,
                                       place_topology(at::ones({500}, at::kDouble))),
               c10::TypeError);
  EXPECT_THROW(quiver::neighbor_sample(indptr, indices, seeds, {2}, false, std::nullopt,
                                       place_topology(at::zeros({500}, at::kFloat))),
               c10::ValueError);
  EXPECT_THROW(quiver::neighbor_sample(indptr, indices, seeds, {2}, false, std::nullopt,
                                       std::nullopt, place_topology(at::zeros({500}, at::kLong)),
                                       at::zeros({2}, at::kLong).to(op_device())),
               c10::ValueError);  // temporal sampling needs disjoint trees
}

TEST_P(NeighborSample, NegativesAreNotTrueEdges) {
  auto g = quiver::testing::random_graph(100, 600, at::kLong);
  const at::Tensor src = at::arange(100, at::kLong).repeat({5});
  const at::Tensor out =
      quiver::sample_negatives(place_topology(g.indptr), place_topology(g.indices),
                               src.to(op_device()), 2, true, 64, /*out_rows=*/true)
          .cpu();
  ASSERT_EQ(out.numel(), 1000);
  for (int64_t k = 0; k < out.numel(); ++k) {
    const int64_t s = src[k / 2].item<int64_t>(), v = out[k].item<int64_t>();
    const at::Tensor row = g.indices.slice(0, g.indptr[s].item<int64_t>(),
                                           g.indptr[s + 1].item<int64_t>());
    EXPECT_FALSE((row == v).any().item<bool>()) << s << " -> " << v;
  }
  // node ids, spread over the nodes (an id past the graph is no edge either)
  EXPECT_TRUE(out.ge(0).all().item<bool>());
  EXPECT_TRUE(out.lt(100).all().item<bool>());
  EXPECT_GT(std::get<0>(at::_unique(out)).numel(), 50);
  EXPECT_THROW(quiver::sample_negatives(place_topology(g.indptr), place_topology(g.indices),
                                        at::tensor({100}, at::kLong).to(op_device()), 1),
               c10::IndexError);
}

TEST_P(NeighborSample, HeteroRelationsKeepTheirFanoutsAndTypes) {
  // Two types: a (nodes 0-2, global 0-2) and b (nodes 0-3, global 3-6). Relation 0: b -> a,
  // relation 1: a -> a. Node a0's row: four b sources (relation 0), then two a sources.
  const at::Tensor indptr = at::tensor({0, 6, 6, 6, 6, 6, 6, 6}, at::kLong);
  const at::Tensor indices = at::tensor({3, 4, 5, 6, 1, 2}, at::kInt);
  const at::Tensor edge_ids = at::tensor({0, 1, 2, 3, 4, 5}, at::kLong);
  const auto dev = op_device();
  auto [node_ids, batch, rows, cols, eids, nodes_per_type_hop, edges_per_relation_hop] =
      quiver::hetero_neighbor_sample(place_topology(indptr), place_topology(indices),
                                     place_topology(edge_ids),
                                     at::tensor({0}, at::kLong).to(dev), {0, 3, 7}, {1, 0},
                                     {0, 0}, {0, 4, 6}, {3, 1});
  // a: the seed and one a neighbor; b: three of four sources.
  EXPECT_TRUE(at::equal(nodes_per_type_hop, at::tensor({1, 1, 0, 3}, at::kLong).view({2, 2})));
  EXPECT_TRUE(at::equal(edges_per_relation_hop, at::tensor({3, 1}, at::kLong).view({2, 1})));
  node_ids = node_ids.cpu(), rows = rows.cpu(), cols = cols.cpu(), eids = eids.cpu();
  EXPECT_EQ(node_ids[0].item<int64_t>(), 0);
  EXPECT_TRUE(at::equal(cols, at::zeros({4}, at::kLong)));
  for (int64_t e = 0; e < 3; ++e) {  // relation 0: local edge ids 0-3, sources b 0-3
    const int64_t local = eids[e].item<int64_t>();
    EXPECT_LT(local, 4);
    EXPECT_EQ(node_ids[2 + rows[e].item<int64_t>()].item<int64_t>(), local);
  }
  EXPECT_LT(eids[3].item<int64_t>(), 2);  // relation 1: local edge 0 or 1 (sources a1, a2)
  EXPECT_THROW(quiver::hetero_neighbor_sample(place_topology(indptr), place_topology(indices),
                                              place_topology(edge_ids),
                                              at::tensor({0}, at::kLong).to(dev), {0, 3, 6},
                                              {1, 0}, {0, 0}, {0, 4, 6}, {3, 1}),
               c10::ValueError);  // the type offsets do not cover the graph's 7 nodes
}

QUIVER_ON_EVERY_DEVICE(NeighborSample);

}  // namespace

// A prefix-sum draw's target is uniform * total: rounded up to the total itself (a uniform
// of 1, or one just below it times a total just above a power of two), it failed
// sum_draw_fits and the batch raised that the sums do not grow.
TEST(SamplingRules, ADrawsTargetStaysBelowTheRowsTotal) {
  const double just_below_one = std::nextafter(1.0, 0.0);
  for (const double total : {1.0, 3.0, std::nextafter(2.0, 3.0), std::nextafter(1024.0, 2048.0),
                             1e-300, 1e300}) {
    for (const double uniform : {1.0, just_below_one}) {
      const double target = quiver::sum_draw_target(uniform, total);
      EXPECT_LT(target, total) << "uniform " << uniform << ", total " << total;
      EXPECT_GE(target, std::nextafter(total, 0.0)) << "total " << total;
    }
  }
  EXPECT_EQ(quiver::sum_draw_target(0.5, 3.0), 1.5);
}
