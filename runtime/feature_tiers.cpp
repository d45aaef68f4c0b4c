#include <quiver/feature_tiers.h>
#include <quiver/ops.h>

#include "ops/checks.h"

namespace quiver::runtime {

FeatureTiers::FeatureTiers(std::vector<at::Tensor> tiers, std::optional<at::Tensor> positions)
    : tiers_(std::move(tiers)), positions_(std::move(positions)) {
  check_row_tiers(tiers_, positions_);
  num_rows_ = tiered_id_count(tiers_, positions_);
}

at::Tensor FeatureTiers::gather(const at::Tensor& ids) const {
  return quiver::gather_tiered_rows(tiers_, positions_, ids);
}

std::vector<int64_t> FeatureTiers::shape() const {
  std::vector<int64_t> shape = tiers_.front().sizes().vec();
  shape[0] = num_rows_;
  return shape;
}

int64_t FeatureTiers::leading_rows() const {
  int64_t rows = 0;
  for (size_t k = 0; k + 1 < tiers_.size(); ++k) rows += tiers_[k].size(0);
  return rows;
}

c10::intrusive_ptr<FeatureTiers> FeatureTiers::from_state(State state) {
  return c10::make_intrusive<FeatureTiers>(std::move(std::get<0>(state)),
                                           std::move(std::get<1>(state)));
}

}  // namespace quiver::runtime
