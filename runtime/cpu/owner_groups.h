// Ids grouped by the host that owns them, on the CPU: a stable counting sort in two
// parallel passes. For a Gloo fetch of 110,000 ids it replaces a stable sort, a search and
// a gather that took 1.1-1.4 ms on the two-H200 host.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace quiver::cpu {

struct OwnerGroups {
  at::Tensor order;            // int64: the positions of the ids, group by group
  at::Tensor sorted_local;     // int64: their local indices, in that order
  std::vector<int64_t> count;  // ids per group
};

// Group 0: ids this host serves itself (owner `me`, or -1: replicated); group h + 1: ids
// host h owns. `owner` and `local` are int64 CPU vectors of one length, owners in
// [-1, hosts). Within a group the ids keep their order.
inline OwnerGroups group_by_owner(const at::Tensor& owner, const at::Tensor& local, int64_t me,
                                  int64_t hosts) {
  const int64_t n = owner.numel(), groups = hosts + 1;
  const int64_t* owner_of = owner.const_data_ptr<int64_t>();
  const int64_t* local_of = local.const_data_ptr<int64_t>();
  const auto group_of = [&](int64_t i) {
    const int64_t h = owner_of[i];
    return h == me ? int64_t{0} : h + 1;  // -1 (replicated) lands in group 0 too
  };
  constexpr int64_t kIdsPerChunk = 1 << 14;
  const int64_t chunks =
      std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n / kIdsPerChunk));
  const auto chunk_begin = [&](int64_t c) { return n * c / chunks; };
  // Pass 1: each chunk's count per group; then where each chunk's ids of a group start.
  std::vector<int64_t> at_of(chunks * groups, 0);  // [chunk][group]
  at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      int64_t* counts = at_of.data() + c * groups;
      for (int64_t i = chunk_begin(c); i < chunk_begin(c + 1); ++i) ++counts[group_of(i)];
    }
  });
  OwnerGroups result;
  result.count.assign(groups, 0);
  int64_t start = 0;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t counted = at_of[c * groups + g];
      at_of[c * groups + g] = start;
      start += counted;
      result.count[g] += counted;
    }
  }
  // Pass 2: each chunk places its ids from its starts.
  result.order = at::empty({n}, owner.options());
  result.sorted_local = at::empty({n}, local.options());
  int64_t* order = result.order.mutable_data_ptr<int64_t>();
  int64_t* sorted_local = result.sorted_local.mutable_data_ptr<int64_t>();
  at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      int64_t* next = at_of.data() + c * groups;
      for (int64_t i = chunk_begin(c); i < chunk_begin(c + 1); ++i) {
        const int64_t at = next[group_of(i)]++;
        order[at] = i;
        sorted_local[at] = local_of[i];
      }
    }
  });
  return result;
}

}  // namespace quiver::cpu
