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
// costs no copy): any one failure is kept. A null error: failing rows are skipped unreported
// (their ids were checked ahead, see check_gather_ids).
//
// When out_rows is given the gather is grouped: ids holds positions (already checked,
// see order_by_position) and the row read for ids[k] goes to out[out_rows[k]]; null ids
// read positions 0, 1, ... in turn (a scatter of a staged block of rows).
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
  const int64_t* out_rows = nullptr;
  // When set, only ids [0, *ids_end) are served (a bound the GPU computed; num_ids, at
  // least as large, sizes the grid).
  const int64_t* ids_end = nullptr;
  // > 0: at most this many thread blocks, each striding over the rows (see
  // gather_tiered_rows' host_read_blocks in library.cpp).
  int64_t max_blocks = 0;
};

template <typename id_t, typename pos_t>
cudaError_t gather_tiered_rows(const RowGather<id_t, pos_t>& gather, cudaStream_t stream);

// Reports in gather.error the first failure gather_tiered_rows would meet, reading ids and
// positions only: a kernel far shorter than the gather, so the host may wait for it alone
// and let the gather (launched with a null error) run on after the call returns.
template <typename id_t, typename pos_t>
cudaError_t check_gather_ids(const RowGather<id_t, pos_t>& gather, cudaStream_t stream);

// Reads grouped by position: the positions of a gather's ids, sorted, with the output row
// each came from. Read in that order, the rows of a pinned host tier are visited in
// address order, page after page: the GPU's reach over host pages, not PCIe, limits
// random reads of large pinned tables. Scratch: four arrays of num_ids entries and CUB's
// workspace, all from the caller.
struct PositionOrder {
  int64_t* keys;
  int64_t* rows;
  int64_t* sorted_keys;
  int64_t* sorted_rows;
  void* workspace;
  size_t workspace_bytes;
  int end_bit;  // positions are below 2^end_bit
};
size_t position_order_workspace_bytes(int64_t num_ids, int end_bit);

// Fills order.sorted_keys / order.sorted_rows for `gather` (its out, out_rows unused); a bad
// id or position is reported in gather.error (as the plain gather does) and sorted as 0.
template <typename id_t, typename pos_t>
cudaError_t order_by_position(const RowGather<id_t, pos_t>& gather, const PositionOrder& order,
                              cudaStream_t stream);

// Splits sorted positions for a staged gather: bounds[0] = the first at or past
// host_begin (the host tiers' rows start there), bounds[1] = bounds[0] plus gpu_share of
// the rest (the host rows the GPU reads itself). One thread: a binary search.
cudaError_t split_sorted_positions(const int64_t* sorted_keys, int64_t num_keys, int64_t host_begin,
                                   double gpu_share, int64_t* bounds, cudaStream_t stream);

}  // namespace quiver::cuda
