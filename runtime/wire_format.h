// What a collective exchange of rows puts on the wire, for both exchanges that move rows
// (runtime/collective_transport.cpp: counts, then ids, then rows; runtime/slot_exchange.cpp:
// fixed per-host slots): each host's block of answered rows is led by header rows whose
// first 8 bytes carry the owner's verdict (how many of the requests it refused), and every
// host checks the verdicts both ways with the same two sentences.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>

namespace quiver::runtime::wire {

// The most rows a peer may ask of one host in one exchange: a larger count is a faulty
// peer, refused before it sizes any buffer.
constexpr int64_t kMostRowsAsked = int64_t{1} << 40;

// Rows of `row_bytes` that lead each host's block of answered rows, enough for the owner's
// 8-byte verdict.
inline int64_t verdict_rows(int64_t row_bytes) {
  return (8 + row_bytes - 1) / std::max<int64_t>(row_bytes, 1);
}

// The same memory as rows of bytes (the last dimension widened by the element size):
// every backend moves uint8, whatever the table's dtype.
inline at::Tensor as_bytes(const at::Tensor& rows) {
  return rows.dim() == 1 ? rows.view({-1, 1}).view(at::kByte) : rows.view(at::kByte);
}

// A peer refused `refused` of the `asked` rows this host asked of it.
inline void check_peer_served(int64_t peer, int64_t refused, int64_t asked, int64_t me) {
  TORCH_CHECK_VALUE(refused == 0, "host ", peer, " refused ", refused, " of the ", asked,
                    " rows this host (", me, ") asked for: they lie outside its table. ",
                    "The hosts hold different shard maps or tables");
}

// A peer asked this host for `outside` rows outside its table of `served_rows`.
inline void check_peer_asked_within(int64_t peer, int64_t outside, int64_t me,
                                    int64_t served_rows) {
  TORCH_CHECK_VALUE(outside == 0, "host ", peer, " asked this host (", me, ") for ", outside,
                    " rows outside its table of ", served_rows,
                    " rows. The hosts hold different shard maps or tables");
}

}  // namespace quiver::runtime::wire
