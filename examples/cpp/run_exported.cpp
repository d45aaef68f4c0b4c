// Runs a GraphSAGE exported by examples/export_sage.py (torch.export + AOTInductor .pt2)
// from C++, no Python: the model samples and gathers with the quiver ops inside its graph,
// so this program only loads the package, the graph and the seeds, and calls it.
//
//   run_exported MODEL.pt2 GRAPH_DIR [--seeds A:B] [--seed 0] [--device cpu|cuda] [--out DIR]
//   run_exported MODEL.pt2 --inputs DIR --out DIR [--seed 0] [--device cpu|cuda]
//
// GRAPH_DIR is what export_sage.py wrote (topology/, features/, labels/). Prints the
// accuracy on the seeds; --out writes the scores as arrays (torch_quiver_ops.load_arrays
// reads them). Random numbers come from libtorch's default generator, seeded by --seed,
// so the same seed gives what eager PyTorch gives after torch.manual_seed(seed). A package
// exported on CUDA takes --device cuda (the graph and seeds then go to GPU 0).
//
// The second form runs any package: its inputs are the arrays input_0, input_1, ... that
// save_arrays(DIR, "inputs", ...) wrote, and its outputs are written as output_0, ... (stem
// "outputs"). Objects the model holds (a FeatureTiers, a ShardMap) come from the package.
#include <quiver/ops.h>  // links the library: the package calls the quiver ops by name
#include <quiver/serving.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <set>
#include <string>

#include "graph_files.h"
#include "option_values.h"
#include "raw_arrays.h"

namespace {

torch::inductor::AOTIModelPackageLoader load_package(const std::string& package,
                                                     const at::Device& device) {
  TORCH_CHECK(device.is_cpu() || torch::cuda::is_available(), "--device ", device,
              " needs a CUDA GPU, and libtorch sees none");
  // torch's loader crashes the process on a zip of another layout: refused first, by name.
  quiver::runtime::check_package_layout(package, "MODEL.pt2");
  // The GPU named (cuda:1 runs there, as the inputs are moved there), cuda alone: GPU 0.
  const c10::DeviceIndex index = device.is_cuda() ? (device.has_index() ? device.index() : 0) : -1;
  try {
    return torch::inductor::AOTIModelPackageLoader(package, "model", false, 1, index);
  } catch (const std::exception& error) {
    const c10::Error* c10_error = dynamic_cast<const c10::Error*>(&error);
    TORCH_CHECK(false, package, " could not be loaded as an AOTInductor package: ",
                c10_error ? c10_error->what_without_backtrace() : error.what());
  }
}

// The kernels read the table with the width and dtype they were compiled for (the
// package's metadata says which, as export_sage.py writes it): another table would be read
// past its end or as other numbers, with no error.
void check_feature_table(torch::inductor::AOTIModelPackageLoader& loader,
                         const std::string& package, const at::Tensor& table,
                         const std::string& table_name) {
  const auto metadata = loader.get_metadata();
  const auto width = metadata.find("quiver.feature_width");
  const auto dtype = metadata.find("quiver.feature_dtype");
  if (width != metadata.end())
    TORCH_CHECK(table.dim() == 2 && std::to_string(table.size(1)) == width->second, table_name,
                " holds a table of shape ", table.sizes(), ", but ", package,
                " was exported for rows of ", width->second, " features");
  if (dtype != metadata.end()) {
    const auto known = raw_arrays::dtypes().find(dtype->second);
    TORCH_CHECK(known != raw_arrays::dtypes().end() && known->second == table.scalar_type(),
                table_name, " holds rows of ", raw_arrays::dtype_name(table.scalar_type()),
                ", but ", package, " was exported for ", dtype->second);
  }
}

// The second form: the package's inputs from arrays, its outputs to arrays.
void run_on_arrays(const std::string& package, const std::filesystem::path& inputs_dir,
                   const std::string& out, const at::Device& device) {
  TORCH_CHECK(!out.empty(), "--inputs needs --out DIR");
  raw_arrays::check_writable_folder(out, "--out");
  const auto arrays = raw_arrays::load_arrays(inputs_dir, "inputs");
  std::vector<at::Tensor> inputs;
  while (arrays.count("input_" + std::to_string(inputs.size())))
    inputs.push_back(arrays.at("input_" + std::to_string(inputs.size())).to(device));
  TORCH_CHECK(inputs.size() == arrays.size(), "--inputs ", inputs_dir.string(),
              ": arrays must be named input_0, input_1, ... without gaps");
  auto loader = load_package(package, device);
  const auto metadata = loader.get_metadata();
  if (const auto position = metadata.find("quiver.feature_input"); position != metadata.end()) {
    const std::string name = "input_" + position->second;
    TORCH_CHECK(arrays.count(name), "--inputs ", inputs_dir.string(), " has no ", name, ", the ",
                "feature table ", package, " takes (", inputs.size(), " inputs given)");
    check_feature_table(loader, package, arrays.at(name),
                        name + " of --inputs " + inputs_dir.string());
  }
  const std::vector<at::Tensor> outputs = [&] {
    try {
      return loader.run(inputs);
    } catch (const std::exception& error) {
      // The op's own words (which input, which value) are printed above as it fails; the
      // runner's error names neither the package nor the inputs.
      TORCH_CHECK(false, package, " failed on --inputs ", inputs_dir.string(),
                  " (the op's error is above): ", error.what());
    }
  }();
  std::map<std::string, at::Tensor> named;
  for (size_t i = 0; i < outputs.size(); ++i) named["output_" + std::to_string(i)] = outputs[i];
  raw_arrays::save_arrays(out, "outputs", named);
  std::cout << "ran " << package << " on " << inputs.size() << " inputs: " << outputs.size()
            << " outputs" << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "usage: run_exported MODEL.pt2 GRAPH_DIR [--seeds A:B] [--seed N] [--device cpu|cuda] "
      "[--out DIR]\n       run_exported MODEL.pt2 --inputs DIR --out DIR [--seed N] "
      "[--device cpu|cuda]";
  // Help where an argument or an option's name stands, not as an option's value (--out -h
  // had printed it and written nothing).
  const auto asks_help = [](const std::string& arg) { return arg == "-h" || arg == "--help"; };
  if ((argc >= 2 && asks_help(argv[1])) || (argc >= 3 && asks_help(argv[2]))) {
    std::cout << usage << std::endl;
    return 0;
  }
  option_values::quiet_stack_traces();
  try {
    TORCH_CHECK(argc >= 3, usage);
    const std::string package = argv[1];
    TORCH_CHECK(std::filesystem::is_regular_file(package), "MODEL.pt2 ", package,
                " is not a file (an AOTInductor package from examples/export_sage.py)");
    const bool on_arrays = std::string(argv[2]) == "--inputs";
    int64_t first = 0, last = 1024, seed = 0;
    std::string out, inputs_dir, device_name = "cpu";
    bool seeds_given = false;
    std::set<std::string> given;  // a second value would silently win over the first
    for (int i = on_arrays ? 2 : 3; i < argc; ++i) {
      const std::string arg = argv[i];
      if (asks_help(arg)) {
        std::cout << usage << std::endl;
        return 0;
      }
      TORCH_CHECK(arg == "--seeds" || arg == "--seed" || arg == "--device" || arg == "--out" ||
                      arg == "--inputs",
                  "unknown option ", arg, " (see --help)");
      TORCH_CHECK(i + 1 < argc, "option ", arg, " needs a value");
      TORCH_CHECK(given.insert(arg).second, "option ", arg, " is given twice");
      const std::string value = argv[++i];
      TORCH_CHECK(!value.empty(), "option ", arg, " needs a value, got an empty one");
      if (arg == "--seeds") {
        const auto colon = value.find(':');
        TORCH_CHECK(colon != std::string::npos, "--seeds takes A:B, got ", value);
        seeds_given = true;
        first = option_values::whole(arg, value.substr(0, colon));
        last = option_values::whole(arg, value.substr(colon + 1));
      } else if (arg == "--seed") {
        seed = option_values::whole(arg, value);
      } else if (arg == "--device") {
        device_name = value;
      } else if (arg == "--out") {
        out = value;
      } else if (arg == "--inputs") {
        inputs_dir = value;
      } else {
        TORCH_CHECK(false, "unknown option ", arg);
      }
    }
    TORCH_CHECK(on_arrays || inputs_dir.empty(),
                "--inputs DIR takes the place of GRAPH_DIR (run_exported MODEL.pt2 --inputs DIR "
                "--out DIR), not an option after it");
    TORCH_CHECK(!on_arrays || !seeds_given, "--seeds belongs to the GRAPH_DIR form; with --inputs "
                "the seeds are among the arrays");
    const at::Device device = [&] {
      try {
        return at::Device(device_name);
      } catch (const c10::Error&) {
        TORCH_CHECK(false, "--device takes cpu or cuda[:N], got '", device_name, "'");
      }
    }();
    TORCH_CHECK(device.is_cuda() || (device.is_cpu() && !device.has_index()),
                "--device takes cpu or cuda[:N], got '", device_name, "'");
    torch::manual_seed(seed);
    if (on_arrays) {
      run_on_arrays(package, inputs_dir, out, device);
      return 0;
    }
    const std::filesystem::path graph = argv[2];
    if (!out.empty()) raw_arrays::check_writable_folder(out, "--out");
    // The CSR, rows and labels checked here, each error naming its file: the package's
    // kernels trust what they are given.
    const graph_files::Graph g = graph_files::load(graph, /*splits=*/false);
    const at::Tensor &indptr = g.indptr, &indices = g.indices, &rows = g.rows, &y = g.labels;
    const int64_t nodes = indptr.numel() - 1;
    TORCH_CHECK(first < last, "--seeds A:B takes A < B (the seeds A to B - 1), got ", first,
                ":", last);
    if (!seeds_given) last = std::min<int64_t>(last, nodes);  // the default: up to 1024 nodes
    TORCH_CHECK(0 <= first && last <= nodes, "--seeds ", first, ":", last, " must lie in [0, ",
                nodes, "]");
    const at::Tensor seeds = torch::arange(first, last);

    auto loader = load_package(package, device);
    check_feature_table(loader, package, rows, (graph / "features").string());
    torch::manual_seed(seed);
    const at::Tensor scores =
        loader.run({indptr.to(device), indices.to(device), rows.to(device), seeds.to(device)})[0]
            .cpu();
    TORCH_CHECK(scores.dim() == 2 && scores.size(0) == seeds.numel(), "the model returned ",
                scores.sizes(), " for ", seeds.numel(), " seeds");
    // NaN scores took class 0 for every seed, and an accuracy was printed all the same.
    const int64_t not_finite = (~scores.isfinite()).sum().item<int64_t>();
    TORCH_CHECK(not_finite == 0, "the model returned ", not_finite, " scores that are not finite ",
                "(NaN or inf) for ", seeds.numel(), " seeds: the rows of ", graph.string(),
                " or the package's weights hold NaN or inf");
    const at::Tensor seed_labels = y.index_select(0, seeds).to(at::kLong);
    const int64_t top_label = seed_labels.max().item<int64_t>();
    TORCH_CHECK(top_label < scores.size(1), graph.string(), "'s labels reach ", top_label,
                " for these seeds, but ", package, " scores ", scores.size(1), " classes: "
                "the package was exported for another graph");
    const double accuracy =
        (scores.argmax(1) == seed_labels).to(at::kDouble).mean().item<double>();
    std::cout << "ran " << package << " on " << seeds.numel() << " seeds: scores "
              << scores.sizes() << ", accuracy " << accuracy << std::endl;
    if (!out.empty()) raw_arrays::save_arrays(out, "output", {{"scores", scores}, {"seeds", seeds}});
    return 0;
  } catch (const c10::Error& error) {
    std::cerr << "run_exported: " << error.what_without_backtrace() << "\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "run_exported: " << error.what() << "\n";
    return 2;
  }
}
