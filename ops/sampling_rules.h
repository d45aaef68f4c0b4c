// The rules both sampling backends follow, in one torch-free header that host code and
// CUDA kernels include alike: how many neighbors a node yields, how many nodes a batch can
// reach, how the reindexing table is laid out and sized, and how node ids are hashed into
// it. A change here changes the CPU and the GPU together.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define QUIVER_HOST_DEVICE __host__ __device__
#else
#define QUIVER_HOST_DEVICE
#endif

namespace quiver {

// How many neighbors a node of `degree` yields for `fanout` (-1: all of them).
QUIVER_HOST_DEVICE inline int64_t sampled_count(int64_t degree, int64_t fanout, bool replace) {
  if (fanout < 0) return degree;
  if (degree == 0) return 0;
  return replace ? fanout : (fanout < degree ? fanout : degree);
}

// Edges one hop (or one sample_neighbors call) may sample: edge positions are 32-bit in the
// reindexing table, and past this a batch's outputs alone would pass 100 GB.
constexpr int64_t kMaxHopEdges = (int64_t{1} << 32) - 2;
// Nodes one batch may hold: local indices are int32.
constexpr int64_t kMaxBatchNodes = (int64_t{1} << 31) - 1;

// What saturating arithmetic returns instead of wrapping (INT64_MAX).
constexpr int64_t kSaturated = ~(int64_t{1} << 63);

// a * b for a, b >= 0, saturating at kSaturated instead of wrapping.
QUIVER_HOST_DEVICE inline int64_t saturating_mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kSaturated / b ? kSaturated : a * b;
}

// a + b for a, b >= 0, saturating at kSaturated.
QUIVER_HOST_DEVICE inline int64_t saturating_add(int64_t a, int64_t b) {
  return a > kSaturated - b ? kSaturated : a + b;
}

// Most neighbors one node of a graph with num_edges edges can yield for `fanout`.
QUIVER_HOST_DEVICE inline int64_t per_node_bound(int64_t fanout, bool replace, int64_t num_edges) {
  if (fanout < 0) return num_edges;
  if (replace) return fanout;
  return fanout < num_edges ? fanout : num_edges;
}

// 32-bit random draws one row may consume: two per pick, picks of a row with replacement
// drawn at offsets 4j apart; all-neighbor hops draw none.
QUIVER_HOST_DEVICE inline int64_t draws_per_row(int64_t fanout, bool replace, int64_t num_edges) {
  if (fanout < 0) return 4;
  const int64_t picks = per_node_bound(fanout, replace, num_edges);
  return saturating_mul(4, picks > 1 ? picks : 1);
}

// A row drawn by its prefix sums (edge_weight_cumsum): the sums must start at the row's
// first weight (a cumsum over the whole CSR, not restarting at each row or relation slice,
// grows as well and would skew every row but the first), and a draw's position must fit
// them: `low` (the sum before it) <= the target < its sum <= the row's total. Falling sums
// send the binary search anywhere; these catch it where it lands. NaN fails every test.
QUIVER_HOST_DEVICE inline bool sums_start_at(double first_sum, float first_weight) {
  const double w = first_weight;
  return first_sum - w <= 1e-6 * w && w - first_sum <= 1e-6 * w;
}
QUIVER_HOST_DEVICE inline bool sum_draw_fits(double low, double target, double sum, double total) {
  return low <= target && target < sum && sum > low && sum <= total;
}
// A draw's target in [0, total): uniform * total rounds up to total itself about once in
// 2^53 draws (total just above a power of two), which sum_draw_fits would take for sums
// that do not grow.
QUIVER_HOST_DEVICE inline double sum_draw_target(double uniform, double total) {
  const double target = uniform * total;
  return target < total ? target : nextafter(total, 0.0);
}

// Nodes a batch can reach at most before its first all-neighbors hop: seeds times the
// fanout products, capped by the graph (every node once, plus duplicate seeds). The
// reindexing table starts at this size and grows at an all-neighbors hop, once its exact
// size is known, so that [-1] on a huge graph does not cost a table for the whole graph.
template <typename Fanouts>
int64_t node_bound(int64_t batch_size, const Fanouts& fanouts, int64_t num_nodes) {
  const int64_t cap = num_nodes + batch_size;
  int64_t total = batch_size, frontier = batch_size;
  for (const int64_t fanout : fanouts) {
    if (fanout < 0) return total;
    frontier = saturating_mul(frontier, fanout);
    total = saturating_add(total, frontier);
    if (total >= cap) return cap;
  }
  return total;
}

// Nodes the reindexing table starts sized for: node_bound, but at most 2^21 past the
// seeds. Disjoint trees multiply the key space by the batch, where node_bound with large
// fanouts asked for tens of GiB before a node was sampled; each hop grows the table to its
// exact bound anyway, so a large batch pays one rehash a hop past this size.
constexpr int64_t kInitialTableNodes = int64_t{1} << 21;
template <typename Fanouts>
int64_t initial_table_nodes(int64_t batch_size, const Fanouts& fanouts, int64_t key_space) {
  const int64_t bound = node_bound(batch_size, fanouts, key_space);
  const int64_t cap = saturating_add(batch_size, kInitialTableNodes);
  return bound < cap ? bound : cap;
}

// Slots of a reindexing table for `nodes` ids: a power of two, at most half full, so that
// linear probing always finds a free slot quickly.
inline int64_t node_table_capacity(int64_t nodes) {
  int64_t capacity = 1024;
  while (capacity < 2 * nodes) capacity <<= 1;
  return capacity;
}

// One slot of the reindexing table, the same 16 bytes on CPU and GPU. Cleared to all ones:
// key -1 (empty), local -1 (not numbered yet), first = no edge yet.
struct alignas(16) NodeSlot {
  int64_t key;     // the global node id, -1 while the slot is empty
  uint32_t first;  // while unnumbered: the first edge position that named this id
  int32_t local;   // its local index once numbered, else -1
};
// `first` then `local` read as one little-endian 64-bit word: local in the high half, so
// that one atomic minimum with (all ones << 32 | e) lowers `first` only while the id is
// unnumbered (a numbered id's word is smaller), with no read of `local` first (reindex.cu).
constexpr int64_t kSlotMentionOffset = 8;
static_assert(sizeof(NodeSlot) == 16, "one slot per half sector");
constexpr int64_t kEmptyNodeKey = -1;

// The hash that spreads node ids over the table (murmur3's 64-bit finalizer).
QUIVER_HOST_DEVICE inline uint64_t mix_node_id(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Uniform integer in [0, n) from 64 random bits (multiply-high; bias below n / 2^64).
QUIVER_HOST_DEVICE inline uint64_t scale_to_range(uint64_t bits, uint64_t n) {
#ifdef __CUDA_ARCH__
  return __umul64hi(bits, n);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
#endif
}


// The group g of `value` among `groups` consecutive ranges [offsets[g], offsets[g + 1])
// (non-decreasing offsets, value inside the whole): the last g with offsets[g] <= value,
// so empty groups are skipped. Node types of global ids, relations of global edge ids, hops
// of positions in a list ordered by hop.
QUIVER_HOST_DEVICE inline int64_t group_of(const int64_t* offsets, int64_t groups,
                                           int64_t value) {
  int64_t lo = 0, hi = groups;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (offsets[mid] <= value) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The first of n positions whose edge id is at least `bound` (ids grouped by relation).
QUIVER_HOST_DEVICE inline int64_t first_edge_id_at_least(const int64_t* edge_ids, int64_t n,
                                                         int64_t bound) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (edge_ids[mid] < bound) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// A heterogeneous graph as one CSR (hetero_neighbor_sample): node ids are global, node
// type t owning [type_offsets[t], type_offsets[t + 1]); each row's edges are grouped by
// relation, relation r's edges carrying the global edge ids [relation_edge_offsets[r],
// relation_edge_offsets[r + 1]). Each frontier node expands into rows_per_node rows: its
// j-th is the slice of its row that holds the j-th relation ending at its type
// (type_relations[type_relations_ptr[t] + j]), sampled with that relation's fanout; j past
// its type's relations yields nothing. Unset (no tables): one row per node.
// With `slice_starts` the slices are read, not searched: node v of type t with R_t > 1
// relations has R_t - 1 entries from slice_bases[t] + (v - type_offsets[t]) * (R_t - 1),
// where its slices 1..R_t-1 start relative to its row (int32; on the GPU in UVA mode, so a
// slice costs two reads of GPU memory instead of two searches over PCIe).
struct RelationRows {
  int64_t rows_per_node = 1;
  const int64_t* type_offsets = nullptr;  // num_types + 1
  int64_t num_types = 0;
  const int64_t* type_relations_ptr = nullptr;  // num_types + 1
  const int64_t* type_relations = nullptr;
  const int64_t* relation_edge_offsets = nullptr;  // num_relations + 1
  int64_t num_relations = 0;
  const int32_t* slice_starts = nullptr;
  const int64_t* slice_bases = nullptr;  // num_types

  QUIVER_HOST_DEVICE bool active() const { return type_offsets != nullptr; }
  // The frontier node of row r.
  QUIVER_HOST_DEVICE int64_t node_index(int64_t r) const {
    return rows_per_node == 1 ? r : r / rows_per_node;
  }
};

// Narrows the row [begin, begin + degree) of global node `node` to the slice of its
// `slot`-th incoming relation and returns that relation's fanout in `hop_fanouts` (one per
// relation); a slot past its type's relations yields an empty slice. Rows are grouped by
// relation, so the slice is read from slice_starts, or found by two binary searches over
// the row's edge ids (nothing when the type has one relation). Every read stays inside the
// row whatever the edge ids or the starts hold.
QUIVER_HOST_DEVICE inline int64_t relation_slice(const RelationRows& relations,
                                                 const int64_t* hop_fanouts,
                                                 const int64_t* edge_ids, int64_t node,
                                                 int64_t slot, int64_t& begin, int64_t& degree) {
  const int64_t type = group_of(relations.type_offsets, relations.num_types, node);
  const int64_t first = relations.type_relations_ptr[type];
  const int64_t count = relations.type_relations_ptr[type + 1] - first;
  if (slot >= count) {
    degree = 0;
    return 0;
  }
  const int64_t relation = relations.type_relations[first + slot];
  if (count > 1) {
    int64_t from, to;
    if (relations.slice_starts != nullptr) {
      const int32_t* starts = relations.slice_starts + relations.slice_bases[type] +
                              (node - relations.type_offsets[type]) * (count - 1);
      from = slot == 0 ? 0 : starts[slot - 1];
      to = slot == count - 1 ? degree : starts[slot];
      from = from < 0 ? 0 : (from > degree ? degree : from);  // inside the row, whatever
      to = to < from ? from : (to > degree ? degree : to);    // the starts hold
    } else {
      from = first_edge_id_at_least(edge_ids + begin, degree,
                                    relations.relation_edge_offsets[relation]);
      to = first_edge_id_at_least(edge_ids + begin, degree,
                                  relations.relation_edge_offsets[relation + 1]);
    }
    begin += from;
    degree = to > from ? to - from : 0;
  }
  return hop_fanouts[relation];
}


// hetero_neighbor_sample's regrouping of the hop loop's output (global node ids numbered by
// first appearance, each hop's after the last's; global edge ids likewise by hop) by node
// type and relation. Counts are kept per (type, hop) at type * (hops + 1) + hop, then per
// (relation, hop) at num_types * (hops + 1) + relation * hops + hop.
struct HeteroGroups {
  const int64_t* type_offsets;           // num_types + 1
  int64_t num_types;
  const int64_t* relation_edge_offsets;  // num_relations + 1
  int64_t num_relations;
  const int64_t* node_hop_offsets;  // num_hops + 2: where each hop's nodes start (seeds: 0)
  const int64_t* edge_hop_offsets;  // num_hops + 1
  int64_t num_hops;
  const int64_t* relation_src_types;  // num_relations
  const int64_t* relation_dst_types;  // num_relations

  QUIVER_HOST_DEVICE int64_t num_counts() const {
    return num_types * (num_hops + 1) + num_relations * num_hops;
  }
  // Node i (global id `node`): its type, its id within the type, and its count's index.
  QUIVER_HOST_DEVICE int64_t node_count_at(int64_t i, int64_t node, int64_t& type,
                                           int64_t& local) const {
    type = group_of(type_offsets, num_types, node);
    local = node - type_offsets[type];
    return type * (num_hops + 1) + group_of(node_hop_offsets, num_hops + 1, i);
  }
  // Edge i (global id `edge`): its relation, its id within the relation, its count's index.
  QUIVER_HOST_DEVICE int64_t edge_count_at(int64_t i, int64_t edge, int64_t& relation,
                                           int64_t& local) const {
    relation = group_of(relation_edge_offsets, num_relations, edge);
    local = edge - relation_edge_offsets[relation];
    return num_types * (num_hops + 1) + relation * num_hops +
           group_of(edge_hop_offsets, num_hops, i);
  }
  // Whether a sampled edge (global id `edge`, read from node `target` to its neighbor
  // `source`, global ids) fits the layout: an id of the graph's, ends of its relation's
  // types. The loop trusts each row's edge ids to say where a relation's slice starts;
  // a CSR whose ids disagree with it would have edges filed under another relation.
  QUIVER_HOST_DEVICE bool edge_fits(int64_t edge, int64_t source, int64_t target) const {
    if (edge < 0 || edge >= relation_edge_offsets[num_relations]) return false;
    const int64_t relation = group_of(relation_edge_offsets, num_relations, edge);
    return group_of(type_offsets, num_types, source) == relation_src_types[relation] &&
           group_of(type_offsets, num_types, target) == relation_dst_types[relation];
  }
  // Where type t's group starts among the sorted nodes: the counts of the types before it.
  QUIVER_HOST_DEVICE int64_t type_start(const int64_t* counts, int64_t type) const {
    int64_t start = 0;
    for (int64_t k = 0; k < type * (num_hops + 1); ++k) start += counts[k];
    return start;
  }
};

}  // namespace quiver
