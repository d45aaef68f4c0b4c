// Loads a TorchScript module saved from Python (tests/python/test_entry_points.py) whose
// forward calls quiver ops, runs it on a ring graph, and checks the result; or one that holds
// the runtime classes (--held-classes), restored from their pickles.
#include <torch/script.h>

#include <iostream>
#include <string>

// --held-classes: a module holding a FeatureTiers and a ShardMap, pickled with it, and the
// answers they gave in Python (expected_rows, expected_hosts for the ids it holds).
int run_held_classes(const std::string& path) {
  torch::jit::Module module = torch::jit::load(path);
  const at::Tensor ids = module.attr("ids").toTensor();
  auto out = module.forward({ids}).toTuple();
  TORCH_CHECK(torch::equal(out->elements()[0].toTensor(), module.attr("expected_rows").toTensor()),
              "the restored FeatureTiers gathers other rows than it did in Python");
  TORCH_CHECK(torch::equal(out->elements()[1].toTensor(), module.attr("expected_hosts").toTensor()),
              "the restored ShardMap places the ids on other hosts than it did in Python");
  std::cout << "restored FeatureTiers and ShardMap answer as they did in Python\n";
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--held-classes") {
    try {
      return run_held_classes(argv[2]);
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    }
  }
  if (argc != 2) {
    std::cerr << "usage: run_scripted_model <model.pt> | --held-classes <model.pt>\n";
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
