// The registrar: the one TORCH_LIBRARY(quiver), above both layers. It registers the runtime
// classes (runtime/classes.cpp) first, then declares every op schema, each documented here
// once. Backends register only implementations for these names, next to their kernels
// (ops/cpu/<op>.cpp, ops/cuda/<op>.cpp); fake kernels live in torch_quiver_ops/_fake.py.
// ops/ never includes runtime/; runtime/ may use ops/; only this file sees both.
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include "runtime/classes.h"

TORCH_LIBRARY(quiver, m) {
  // Fake (meta) kernels live in Python; this tells PyTorch where to find them.
  m.set_python_module("torch_quiver_ops._fake");

  // Every op is tagged pt2_compliant: opcheck (schema, fake kernel, autograd registration,
  // AOT dispatch) passes for each on CPU and CUDA in its test file, and torch.export +
  // AOTInductor run them (tests/python/test_export.py). A call given a torch.Generator is
  // the exception: torch 2.11 cannot make a Generator a graph input.

  // Runtime classes first: op schemas may name them (runtime/classes.cpp).
  quiver::runtime::register_runtime_classes(m);

  // A whole CSR checked once, where a topology is made (the sampling ops check only the
  // offsets of the rows they touch, and sample_subgraph the neighbor ids it reindexes;
  // sample_neighbors returns neighbor ids as `indices` holds them): shapes and dtypes,
  // indptr from 0 to the neighbor count and non-decreasing, every neighbor id in
  // [0, num_nodes) (num_nodes < 0: indptr's node count), no edge id negative. Raises the
  // kernels' own errors (ValueError, IndexError, TypeError); one implementation for every
  // device (CompositeExplicitAutograd, ops/check_csr.cpp).
  m.def("check_csr(Tensor indptr, Tensor indices, Tensor? edge_ids=None, int num_nodes=-1) -> ()",
        {at::Tag::pt2_compliant_tag});
  // `order` (1-D int32/int64) lists each of num_rows rows exactly once; `what` names it in
  // the errors (TypeError, ValueError, IndexError). Hot orders and saved position maps are
  // checked here, from Python and from the runtime's ShardMap alike.
  m.def("check_permutation(Tensor order, int num_rows, str what) -> ()",
        {at::Tag::pt2_compliant_tag});
  // The sampling ops' own check of per-hop fanouts (at least one hop, each -1 or >= 0, with
  // replacement within a hop's edge limit), for samplers that check them when made.
  m.def("check_fanouts(int[] fanouts, bool replace, str what=\"fanouts\") -> ()",
        {at::Tag::pt2_compliant_tag});

  // CSR from COO: rows sorted (stable: edges of one row keep their input order).
  // edge_ids[k] is the input position of the k-th CSR edge.
  m.def(
      "csr_from_coo(Tensor row, Tensor col, int num_nodes) -> "
      "(Tensor indptr, Tensor indices, Tensor edge_ids)",
      {at::Tag::pt2_compliant_tag});

  // One hop: up to `fanout` neighbors of each seed (-1: all of them), uniform without
  // replacement unless `replace`. Returns per-seed counts, the flat neighbor ids and the
  // sampled edges' ids (edge_ids[pos] when edge_ids is given, else the CSR position). The
  // neighbor ids are `indices`' values, not checked against the node count: check_csr does
  // that once for a whole CSR.
  // Random numbers come from `generator` (on the seeds' device), else from the device's
  // default generator, so torch.manual_seed reproduces a call.
  m.def(
      "sample_neighbors(Tensor indptr, Tensor indices, Tensor seeds, int fanout, "
      "bool replace=False, Tensor? edge_ids=None, Generator? generator=None) -> "
      "(Tensor counts, Tensor neighbors, Tensor sampled_edge_ids)",
      {at::Tag::nondeterministic_seeded, at::Tag::pt2_compliant_tag});

  // Multi-hop sampling fused with reindexing, in PyG's layout: node_ids holds global ids,
  // seeds first, then each hop's new nodes in order of first appearance; (rows, cols) are
  // local indices into node_ids, edges flowing from the sampled neighbor (row) to the node
  // it was sampled for (col), grouped by hop. Per-hop counts are int64 CPU tensors.
  // `generator` as for sample_neighbors. (A topology cache, some nodes' neighbor lists in
  // GPU memory read instead of `indices` in pinned host memory, changes no sample: it is an
  // option of a sampler object, torch.classes.quiver.SubgraphSampler.)
  m.def(
      "sample_subgraph(Tensor indptr, Tensor indices, Tensor seeds, int[] fanouts, "
      "bool replace=False, Tensor? edge_ids=None, Generator? generator=None) -> "
      "(Tensor node_ids, Tensor rows, Tensor cols, Tensor sampled_edge_ids, "
      "Tensor nodes_per_hop, Tensor edges_per_hop)",
      {at::Tag::nondeterministic_seeded, at::Tag::pt2_compliant_tag});

  // sample_subgraph's general form (pyg-lib's neighbor_sample): the same hops and layout,
  // with rows that may be weighted, cut by time, and kept apart per seed. Per-edge arrays
  // are indexed by CSR position (like indices), where the CUDA op reads them from GPU or
  // pinned host memory.
  // - edge_weight (float32, finite and > 0 in every row a hop visits, else ValueError):
  //   without replacement successive sampling (pick after pick, each among the edges left
  //   with probability proportional to weight; Efraimidis-Spirakis keys), which is NOT
  //   inclusion probability proportional to weight; with replacement independent draws
  //   with probability w / sum(w).
  // - edge_time (int64, non-decreasing within each row) with seed_time (int64, one per
  //   seed): a node of seed i's tree takes only edges with time <= seed_time[i] (< with
  //   strict_time); temporal_strategy "uniform" samples those, "last" takes the most recent
  //   `fanout`. Needs disjoint.
  // - disjoint: each seed grows its own tree; a node reached from two seeds appears twice.
  //   batch[k] is the seed index of node_ids[k] (empty when not disjoint).
  // - edge_weight_cumsum (float64, with edge_weight): each row's inclusive prefix sums of
  //   its weights (ops.row_cumsum). Rows then draw by binary search in it, O(fanout log
  //   degree) reads instead of a key per neighbor, the same distribution: successive
  //   sampling is the order in which independent weighted draws first meet each edge, and
  //   after many repeats the rest of a row is drawn by keys. A drawn position where the
  //   sums do not grow raises ValueError; the sums are read only where draws land, so they
  //   are trusted to be the weights' prefix sums (a step of zero width is never drawn), as
  //   a row's times are trusted to be sorted (a search meets part of a row):
  //   ops.check_row_tables checks both once.
  m.def(
      "neighbor_sample(Tensor indptr, Tensor indices, Tensor seeds, int[] fanouts, "
      "bool replace=False, Tensor? edge_ids=None, Tensor? edge_weight=None, "
      "Tensor? edge_time=None, Tensor? seed_time=None, bool strict_time=False, "
      "str temporal_strategy=\"uniform\", bool disjoint=False, Generator? generator=None, "
      "Tensor? edge_weight_cumsum=None) -> "
      "(Tensor node_ids, Tensor batch, Tensor rows, Tensor cols, Tensor sampled_edge_ids, "
      "Tensor nodes_per_hop, Tensor edges_per_hop)",
      {at::Tag::nondeterministic_seeded, at::Tag::pt2_compliant_tag});

  // neighbor_sample on a heterogeneous graph stored as one CSR (pyg-lib's
  // hetero_neighbor_sample, GraphBolt's fused layout): node ids global, type t owning
  // [node_type_offsets[t], node_type_offsets[t + 1]); each row's edges grouped by relation
  // in ascending relation order (trusted: slices are found by binary search over a row's
  // edge ids; ops.check_row_tables checks the order once),
  // relation r (relation_src_types[r] -> relation_dst_types[r]) owning the global edge ids
  // [relation_edge_offsets[r], relation_edge_offsets[r + 1]) given per CSR position by
  // edge_ids; indices of relation r's edges are nodes of its source type. A node expands
  // through every relation ending at its type with fanouts[hop * num_relations + r] (hop-
  // major), all relations in the same launches of each hop. Seeds are global ids of any
  // types. Rules as neighbor_sample; with edge_time each row is sorted by time within each
  // relation, and edge_weight_cumsum restarts at each relation's slice of a row.
  // Output, pyg-lib's layout flattened: node_ids (ids local to their type) grouped by type,
  // each type's seeds first then by hop; batch likewise (disjoint); rows, cols (positions
  // in the source and target type's group) and sampled_edge_ids (ids local to the
  // relation) grouped by relation; nodes_per_type_hop [num_types, hops + 1] and
  // edges_per_relation_hop [num_relations, hops], int64 CPU tensors that size the groups.
  // (Where each node's relation slices start, read instead of searching the row's edge ids,
  // changes no sample: it is an option of a sampler object,
  // torch.classes.quiver.HeteroSubgraphSampler.)
  m.def(
      "hetero_neighbor_sample(Tensor indptr, Tensor indices, Tensor edge_ids, Tensor seeds, "
      "int[] node_type_offsets, int[] relation_src_types, int[] relation_dst_types, "
      "int[] relation_edge_offsets, int[] fanouts, bool replace=False, "
      "Tensor? edge_weight=None, Tensor? edge_time=None, Tensor? seed_time=None, "
      "bool strict_time=False, str temporal_strategy=\"uniform\", bool disjoint=False, "
      "Generator? generator=None, Tensor? edge_weight_cumsum=None) -> "
      "(Tensor node_ids, Tensor batch, Tensor rows, Tensor cols, Tensor sampled_edge_ids, "
      "Tensor nodes_per_type_hop, Tensor edges_per_relation_hop)",
      {at::Tag::nondeterministic_seeded, at::Tag::pt2_compliant_tag});

  // Negative destinations for link prediction: out[i * per_src + j] is a node drawn
  // uniformly from [0, num_nodes) for source src[i]. With exclude_edges, a draw v that is a
  // true edge src[i] -> v is drawn again, up to max_trials draws in all; the last draw
  // stands then, so a negative is a true edge with probability at most density^max_trials.
  // The CSR's rows list each node's sources (src[i] in row v: the PyG graph store's
  // layout), or with out_rows its destinations (v in row src[i]: a CSRTopo built from
  // edge_index). `generator` as for sample_neighbors. dst_begin and dst_count (-1: to the
  // last node) narrow the draws to [dst_begin, dst_begin + dst_count): the destination
  // type of a relation in hetero_neighbor_sample's layout, whose node ids are global.
  m.def(
      "sample_negatives(Tensor indptr, Tensor indices, Tensor src, int per_src, "
      "bool exclude_edges=True, int max_trials=8, bool out_rows=False, "
      "Generator? generator=None, int dst_begin=0, int dst_count=-1) -> Tensor",
      {at::Tag::nondeterministic_seeded, at::Tag::pt2_compliant_tag});

  // out[i] = table[ids[i]] for a row-major table of any dtype. A bad id raises IndexError in
  // the call itself. On CUDA, where every table (and positions) lies in the ids' GPU, the
  // call waits only for a check of the ids and returns with the rows still being written on
  // the current stream, as torch's own ops do (use them on another stream after an event);
  // a gather that reads host or peer memory has ended when it returns.
  m.def("gather_rows(Tensor table, Tensor ids) -> Tensor", {at::Tag::pt2_compliant_tag});

  // A table split over tiers, tier k holding the rows at positions [begin_k, begin_k +
  // tiers[k].size(0)) with begin_0 = 0: out[i] = the row at position positions[ids[i]]
  // (ids[i] itself when positions is None). On CUDA each tier may be on the ids' GPU, on a
  // peer GPU it can read, or in pinned host memory; positions on the ids' GPU or pinned.
  // A large CUDA batch that reads pinned host memory is read in position order (sorted on
  // the GPU), visiting the host table page after page. How host rows are read (in id
  // order, staged by CPU threads, on fewer thread blocks) changes no result: those are
  // options of a layout object (torch.classes.quiver.FeatureTiers), not of this op. Errors
  // and the return as gather_rows'.
  m.def(
      "gather_tiered_rows(Tensor[] tiers, Tensor? positions, Tensor ids) -> Tensor",
      {at::Tag::pt2_compliant_tag});
}

// The gathers have no derivative: a table that requires grad (an embedding's weight, say)
// gets an error when backward reaches them, not a gradient silently left None (torch's
// default for an op without one is a warning). Gather such a table with table[ids].
// Under torch.compile the error comes at compile time even for a forward-only call (AOT
// autograd traces the backward ahead): an inference step gathers under torch.no_grad().
TORCH_LIBRARY_IMPL(quiver, Autograd, m) {
  m.impl("gather_rows", torch::autograd::autogradNotImplementedFallback());
  m.impl("gather_tiered_rows", torch::autograd::autogradNotImplementedFallback());
}
