// A graph directory written by examples/cpp/save_graph.py (topology/, features/, labels/ in
// the package's raw-file format), read and checked once for both C++ examples: the CSR
// whole and sound (quiver::check_csr), a feature row per node, integer class ids per node,
// split ids in range. Each error names the file it is about, before anything runs on the
// arrays (inside an AOTInductor package an unchecked CSR failed under an op's generated
// name; 2-D labels broadcast into a wrong accuracy with no error).
#pragma once

#include <ATen/ATen.h>
#include <quiver/ops.h>

#include <filesystem>
#include <optional>
#include <string>

#include "raw_arrays.h"

namespace graph_files {

namespace fs = std::filesystem;

struct Graph {
  at::Tensor indptr, indices;  // CSR of each node's neighbors
  at::Tensor rows;             // [nodes, features]
  at::Tensor order;            // node ids hottest first (undefined: none saved)
  at::Tensor labels, train_idx, test_idx;  // int64
  int64_t num_classes = 0;
};

// Labels are class ids: past this many classes the model's last layer alone would not fit.
constexpr int64_t kMostClasses = int64_t{1} << 20;

// `ids` as int64 if it is a 1-D tensor of integers, else a TypeError naming `name` in `file`
// (a float id was cut to an integer without a word).
inline at::Tensor integer_ids(const at::Tensor& ids, const fs::path& file, const char* name) {
  const at::ScalarType type = ids.scalar_type();
  TORCH_CHECK_TYPE(ids.dim() == 1 && at::isIntegralType(type, /*includeBool=*/false), file.string(),
                   ": ", name, " must be 1-D integer ids, got ", raw_arrays::dtype_name(type),
                   " of shape ", ids.sizes());
  return ids.to(at::kLong);
}

// The graph in `directory`; the splits (train_idx, test_idx) only when `splits`.
inline Graph load(const fs::path& directory, bool splits = true) {
  using raw_arrays::require;
  Graph g;
  const fs::path topology_dir = directory / "topology", features_dir = directory / "features",
                 labels_dir = directory / "labels";
  const auto topology = raw_arrays::load_arrays(topology_dir, "csr");
  g.indptr = require(topology, "indptr", topology_dir);
  g.indices = require(topology, "indices", topology_dir);
  try {
    quiver::check_csr(g.indptr, g.indices);
  } catch (const c10::Error& error) {
    TORCH_CHECK_VALUE(false, topology_dir.string(), ": ", error.what_without_backtrace());
  }
  const int64_t nodes = g.indptr.numel() - 1;
  TORCH_CHECK_VALUE(nodes >= 1, topology_dir.string(), ": the topology has no node");

  const auto features = raw_arrays::load_arrays(features_dir, "feature");
  g.rows = require(features, "rows", features_dir);
  TORCH_CHECK_VALUE(g.rows.dim() == 2 && g.rows.size(1) >= 1, features_dir.string(),
                    ": rows must be [nodes, features] with at least one feature, got shape ",
                    g.rows.sizes());
  TORCH_CHECK_VALUE(g.rows.size(0) == nodes, features_dir.string(), ": ", g.rows.size(0),
                    " feature rows for the topology's ", nodes, " nodes");
  if (features.count("order")) {
    g.order = integer_ids(features.at("order"), features_dir, "order");
    // Hottest first, each node once: the cache's positions are its inverse.
    TORCH_CHECK_VALUE(g.order.numel() == nodes &&
                          at::equal(std::get<0>(g.order.sort()), at::arange(nodes)),
                      features_dir.string(), ": order must hold each of the ", nodes,
                      " node ids once (hottest first)");
  }

  std::map<std::string, std::optional<int64_t>> record;
  const auto labels = raw_arrays::load_arrays(labels_dir, "labels", &record);
  g.labels = integer_ids(require(labels, "y", labels_dir), labels_dir, "y");
  TORCH_CHECK_VALUE(g.labels.numel() == nodes, labels_dir.string(), ": y holds ",
                    g.labels.numel(), " labels for the topology's ", nodes, " nodes");
  const auto [low, high] = at::aminmax(g.labels);
  TORCH_CHECK_VALUE(low.item<int64_t>() >= 0 && high.item<int64_t>() < kMostClasses,
                    labels_dir.string(), ": y must hold class ids in [0, ", kMostClasses,
                    "), got ", low.item<int64_t>(), " to ", high.item<int64_t>());
  g.num_classes = high.item<int64_t>() + 1;
  if (const auto said = record.find("num_classes"); said != record.end()) {
    // One corrupt label had made a model of that many classes, trained without a word.
    TORCH_CHECK_VALUE(said->second.has_value(), labels_dir.string(), ": the record's "
                      "num_classes is not a whole number: the metadata is corrupt");
    const int64_t classes = *said->second;
    TORCH_CHECK_VALUE(classes >= 1 && classes <= kMostClasses, labels_dir.string(),
                      ": the record's num_classes is ", classes, ", not in [1, ", kMostClasses,
                      "]: the metadata is corrupt");
    TORCH_CHECK_VALUE(g.num_classes <= classes, labels_dir.string(), ": y holds class id ",
                      high.item<int64_t>(), " but the record says num_classes ", classes);
    g.num_classes = classes;
  }
  if (!splits) return g;
  for (auto [name, ids] : {std::pair{"train_idx", &g.train_idx}, {"test_idx", &g.test_idx}}) {
    *ids = integer_ids(require(labels, name, labels_dir), labels_dir, name);
    TORCH_CHECK_VALUE(ids->numel() > 0, labels_dir.string(), ": ", name, " is empty");
    const auto [first, last] = at::aminmax(*ids);
    TORCH_CHECK_VALUE(first.item<int64_t>() >= 0 && last.item<int64_t>() < nodes,
                      labels_dir.string(), ": ", name, " holds node ids outside [0, ", nodes,
                      ")");
  }
  return g;
}

}  // namespace graph_files
