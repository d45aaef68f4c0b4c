// Rows exchanged between hosts as point-to-point messages spread over several Gloo groups
// ("lanes") of the same hosts, so that their connections (and their backends' threads)
// carry the rows side by side: one TCP stream carries about 2 GB/s. One way for every
// runtime class that moves rows over Gloo (the collective transport's rows, DistSampler's
// answers).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <vector>

namespace quiver::runtime {

// What a failure of the backend (a message that errs or is not in within the timeout)
// becomes: the caller's error, naming the silent peers. It must throw.
using LaneFailed = std::function<void(const std::exception& error)>;

// The smallest part worth a lane of its own. Each part costs a message's fixed overhead
// on both hosts' connection threads: a 64-id fetch (4 KB a way) took 4.6 ms over 8 lanes
// and 1.3 ms over one on the 2-core CPU machine, and a 65,536-id fetch (4 MB a way) 13.4
// against 11.9 ms, while 8 lanes moved twice what one did for 45 MB fetches on the
// two-H200 host. On a 16-core host, with this cut, 8 lanes took 7-12% less time than one
// from 1 MiB blocks up and the same for small ones (docs/benchmarks.md, 2026-12-05).
// 512 KiB parts take a stream about 0.25 ms at 2 GB/s, several times a message's overhead.
inline constexpr int64_t kMinLanePartBytes = int64_t{512} << 10;

// How many parts (lanes) a block of `bytes` travels in: one per kMinLanePartBytes, at
// least one, at most `num_lanes`.
int64_t parts_for_block(int64_t bytes, int64_t num_lanes);

// Sends host h the `from_rows[h]` rows of `from` starting at the sum of the earlier counts,
// and receives host h's `into_rows[h]` rows into `into` likewise (both tensors contiguous,
// split along dim 0; this host's own block is copied). Each block travels in row-aligned
// parts, part j over lanes[j]: one part per kMinLanePartBytes, as many as there are lanes
// at most (parts_for_block), so a small block travels whole over lanes[0]. Both sides cut
// a block the same way, from the same row count, and the `header` rows that lead each
// block travel whole in part 0. Every receive is posted before any send. The whole
// exchange takes at most `timeout`; on any failure every posted message is aborted before
// this returns, so none touches the tensors after, and the failure goes to `failed`.
// (Handing each part to the caller as it landed, to place it while later ones travelled,
// measured no faster on the two-H200 host, 16 cores a process: the placement's threads and
// the connections' compete for the cores.)
void exchange_over_lanes(const std::vector<c10::intrusive_ptr<c10d::ProcessGroup>>& lanes,
                         int64_t host, at::Tensor& into, const at::Tensor& from,
                         const std::vector<int64_t>& into_rows,
                         const std::vector<int64_t>& from_rows, int64_t header,
                         std::chrono::milliseconds timeout, const LaneFailed& failed);

// Checks that lanes go with a Gloo `group` (only Gloo exchanges take them) and are Gloo
// groups of the same hosts, in which this host has the group's rank (`owner` names the
// class taking them in the error).
void check_lanes(const std::vector<c10::intrusive_ptr<c10d::ProcessGroup>>& lanes,
                 const c10d::ProcessGroup& group, const char* owner);

}  // namespace quiver::runtime
