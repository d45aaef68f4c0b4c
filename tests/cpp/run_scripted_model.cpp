// Loads a TorchScript module saved from Python (tests/python/test_entry_points.py) whose
// forward calls quiver ops, runs it on a ring graph, and checks the result.
#include <torch/script.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: run_scripted_model <model.pt>\n";
    return 2;
  }
  try {
    torch::jit::Module module = torch::jit::load(argv[1]);
    const int64_t n = 30;
    at::Tensor ids = torch::arange(n);
    at::Tensor row = torch::cat({ids, ids});
    at::Tensor col = torch::cat({(ids + 1).remainder(n), (ids - 1).remainder(n)});
    at::Tensor x = torch::randn({n, 4});
    at::Tensor seeds = torch::tensor({0, 10});
    auto out = module.forward({row, col, n, seeds, x}).toTuple();
    at::Tensor feats = out->elements()[0].toTensor();
    at::Tensor node_ids = out->elements()[1].toTensor();
    at::Tensor rows = out->elements()[2].toTensor();
    at::Tensor cols = out->elements()[3].toTensor();
    TORCH_CHECK(torch::equal(feats, x.index_select(0, node_ids)), "gathered rows differ");
    TORCH_CHECK(node_ids[0].item<int64_t>() == 0 && node_ids[1].item<int64_t>() == 10,
                "seeds must come first");
    at::Tensor diff =
        (node_ids.index_select(0, rows) - node_ids.index_select(0, cols)).remainder(n);
    TORCH_CHECK(((diff == 1) | (diff == n - 1)).all().item<bool>(), "sampled a non-edge");
    std::cout << "sampled " << node_ids.numel() << " nodes and " << rows.numel()
              << " edges through the scripted model\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
