// The C++ tests' shared fixture: random graphs, and a parametrised test base that runs each
// case on the CPU, in GPU mode (topology in device memory) and in UVA mode (topology in
// pinned host memory), skipping the GPU modes on a machine without one.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <quiver/ops.h>
#include <torch/cuda.h>

#include <string>

namespace quiver::testing {

struct Graph {
  at::Tensor indptr, indices, edge_ids, row, col;
  int64_t num_nodes;

  at::Tensor degree() const { return indptr.slice(0, 1) - indptr.slice(0, 0, -1); }
};

// A random multigraph whose last tenth of nodes has no out-edges, built with csr_from_coo.
inline Graph random_graph(int64_t num_nodes, int64_t num_edges, at::ScalarType dtype) {
  at::manual_seed(num_edges);
  at::Tensor row = at::randint(num_nodes * 9 / 10, {num_edges});
  at::Tensor col = at::randint(num_nodes, {num_edges});
  auto [indptr, indices, eid] = quiver::csr_from_coo(row.to(dtype), col.to(dtype), num_nodes);
  return {indptr, indices, eid, row, col, num_nodes};
}

// Parameter: "cpu", "gpu" or "uva".
class OnEveryDevice : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() != "cpu" && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  }
  // GPU mode keeps the topology in device memory, UVA in pinned host memory.
  at::Tensor place_topology(const at::Tensor& t) const {
    if (GetParam() == "gpu") return t.cuda();
    if (GetParam() == "uva") return t.pin_memory();
    return t;
  }
  // Where seeds and ids go, and so where the op runs.
  at::Device op_device() const { return GetParam() == "cpu" ? at::kCPU : at::kCUDA; }
};

inline std::string device_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace quiver::testing

#define QUIVER_ON_EVERY_DEVICE(suite)                                              \
  INSTANTIATE_TEST_SUITE_P(Devices, suite, ::testing::Values("cpu", "gpu", "uva"), \
                           quiver::testing::device_name)
