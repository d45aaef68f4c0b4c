#include <c10/util/Exception.h>

#include "graphs.h"

namespace {

using quiver::testing::OnEveryDevice;

class GatherRows : public OnEveryDevice {};

TEST_P(GatherRows, EqualsIndexSelect) {
  at::Tensor table = at::randn({100, 33});
  at::Tensor ids = at::randint(100, {500});
  at::Tensor rows = quiver::gather_rows(place_topology(table), ids.to(op_device()));
  EXPECT_EQ(rows.device().type(), op_device().type());
  EXPECT_TRUE(at::equal(rows.cpu(), table.index_select(0, ids)));
  EXPECT_THROW(quiver::gather_rows(place_topology(table), at::tensor({100}).to(op_device())),
               c10::IndexError);
}

QUIVER_ON_EVERY_DEVICE(GatherRows);

}  // namespace
