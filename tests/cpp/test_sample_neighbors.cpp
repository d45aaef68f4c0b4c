#include <c10/util/Exception.h>

#include "graphs.h"

namespace {

using quiver::testing::OnEveryDevice;

class SampleNeighbors : public OnEveryDevice {};

TEST_P(SampleNeighbors, PicksDistinctRealNeighbors) {
  for (auto dtype : {at::kInt, at::kLong}) {
    auto g = quiver::testing::random_graph(200, 3000, dtype);
    at::Tensor seeds = at::arange(0, 200, 3);
    auto [counts, neighbors, eids] =
        quiver::sample_neighbors(place_topology(g.indptr), place_topology(g.indices),
                                 seeds.to(op_device()), 4, false, place_topology(g.edge_ids));
    counts = counts.cpu(), neighbors = neighbors.cpu(), eids = eids.cpu();
    EXPECT_TRUE(at::equal(counts, g.degree().index_select(0, seeds).clamp_max(4)));
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

TEST_P(SampleNeighbors, ManualSeedReproduces) {
  auto g = quiver::testing::random_graph(100, 2000, at::kLong);
  at::Tensor indptr = place_topology(g.indptr), indices = place_topology(g.indices);
  at::Tensor seeds = at::arange(0, 90, 2).to(op_device());
  at::manual_seed(3);
  at::Tensor first = std::get<1>(quiver::sample_neighbors(indptr, indices, seeds, 3));
  at::Tensor second = std::get<1>(quiver::sample_neighbors(indptr, indices, seeds, 3));
  at::manual_seed(3);
  at::Tensor again = std::get<1>(quiver::sample_neighbors(indptr, indices, seeds, 3));
  EXPECT_TRUE(at::equal(first, again));
  EXPECT_FALSE(at::equal(first, second));
}

TEST_P(SampleNeighbors, BadInputThrowsTypedErrors) {
  auto g = quiver::testing::random_graph(50, 500, at::kLong);
  at::Tensor indptr = place_topology(g.indptr), indices = place_topology(g.indices);
  const auto dev = op_device();
  EXPECT_THROW(quiver::sample_neighbors(indptr, indices, at::tensor({50}).to(dev), 2),
               c10::IndexError);
  EXPECT_THROW(quiver::sample_neighbors(indptr, indices, at::tensor({1}).to(dev), -3),
               c10::ValueError);
  EXPECT_THROW(quiver::sample_neighbors(indptr, indices, at::tensor({1.0}).to(dev), 2),
               c10::TypeError);
}

QUIVER_ON_EVERY_DEVICE(SampleNeighbors);

}  // namespace
