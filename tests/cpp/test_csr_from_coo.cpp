#include <c10/util/Exception.h>

#include "graphs.h"

namespace {

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

}  // namespace
