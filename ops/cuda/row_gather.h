// Torch-free interface of the one CUDA row gather, the stage behind gather_rows (one table)
// and gather_tiered_rows (a feature table split over GPU memory, peer GPUs and pinned host).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/row_tiers.h"

namespace quiver::cuda {

// Where rows live. Tier k holds the rows at positions [begin[k], begin[k + 1]), row by row
// from `rows[k]`, a pointer this GPU can read: its own memory, a peer GPU's (peer access
// on) or mapped pinned host memory.
struct RowTiers {
  const void* rows[kMaxRowTiers];
  int64_t begin[kMaxRowTiers + 1];
  int num_tiers;
};

// Why a gather failed, as one 64-bit word: the code in the top byte, the offending index
// into ids below. Zero: every id was served.
enum GatherError : uint64_t {
  kGatherOk = 0,
  kGatherIdOutOfRange = 1,        // ids[index] is outside [0, num_ids_allowed)
  kGatherPositionOutOfRange = 2,  // positions[ids[index]] is outside the tiers
};
constexpr int kGatherErrorShift = 56;

// One gather: out[i] = the row at position p = positions[ids[i]] (p = ids[i] when
// positions is null), rows of row_bytes bytes. A failing row is left unwritten and
// reported in *error, a word the GPU can write (mapped pinned host memory, so reading it
// costs no copy): any one failure is kept.
template <typename id_t, typename pos_t>
struct RowGather {
  RowTiers tiers;
  int64_t row_bytes;
  const pos_t* positions;
  int64_t num_ids_allowed;
  const id_t* ids;
  int64_t num_ids;
  void* out;
  uint64_t* error;
};

template <typename id_t, typename pos_t>
cudaError_t gather_tiered_rows(const RowGather<id_t, pos_t>& gather, cudaStream_t stream);

}  // namespace quiver::cuda
