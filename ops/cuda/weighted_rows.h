// Weighted rows on the GPU, the weighted twin of row_sampling.cu's sample_rows (which hands
// rows with RowRules::edge_weight here). The draws are those of ops/cpu/weighted_rows.h:
// without replacement successive sampling by Efraimidis-Spirakis keys (the `count` largest
// log(u) / w of the row), with replacement independent draws by the row's cumulative
// weights. Every weight of a sampled row is checked (finite, > 0; else kBadEdgeWeight).
// Each edge's uniform is Philox at counter (edge offset, row stream), so results do not
// depend on how lanes share the work.
#pragma once

#include <cuda_runtime_api.h>

#include "ops/cuda/row_sampling.h"

namespace quiver::cuda {

template <typename index_t>
cudaError_t sample_weighted_rows(const Csr<index_t>& csr, const RowPlan& plan,
                                 const HopRule& rule, const HopOutput& out, cudaStream_t stream);

}  // namespace quiver::cuda
