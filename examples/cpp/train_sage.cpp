// GraphSAGE trained by a libtorch program, no Python: neighbor sampling with the quiver ops
// (topology in GPU memory, in pinned host memory read by the GPU, or on the CPU), rows
// gathered through a quiver::runtime::FeatureTiers (hottest rows in GPU memory, the rest in
// pinned host memory), and a GraphSAGE written in libtorch (mean aggregation by index_add).
//
//   train_sage [--data DIR] [--mode GPU|UVA|CPU] [--epochs 3] [--batch-size 1024]
//              [--fanouts 15,10,5] [--hidden 256] [--lr 0.003] [--cache 0.2]
//              [--min-accuracy A] [--eval-nodes 10000] [--split 1] [--seed 0]
//              [--prefetch 0]
//              [--serve N] [--clients 4]
//              [--load-rates R1,R2,...] [--load-configs cpu,gpu,dispatch] [--load-seconds 4]
//              [--cpu-samplers 8] [--gpu-streams 4] [--max-batch 1024] [--max-wait-ms 2]
//              [--capture 1] [--objective-ms 30]
//
// --data reads a graph saved by Python (examples/cpp/save_graph.py: CSRTopo.save,
// Feature.save and the labels, in the package's raw-file format); without it the program
// builds a synthetic graph whose labels its neighbourhoods reveal. Each epoch prints its
// time split into sampling, gathering and the model (--split 0: the time alone, with no
// synchronization inside the epoch), and the test accuracy. The exit status
// is 1 when the final accuracy is below --min-accuracy, 2 on any error.
//
// --serve N then serves the trained model as a libtorch server would, with no Python: a
// quiver::runtime::ServingRuntime batches N requests for test nodes (sizes mostly small,
// a heavy tail, sent by --clients threads), samples each batch on the CPU or the GPU by its
// predicted cost, gathers through the same FeatureTiers, and runs the model on its own
// threads (serve_with). Prints latency percentiles, the batches each kind sampled, and the
// served answers' accuracy, which --min-accuracy then also bounds.
//
// --load-rates measures the same runtime under open-loop load, as scripts/serve_load.py
// does from Python but with no Python anywhere (no GIL between the clients, the batcher
// and the model threads): for each configuration (cpu: --cpu-samplers only; gpu:
// --gpu-streams only; dispatch: both, calibrated at start-up) and each rate, requests
// arrive as a Poisson process for --load-seconds, Pareto-sized like the load generator's,
// and each is timed from its scheduled arrival to its answer (gpu2: gpu on each of two GPUs,
// each request to the runtime with fewer outstanding). Prints a table (with the caching
// allocator's cudaMalloc calls and retries during each rate), then for each configuration
// the highest rate answered with p99 within --objective-ms. --epochs 0 serves the model
// untrained (the load does not depend on the weights).
#include <quiver/serving.h>
#include <quiver/batch_prefetcher.h>
#include <quiver/feature_tiers.h>
#include <quiver/host_pin.h>
#include <quiver/ops.h>
#include <quiver/subgraph_sampler.h>
#include <torch/torch.h>

#include "graph_files.h"
#include "option_values.h"
#include "raw_arrays.h"

using raw_arrays::load_arrays;
using raw_arrays::require;

#include <ATen/CPUGeneratorImpl.h>
#ifdef TRAIN_SAGE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <exception>
#include <mutex>
#include <numeric>
#include <random>
#include <chrono>
#include <cmath>
#include <thread>
#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using torch::Tensor;

namespace {

struct Options {
  std::string data;
  std::string mode;  // default: UVA with a GPU, CPU without
  int64_t epochs = 3;
  int64_t batch_size = 1024;
  std::vector<int64_t> fanouts{15, 10, 5};
  int64_t hidden = 256;
  double lr = 0.003;
  double cache = 0.2;  // share of the rows cached in GPU memory
  double min_accuracy = 0.0;
  int64_t eval_nodes = 10000;  // test nodes scored after each epoch
  bool split = true;           // synchronize after each phase to time it (else: epoch only)
  int64_t prefetch = 0;        // batches built ahead by a BatchPrefetcher thread (0: in line)
  int64_t seed = 0;
  int64_t serve = 0;    // requests served after training (0: none)
  int64_t clients = 4;  // threads sending them
  // Open-loop load (--load-rates): configurations, requests a second, seconds each.
  std::vector<int64_t> load_rates;
  std::vector<std::string> load_configs{"cpu", "gpu", "dispatch"};
  double load_seconds = 4.0;
  int64_t cpu_samplers = 8, gpu_streams = 4, max_batch = 1024;
  double max_wait_ms = 2.0;
  double objective_ms = 30.0;  // dispatch's latency objective (ServingOptions)
  bool capture = true;  // GPU samplers replay batch shapes seen before as CUDA graphs
  // How a thread waiting for the GPU waits (cudaSetDeviceFlags' schedule): auto (CUDA's
  // choice: spinning while the process has fewer contexts than cores), spin, yield or block.
  std::string cuda_sync = "auto";
  // The synthetic graph.
  int64_t nodes = 20000, classes = 8, features = 32, degree = 12;
};

Options parse(int argc, char** argv) {
  Options o;
  // Each option and what its value sets: one table, so that a name is known (and an
  // unknown one refused as such, not as "needs a value") exactly where it is read.
  using option_values::number, option_values::whole, option_values::wholes;
  using Set = std::function<void(const std::string&, const std::string&)>;
  const std::map<std::string, Set> setters = {
      {"--data", [&](auto& a, auto& v) {
         TORCH_CHECK_VALUE(!v.empty(), a, " takes a directory, got ''");
         o.data = v;
       }},
      {"--mode", [&](auto&, auto& v) { o.mode = v; }},
      {"--epochs", [&](auto& a, auto& v) { o.epochs = whole(a, v); }},
      {"--batch-size", [&](auto& a, auto& v) { o.batch_size = whole(a, v); }},
      {"--fanouts", [&](auto& a, auto& v) { o.fanouts = wholes(a, v); }},
      {"--hidden", [&](auto& a, auto& v) { o.hidden = whole(a, v); }},
      {"--lr", [&](auto& a, auto& v) { o.lr = number(a, v); }},
      {"--cache", [&](auto& a, auto& v) { o.cache = number(a, v); }},
      {"--min-accuracy", [&](auto& a, auto& v) { o.min_accuracy = number(a, v); }},
      {"--eval-nodes", [&](auto& a, auto& v) { o.eval_nodes = whole(a, v); }},
      {"--split", [&](auto& a, auto& v) { o.split = option_values::flag(a, v); }},
      {"--prefetch", [&](auto& a, auto& v) { o.prefetch = whole(a, v); }},
      {"--seed", [&](auto& a, auto& v) { o.seed = whole(a, v); }},
      {"--serve", [&](auto& a, auto& v) { o.serve = whole(a, v); }},
      {"--clients", [&](auto& a, auto& v) { o.clients = whole(a, v); }},
      {"--load-rates", [&](auto& a, auto& v) { o.load_rates = wholes(a, v); }},
      {"--load-configs", [&](auto& a, auto& v) { o.load_configs = option_values::words(a, v); }},
      {"--load-seconds", [&](auto& a, auto& v) { o.load_seconds = number(a, v); }},
      {"--cpu-samplers", [&](auto& a, auto& v) { o.cpu_samplers = whole(a, v); }},
      {"--gpu-streams", [&](auto& a, auto& v) { o.gpu_streams = whole(a, v); }},
      {"--max-batch", [&](auto& a, auto& v) { o.max_batch = whole(a, v); }},
      {"--max-wait-ms", [&](auto& a, auto& v) { o.max_wait_ms = number(a, v); }},
      {"--capture", [&](auto& a, auto& v) { o.capture = option_values::flag(a, v); }},
      {"--objective-ms", [&](auto& a, auto& v) { o.objective_ms = number(a, v); }},
      {"--cuda-sync", [&](auto&, auto& v) { o.cuda_sync = v; }},
      {"--nodes", [&](auto& a, auto& v) { o.nodes = whole(a, v); }},
      {"--classes", [&](auto& a, auto& v) { o.classes = whole(a, v); }},
      {"--features", [&](auto& a, auto& v) { o.features = whole(a, v); }},
      {"--degree", [&](auto& a, auto& v) { o.degree = whole(a, v); }}};
  std::set<std::string> given;  // a second value would silently win over the first
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout
          << "usage: train_sage [options]\n"
             "Trains GraphSAGE with the quiver ops from a libtorch program: sampling, the\n"
             "tiered feature gather and the model, without Python.\n\n"
             "  --data DIR          a graph saved by examples/cpp/save_graph.py (default: a\n"
             "                      synthetic graph built here, sized by the last four options)\n"
             "  --mode GPU|UVA|CPU  where the topology lives (default: UVA with a GPU, else CPU)\n"
             "  --epochs N          training epochs (default: 3)\n"
             "  --batch-size N      seed nodes per batch (default: 1024)\n"
             "  --fanouts A,B,C     neighbors sampled per hop, the seeds' hop first (default: 15,10,5)\n"
             "  --hidden N          width of the hidden layers (default: 256)\n"
             "  --lr X              Adam's learning rate (default: 0.003)\n"
             "  --cache X           share of the feature rows cached in GPU memory, in [0, 1]\n"
             "                      (default: 0.2)\n"
             "  --min-accuracy X    exit with status 1 unless the last epoch's test accuracy\n"
             "                      reaches X (default: 0)\n"
             "  --eval-nodes N      test nodes scored after each epoch (default: 10000)\n"
             "  --split 1|0         time sampling, gathering and the model apart (1, default)\n"
             "                      or the epoch only (0: no synchronization between phases)\n"
             "  --prefetch N        build batches N ahead in a BatchPrefetcher thread (0: in line)\n"
             "  --seed N            seeds the synthetic graph, the model and the batches\n"
             "  --serve N           then serve N requests through quiver's ServingRuntime\n"
             "  --clients N         threads sending those requests (default: 4)\n"
             "  --load-rates R,...  then measure the runtime under open-loop Poisson load at\n"
             "                      these requests a second (no Python involved)\n"
             "  --load-configs ...  of cpu, gpu, dispatch, gpu2 (gpu on each of two GPUs, a\n"
             "                      request to the one with fewer outstanding; default: the\n"
             "                      first three)\n"
             "  --load-seconds S    seconds of load per rate (default: 4)\n"
             "  --cpu-samplers N    CPU sampler threads under load (default: 8)\n"
             "  --gpu-streams N     GPU sampler streams under load (default: 4)\n"
             "  --max-batch N       seeds per batch at most under load (default: 1024)\n"
             "  --max-wait-ms X     a batch closes when its oldest request waited this long\n"
             "                      (default: 2)\n"
             "  --objective-ms X    dispatch's latency objective: a full side's batch moves to\n"
             "                      the other side if sampled there within half of it\n"
             "                      (default: 30)\n"
             "  --capture 1|0       GPU samplers replay batch shapes seen before as CUDA\n"
             "                      graphs under load (default: 1)\n"
             "  --cuda-sync auto|spin|yield|block  how threads wait for the GPU (CUDA's device\n"
             "                      schedule; default: auto, CUDA's choice)\n"
             "  --nodes N           synthetic graph: nodes (default: 20000)\n"
             "  --classes N         synthetic graph: classes (default: 8)\n"
             "  --features N        synthetic graph: feature width (default: 32)\n"
             "  --degree N          synthetic graph: edges per node (default: 12)\n";
      std::exit(0);
    }
    const auto setter = setters.find(arg);
    TORCH_CHECK_VALUE(setter != setters.end(), "unknown option ", arg, " (see --help)");
    TORCH_CHECK(i + 1 < argc, "option ", arg, " needs a value");
    TORCH_CHECK_VALUE(given.insert(arg).second, "option ", arg, " is given twice");
    setter->second(arg, argv[++i]);
  }
  TORCH_CHECK(o.epochs >= 0 && o.batch_size > 0,
              "--epochs must be >= 0 and --batch-size >= 1, got ", o.epochs, " and ",
              o.batch_size);
  for (const int64_t fanout : o.fanouts)
    TORCH_CHECK(fanout >= -1, "--fanouts takes counts >= 0, or -1 for every neighbor, got ",
                fanout);
  TORCH_CHECK(o.hidden >= 1 && o.nodes >= 2 && o.classes >= 1 && o.features >= 1 &&
                  o.degree >= 0,
              "--hidden, --nodes (half of them train), --classes, --features and --degree must "
              "be >= 1, >= 2, >= 1, >= 1 and >= 0, got ",
              o.hidden, ", ", o.nodes, ", ", o.classes, ", ", o.features, " and ", o.degree);
  // Bounds past which torch's own errors (an allocator's, a size overflow) would name no
  // option; the synthetic graph's bytes are checked against the machine's memory below.
  TORCH_CHECK_VALUE(o.hidden <= (1 << 13) && o.classes <= (1 << 20) && o.features <= (1 << 20) &&
                        o.degree <= (1 << 20) && o.nodes <= (int64_t{1} << 40),
                    "--hidden, --classes, --features, --degree and --nodes must be at most ",
                    1 << 13, ", ", 1 << 20, ", ", 1 << 20, ", ", 1 << 20, " and 2**40, got ",
                    o.hidden, ", ", o.classes, ", ", o.features, ", ", o.degree, " and ", o.nodes);
  if (o.data.empty()) {
    // Labels, features and a table of centroids' rows added to them, the edge list both
    // ways and its CSR, with room for the sort, and the communities' centroids (--classes x
    // --features: 4 TiB at 2**20 each, unchecked).
    const double need = static_cast<double>(o.nodes) *
                            (8.0 + 8.0 * static_cast<double>(o.features) +
                             64.0 * static_cast<double>(o.degree)) +
                        4.0 * static_cast<double>(o.classes) * static_cast<double>(o.features);
    const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                          static_cast<double>(sysconf(_SC_PAGE_SIZE));
    TORCH_CHECK_VALUE(memory <= 0 || need <= memory, "--nodes ", o.nodes, " x (--features ",
                      o.features, ", --degree ", o.degree, ") and --classes ", o.classes,
                      " x --features need about ", need / (1 << 30),
                      " GiB for the synthetic graph; this machine has ", memory / (1 << 30));
  }
  TORCH_CHECK_VALUE(std::isfinite(o.lr) && o.lr > 0, "--lr must be a finite number > 0, got ",
                    o.lr);
  TORCH_CHECK_VALUE(o.min_accuracy <= 0 || o.epochs >= 1 || o.serve > 0,
                    "--min-accuracy bounds the accuracy after training (or of --serve's "
                    "answers): with --epochs 0 and no --serve nothing is scored");
  for (size_t i = 0; i < o.load_configs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      TORCH_CHECK_VALUE(o.load_configs[i] != o.load_configs[j], "--load-configs names ",
                        o.load_configs[i], " twice");
  TORCH_CHECK(o.eval_nodes >= 1, "--eval-nodes must be >= 1, got ", o.eval_nodes);
  TORCH_CHECK(o.prefetch >= 0 && o.prefetch <= 64, "--prefetch must be in [0, 64], got ",
              o.prefetch);
  for (const int64_t rate : o.load_rates)
    TORCH_CHECK(rate > 0, "--load-rates must be positive, got ", rate);
  for (const std::string& config : o.load_configs)
    TORCH_CHECK(config == "cpu" || config == "gpu" || config == "dispatch" || config == "gpu2",
                "--load-configs takes cpu, gpu, dispatch and gpu2, got ", config);
  for (const int64_t rate : o.load_rates)
    TORCH_CHECK(static_cast<double>(rate) * o.load_seconds <= 1e7,
                "--load-rates times --load-seconds is the requests of one rate, at most 1e7, "
                "got ", rate, " x ", o.load_seconds);
  TORCH_CHECK(o.load_rates.empty() || !o.load_configs.empty(),
              "--load-rates needs --load-configs");
  // One check an option, each naming its value (one check for six had named none of them).
  TORCH_CHECK_VALUE(o.load_seconds > 0, "--load-seconds must be positive, got ", o.load_seconds);
  TORCH_CHECK_VALUE(o.cpu_samplers >= 1 && o.cpu_samplers <= 1024,
                    "--cpu-samplers must be in [1, 1024] (a thread each), got ", o.cpu_samplers);
  TORCH_CHECK_VALUE(o.gpu_streams >= 1 && o.gpu_streams <= 1024,
                    "--gpu-streams must be in [1, 1024] (a thread each), got ", o.gpu_streams);
  TORCH_CHECK_VALUE(o.max_batch >= 1, "--max-batch must be >= 1, got ", o.max_batch);
  // (A wait past the load's own 60 s wait for an answer failed every request; a probe.)
  TORCH_CHECK_VALUE(o.max_wait_ms >= 0 && o.max_wait_ms <= 10000,
                    "--max-wait-ms must be in [0, 10000], got ", o.max_wait_ms);
  TORCH_CHECK_VALUE(o.objective_ms > 0, "--objective-ms must be positive, got ", o.objective_ms);
  TORCH_CHECK(o.serve >= 0 && o.clients >= 1 && o.clients <= 1024,
              "--serve must be >= 0 and --clients in [1, 1024] (a thread each), got ", o.serve,
              " and ", o.clients);
  TORCH_CHECK(o.cache >= 0.0 && o.cache <= 1.0, "--cache must be in [0, 1], got ", o.cache);
  TORCH_CHECK(o.cuda_sync == "auto" || o.cuda_sync == "spin" || o.cuda_sync == "yield" ||
                  o.cuda_sync == "block",
              "--cuda-sync takes auto, spin, yield or block, got ", o.cuda_sync);
  return o;
}

// ---- the graph ----

using graph_files::Graph;

Graph load_graph(const fs::path& directory) {
  Graph g = graph_files::load(directory);
  TORCH_CHECK_TYPE(g.rows.scalar_type() == at::kFloat, (directory / "features").string(),
                   ": rows must be float32 (the model's dtype), got ",
                   raw_arrays::dtype_name(g.rows.scalar_type()));
  return g;
}

// Communities as labels, edges mostly inside a community, features a noisy community
// centroid: a label is guessable from the features and better from the neighbourhood.
Graph synthetic_graph(const Options& o) {
  Graph g;
  const int64_t n = o.nodes;
  g.labels = torch::randint(o.classes, {n}, at::kLong);
  const int64_t edges = n * o.degree / 2;
  Tensor src = torch::randint(n, {edges}, at::kLong);
  // 80% of the edges join nodes of one community: a random member of the source's.
  Tensor by_label = std::get<1>(g.labels.sort());
  Tensor counts = torch::bincount(g.labels, {}, o.classes);
  Tensor starts = counts.cumsum(0) - counts;
  Tensor label = g.labels.index_select(0, src);
  Tensor pick = (torch::rand({edges}) * counts.index_select(0, label).to(at::kDouble)).to(at::kLong);
  Tensor same = by_label.index_select(0, starts.index_select(0, label) + pick);
  Tensor dst = torch::where(torch::rand({edges}) < 0.8, same, torch::randint(n, {edges}, at::kLong));
  auto [indptr, indices, eid] =
      quiver::csr_from_coo(torch::cat({src, dst}), torch::cat({dst, src}), n);
  g.indptr = indptr;
  g.indices = indices;
  Tensor centroids = torch::randn({o.classes, o.features});
  // In place: the sum of two temporaries had needed four tables of rows at its peak, past
  // what the memory check counts (the kernel's OOM killer ended the run; a probe).
  g.rows = torch::randn({n, o.features}).mul_(6.0).add_(centroids.index_select(0, g.labels));
  Tensor perm = torch::randperm(n);
  g.train_idx = perm.slice(0, 0, n / 2);
  g.test_idx = perm.slice(0, n / 2);
  g.num_classes = o.classes;
  return g;
}

// ---- GraphSAGE in libtorch ----

// The model's widest layer, input x output weights, at most 2**28: each width is bounded
// alone by parse(), but a product such as --hidden 8192 x --classes 2**20 had asked the
// allocator for 32 GiB, refused in its words naming no option (a probe).
void check_layer_weights(int64_t features, int64_t hidden, int64_t classes, size_t layers,
                         const std::string& data) {
  const int64_t widest = layers == 1 ? features * classes
                                     : std::max({features * hidden, hidden * hidden,
                                                 hidden * classes});
  const std::string widths = data.empty() ? "--features " + std::to_string(features) +
                                                ", --hidden " + std::to_string(hidden) +
                                                " and --classes " + std::to_string(classes)
                                          : data + "'s " + std::to_string(features) +
                                                " features and " + std::to_string(classes) +
                                                " classes with --hidden " +
                                                std::to_string(hidden);
  TORCH_CHECK_VALUE(widest <= (int64_t{1} << 28), "a layer of the model would hold ", widest,
                    " weights (", widths, ", ", layers, " layers), more than 2**28");
}

// One layer of sampled edges: messages from `src` (local ids into the layer's input rows)
// to `dst` (local ids of its first `num_dst` rows), as sample_subgraph numbers them.
struct Layer {
  Tensor src, dst;
  int64_t num_dst;
};

struct SAGEConvImpl : torch::nn::Module {
  SAGEConvImpl(int64_t in, int64_t out)
      : lin_neighbors(register_module("lin_neighbors", torch::nn::Linear(in, out))),
        lin_self(register_module(
            "lin_self", torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)))) {}

  Tensor forward(const Tensor& x, const Layer& layer) {
    const auto options = x.options();
    Tensor sum = torch::zeros({layer.num_dst, x.size(1)}, options)
                     .index_add(0, layer.dst, x.index_select(0, layer.src));
    Tensor degree = torch::zeros({layer.num_dst}, options)
                        .index_add(0, layer.dst, torch::ones({layer.dst.numel()}, options));
    Tensor mean = sum / degree.clamp_min(1).unsqueeze(1);
    return lin_neighbors(mean) + lin_self(x.slice(0, 0, layer.num_dst));
  }

  torch::nn::Linear lin_neighbors, lin_self;
};
TORCH_MODULE(SAGEConv);

struct SAGEImpl : torch::nn::Module {
  SAGEImpl(int64_t in, int64_t hidden, int64_t out, size_t layers) {
    for (size_t i = 0; i < layers; ++i) {
      const int64_t a = i == 0 ? in : hidden, b = i + 1 == layers ? out : hidden;
      convs.push_back(register_module("conv" + std::to_string(i), SAGEConv(a, b)));
    }
  }

  // layers: outermost first (the first consumes every sampled node's row).
  Tensor forward(Tensor x, const std::vector<Layer>& layers) {
    for (size_t i = 0; i < convs.size(); ++i) {
      x = convs[i]->forward(x, layers[i]);
      if (i + 1 < convs.size()) x = torch::dropout(torch::relu(x), 0.5, is_training());
    }
    return x;
  }

  std::vector<SAGEConv> convs;
};
TORCH_MODULE(SAGE);

// ---- sampling and gathering through the quiver ops ----

// `t` page-locked in place for the GPU's zero-copy reads, the pin kept in `pins`. Memory
// that cannot be pinned in place (a file mapped from a disk rather than /dev/shm) is
// copied into pinned memory instead.
Tensor pinned_for_gpu(const Tensor& t, std::vector<c10::intrusive_ptr<quiver::runtime::HostPin>>& pins,
                      const std::string& what) {
  try {
    pins.push_back(c10::make_intrusive<quiver::runtime::HostPin>(t.contiguous()));
    return pins.back()->tensor();
  } catch (const c10::Error& error) {
    std::cerr << "note: " << what << " cannot be pinned in place ("
              << error.what_without_backtrace() << "); using a pinned copy\n";
    return t.pin_memory();
  }
}

struct Batch {
  Tensor node_ids;            // seeds first
  std::vector<Layer> layers;  // outermost first
};

class Sampler {
 public:
  Sampler(const Graph& g, const std::string& mode, const at::Device& device,
          std::vector<int64_t> fanouts)
      : fanouts_(std::move(fanouts)), device_(device) {
    if (mode == "GPU") {
      indptr_ = g.indptr.to(device);
      indices_ = g.indices.to(device);
    } else if (mode == "UVA") {  // the neighbor lists stay in host memory, pinned in place
      indptr_ = g.indptr.to(device);
      indices_ = pinned_for_gpu(g.indices, pins_, "the neighbor lists");
    } else {
      indptr_ = g.indptr;
      indices_ = g.indices;
    }
  }

  // The topology as this sampler's device reads it.
  const Tensor& indptr() const { return indptr_; }
  const Tensor& indices() const { return indices_; }

  Batch sample(const Tensor& seeds) const {
    auto [node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop] =
        quiver::sample_subgraph(indptr_, indices_, seeds.to(device_), fanouts_);
    return batch_of(node_ids, rows, cols, nodes_per_hop, edges_per_hop);
  }

  // The same batch from sample_subgraph's outputs: its layers, outermost first.
  static Batch batch_of(const Tensor& node_ids, const Tensor& rows, const Tensor& cols,
                        const Tensor& nodes_per_hop, const Tensor& edges_per_hop) {
    const Tensor cum_nodes = nodes_per_hop.cumsum(0).cpu();
    const Tensor cum_edges = edges_per_hop.cumsum(0).cpu();
    Batch batch{node_ids, {}};
    for (int64_t hop = edges_per_hop.size(0) - 1; hop >= 0; --hop) {
      const int64_t edges = cum_edges[hop].item<int64_t>();
      batch.layers.push_back(
          {rows.slice(0, 0, edges), cols.slice(0, 0, edges), cum_nodes[hop].item<int64_t>()});
    }
    return batch;
  }

  // A runtime sampler over the same topology, for a BatchPrefetcher.
  c10::intrusive_ptr<quiver::runtime::SubgraphSampler> runtime_sampler() const {
    return c10::make_intrusive<quiver::runtime::SubgraphSampler>(
        indptr_, indices_, std::nullopt, fanouts_, /*replace=*/false, std::nullopt, std::nullopt,
        std::nullopt, std::nullopt, /*strict_time=*/false, "uniform", /*disjoint=*/false,
        std::nullopt, /*capture_batches=*/true);
  }

 private:
  std::vector<int64_t> fanouts_;
  at::Device device_;
  Tensor indptr_, indices_;
  std::vector<c10::intrusive_ptr<quiver::runtime::HostPin>> pins_;
};

// The feature store as one GPU sees it: the hottest rows copied into GPU memory, the table
// itself pinned in place as the host tier; positions send each id to its row.
c10::intrusive_ptr<quiver::runtime::FeatureTiers> feature_tiers(const Graph& g,
                                                                const at::Device& device,
                                                                double cache) {
  if (!device.is_cuda()) {
    return c10::make_intrusive<quiver::runtime::FeatureTiers>(std::vector<Tensor>{g.rows},
                                                              std::nullopt);
  }
  const int64_t n = g.rows.size(0);
  const int64_t cached = static_cast<int64_t>(cache * static_cast<double>(n));
  Tensor order = g.order.defined()
                     ? g.order
                     : std::get<1>((g.indptr.slice(0, 1) - g.indptr.slice(0, 0, n)).sort(
                           /*stable=*/true, /*dim=*/0, /*descending=*/true));
  Tensor hot = order.slice(0, 0, cached);
  Tensor rank = torch::empty({n}, at::kLong);
  rank.index_put_({order}, torch::arange(n));
  Tensor positions = torch::where(rank < cached, rank, torch::arange(n) + cached);
  std::vector<Tensor> tiers;
  if (cached > 0) tiers.push_back(g.rows.index_select(0, hot).to(device));
  // The FeatureTiers takes a pin of its own of a pinned host tier, which outlives `pins`.
  std::vector<c10::intrusive_ptr<quiver::runtime::HostPin>> pins;
  tiers.push_back(pinned_for_gpu(g.rows, pins, "the feature table"));
  return c10::make_intrusive<quiver::runtime::FeatureTiers>(
      tiers, positions.to(at::kInt).to(device));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The q-quantile of ascending `sorted` by nearest rank, as scripts/serve_load.py takes it
// (0 when it is empty): the p99 of 100 latencies is the 99th, not the largest.
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(std::max(rank, 1.0)) - 1)];
}

void synchronize(const at::Device& device, bool wanted = true) {
  if (wanted && device.is_cuda()) torch::cuda::synchronize(device.index());
}

// The model side of a ServingRuntime: the libtorch GraphSAGE over a served batch.
std::function<Tensor(const quiver::runtime::ServedBatch&)> sage_on_batches(SAGE& model) {
  return [&model](const quiver::runtime::ServedBatch& b) {
    torch::NoGradGuard no_grad;  // per thread
    std::vector<Layer> layers;
    for (size_t i = 0; i < b.edge_index.size(); ++i)
      layers.push_back({b.edge_index[i][0], b.edge_index[i][1], b.layer_sizes[2 * i + 1]});
    return model->forward(b.x, layers);
  };
}

// The first error of several threads, raised in the thread that joins them: an exception
// that left a std::thread would end the program (std::terminate) without its message or
// the exit status 2 that every other error gets.
class FirstError {
 public:
  template <typename Body>
  void run(Body&& body) {
    try {
      body();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) first_ = std::current_exception();
    }
  }
  void rethrow() {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr first_;
};

// Threads joined on every way out of their scope. A thread that cannot be started (a limit
// on threads or processes) throws from std::thread's constructor, and a vector of joinable
// threads destroyed unjoined would std::terminate without the message. `stop` (if given)
// first tells the started threads to finish.
class JoinedThreads {
 public:
  explicit JoinedThreads(std::function<void()> stop = {}) : stop_(std::move(stop)) {}
  JoinedThreads(const JoinedThreads&) = delete;
  JoinedThreads& operator=(const JoinedThreads&) = delete;
  ~JoinedThreads() {
    try {
      if (stop_) stop_();
    } catch (...) {
    }
    join();
  }
  template <typename Body>
  void start(Body&& body) {
    threads_.emplace_back(std::forward<Body>(body));
  }
  void join() {
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  std::vector<std::thread> threads_;
  std::function<void()> stop_;
};

// A request's size as scripts/serve_load.py draws it: floor(U^(-1/1.5)) ids (Pareto, mostly
// one or two, a heavy tail), at most 256.
int64_t request_size(double u) {
  return std::min<int64_t>(256, static_cast<int64_t>(std::pow(1 - u, -1 / 1.5)));
}

// A ServingRuntime of `options` over the graph (as the GPU sampler reads it, when it has GPU
// streams), the libtorch GraphSAGE answering on `model_threads` threads of its own.
c10::intrusive_ptr<quiver::runtime::ServingRuntime> serving_runtime(
    const quiver::runtime::ServingOptions& options, const Graph& g, const Sampler& sampler,
    const c10::intrusive_ptr<quiver::runtime::FeatureTiers>& tiers, SAGE& model,
    int64_t model_threads) {
  std::optional<Tensor> gpu_indptr, gpu_indices;
  if (options.gpu_streams > 0) {
    gpu_indptr = sampler.indptr();
    gpu_indices = sampler.indices();
  }
  auto runtime = c10::make_intrusive<quiver::runtime::ServingRuntime>(
      g.indptr, g.indices, gpu_indptr, gpu_indices, tiers, options);
  model->eval();
  runtime->serve_with(sage_on_batches(model), model_threads);
  return runtime;
}

// --serve: the trained model behind a ServingRuntime, requests from --clients threads.
double serve(const Options& o, const Graph& g, const Sampler& sampler,
             const c10::intrusive_ptr<quiver::runtime::FeatureTiers>& tiers, SAGE& model,
             const at::Device& device, const std::string& mode) {
  using quiver::runtime::ServingRuntime;
  const bool gpu = device.is_cuda();
  quiver::runtime::ServingOptions options;
  options.fanouts = o.fanouts;
  options.device = device.str();
  options.max_batch_nodes = 256;
  options.cpu_samplers = 2;
  options.gpu_streams = gpu ? 2 : 0;
  options.seed = o.seed;
  auto runtime = serving_runtime(options, g, sampler, tiers, model, 2);
  const Tensor test = g.test_idx;
  std::vector<std::vector<double>> latencies(o.clients);
  std::vector<int64_t> correct(o.clients, 0), answered(o.clients, 0);
  const auto start = std::chrono::steady_clock::now();
  FirstError client_error;
  JoinedThreads clients;  // each client ends after its share of the requests
  for (int64_t c = 0; c < o.clients; ++c) {
    clients.start([&, c] {
      client_error.run([&] {
        at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed + 17 * c + 1);
        for (int64_t r = c; r < o.serve; r += o.clients) {
          const int64_t size = request_size(at::rand({1}, gen).item<double>());
          const Tensor ids =
              test.index_select(0, at::randint(test.numel(), {size}, gen, at::kLong));
          const auto sent = std::chrono::steady_clock::now();
          int64_t ticket = ServingRuntime::kOverloaded;
          while (ticket == ServingRuntime::kOverloaded) ticket = runtime->submit(ids);
          const Tensor scores = runtime->wait(ticket, 60.0);
          latencies[c].push_back(seconds_since(sent) * 1000);
          correct[c] += (scores.argmax(1) == g.labels.index_select(0, ids)).sum().item<int64_t>();
          answered[c] += size;
        }
      });
    });
  }
  clients.join();
  client_error.rethrow();
  const double wall = seconds_since(start);
  runtime->close(60.0);
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  const Tensor records = runtime->records();
  const int64_t on_gpu = static_cast<int64_t>(records.select(1, 3).sum().item<double>());
  int64_t total_correct = 0, total = 0;
  for (int64_t c = 0; c < o.clients; ++c) {
    total_correct += correct[c];
    total += answered[c];
  }
  const double accuracy = static_cast<double>(total_correct) / static_cast<double>(std::max<int64_t>(1, total));
  std::printf("served %lld requests in %.2fs (%.0f/s) with %lld clients: p50 %.2f ms, p99 %.2f ms; "
              "%lld batches (%lld sampled on the CPU, %lld on the GPU, threshold PSGS %.0f, "
              "sampler mode %s); served accuracy %.3f\n",
              static_cast<long long>(all.size()), wall, static_cast<double>(all.size()) / wall,
              static_cast<long long>(o.clients), percentile(all, 0.5), percentile(all, 0.99),
              static_cast<long long>(records.size(0)), static_cast<long long>(records.size(0) - on_gpu),
              static_cast<long long>(on_gpu), runtime->threshold(), gpu ? mode.c_str() : "CPU",
              accuracy);
  std::fflush(stdout);
  return accuracy;
}

// ---- --load-rates: the runtime under open-loop load ----

struct LoadRow {
  std::string config;
  int64_t rate = 0, sent = 0, answered = 0, refused = 0, failed = 0;
  std::string first_failure;  // what the first failed request's wait raised
  double answered_per_s = 0, p50 = 0, p99 = 0, p999 = 0;
  int64_t cpu_batches = 0, gpu_batches = 0;
  double seeds_per_batch = 0;
  // The caching allocator's calls to cudaMalloc during the rate, and its retries (an
  // allocation that failed, after which it freed every cached block: the device waits).
  int64_t device_mallocs = 0, alloc_retries = 0;
  // Per batch, means (ms): from its first request's arrival to a sampler taking it (the
  // batching window included); sampled and gathered; then with the model side (waiting for a
  // model thread, the model, the answer's copy).
  double wait_ms = 0, prepare_ms = 0, model_side_ms = 0;
  // How late the senders submitted requests against their schedule (ms; mean, 99th
  // percentile): a tool that cannot keep its schedule overstates latency.
  double late_mean_ms = 0, late_p99_ms = 0;
};

// The caching allocator's counts on `devices` so far: cudaMalloc calls and retries (none
// with a libtorch built without CUDA).
std::pair<int64_t, int64_t> allocator_counts(const std::vector<at::Device>& devices) {
  int64_t mallocs = 0, retries = 0;
#ifdef TRAIN_SAGE_WITH_CUDA
  for (const at::Device& device : devices) {
    if (!device.is_cuda()) continue;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    mallocs += stats.num_device_alloc;
    retries += stats.num_alloc_retries;
  }
#else
  (void)devices;
#endif
  return {mallocs, retries};
}

// `rate` requests a second for `seconds` as a Poisson process, each of request_size() test
// nodes, sent at their scheduled times (drawn before the clock starts) whatever the answers
// do, by 4 threads taking every 4th (a submit checks its ids: one thread would cap the rate),
// each to the runtime with the fewest requests outstanding (ties in turn; a runtime per GPU,
// as ServingPool does in Python); 1024 threads wait for the answers, in arrival order. Past
// that many outstanding (only at rates the runtime cannot keep up with) a request is timed
// when a waiter gets to it, so its latency is overstated. A refused request (queue full)
// counts as refused, not answered.
LoadRow open_loop(const std::vector<quiver::runtime::ServingRuntime*>& runtimes,
                  const Tensor& test, int64_t rate, double seconds, uint64_t seed) {
  using Clock = std::chrono::steady_clock;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(static_cast<double>(rate));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> arrival;
  std::vector<int64_t> sizes;
  int64_t total = 0;
  // No request larger than a runtime takes (--max-batch may be below request_size's 256).
  int64_t largest = std::numeric_limits<int64_t>::max();
  for (auto* runtime : runtimes) largest = std::min(largest, runtime->options().max_batch_nodes);
  for (double t = gap(rng); t < seconds; t += gap(rng)) {
    arrival.push_back(t);
    sizes.push_back(std::min(largest, request_size(unit(rng))));
    total += sizes.back();
  }
  const Tensor pool = test.index_select(
      0, torch::randint(test.numel(), {std::max<int64_t>(total, 1)}, at::kLong));
  std::vector<Tensor> requests;
  for (int64_t i = 0, offset = 0; i < static_cast<int64_t>(sizes.size()); offset += sizes[i++])
    requests.push_back(pool.narrow(0, offset, sizes[i]));
  std::vector<int64_t> batches_before;
  for (auto* runtime : runtimes) batches_before.push_back(runtime->answered_batches());
  std::atomic<size_t> turn{0};
  auto least_busy = [&]() {
    const size_t first = turn++ % runtimes.size();
    size_t best = first;
    for (size_t k = 1; k < runtimes.size(); ++k) {
      const size_t r = (first + k) % runtimes.size();
      if (runtimes[r]->outstanding() < runtimes[best]->outstanding()) best = r;
    }
    return best;
  };

  const size_t n = arrival.size();
  std::vector<double> latency(n, -1.0);
  std::vector<double> late(n, 0.0);
  std::mutex mutex;
  std::condition_variable queued;
  struct Pending {
    size_t runtime;
    int64_t ticket;
    size_t request;
  };
  std::deque<Pending> pending;
  bool all_sent = false;
  std::atomic<int64_t> refused{0}, failed{0};
  std::string first_failure;  // under `mutex`
  Clock::time_point start;  // set once the waiters run: starting 1024 threads takes a while
  auto scheduled = [&](size_t i) {
    return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival[i]));
  };
  JoinedThreads waiters([&] {
    std::lock_guard<std::mutex> lock(mutex);
    all_sent = true;
    queued.notify_all();
  });
  for (int k = 0; k < 1024; ++k) {
    waiters.start([&] {
      while (true) {
        Pending next;
        {
          std::unique_lock<std::mutex> lock(mutex);
          queued.wait(lock, [&] { return !pending.empty() || all_sent; });
          if (pending.empty()) return;
          next = pending.front();
          pending.pop_front();
        }
        try {
          runtimes[next.runtime]->wait(next.ticket, 60.0);
          latency[next.request] =
              std::chrono::duration<double, std::milli>(Clock::now() - scheduled(next.request)).count();
        } catch (const std::exception& error) {
          // Counted, and the first one's words kept: every request of a run had failed with
          // exit status 0 and nothing said (a probe).
          ++failed;
          std::lock_guard<std::mutex> lock(mutex);
          if (first_failure.empty()) first_failure = error.what();
        }
      }
    });
  }
  {
    std::lock_guard<std::mutex> lock(mutex);  // the waiters read it after a ticket comes
    start = Clock::now() + std::chrono::milliseconds(20);
  }
  constexpr size_t kSenders = 4;
  FirstError sender_error;
  JoinedThreads senders;  // each sender ends after its share of the arrivals
  for (size_t first = 0; first < kSenders; ++first) {
    senders.start([&, first] {
      sender_error.run([&] {
        for (size_t i = first; i < n; i += kSenders) {
          std::this_thread::sleep_until(scheduled(i));
          late[i] = std::chrono::duration<double, std::milli>(Clock::now() - scheduled(i)).count();
          const size_t r = least_busy();
          const int64_t ticket = runtimes[r]->submit(requests[i]);
          if (ticket < 0) {
            ++refused;
            continue;
          }
          std::lock_guard<std::mutex> lock(mutex);
          pending.push_back(Pending{r, ticket, i});
          queued.notify_one();
        }
      });
    });
  }
  senders.join();
  {
    std::lock_guard<std::mutex> lock(mutex);
    all_sent = true;
    queued.notify_all();
  }
  waiters.join();
  sender_error.rethrow();  // the waiters are done: nothing of ours runs any more
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();

  LoadRow row;
  row.rate = rate;
  row.sent = static_cast<int64_t>(n);
  row.refused = refused;
  row.failed = failed;
  row.first_failure = first_failure;
  std::vector<double> done;
  for (double l : latency)
    if (l >= 0) done.push_back(l);
  std::sort(done.begin(), done.end());
  row.answered = static_cast<int64_t>(done.size());
  row.answered_per_s = static_cast<double>(done.size()) / std::max(wall, seconds);
  row.p50 = percentile(done, 0.5);
  row.p99 = percentile(done, 0.99);
  row.p999 = percentile(done, 0.999);
  if (n > 0) {
    row.late_mean_ms = std::accumulate(late.begin(), late.end(), 0.0) / static_cast<double>(n);
    std::sort(late.begin(), late.end());
    row.late_p99_ms = percentile(late, 0.99);
  }
  // This rate's batches are the latest answered; records() keeps the latest 100000.
  double seeds = 0, wait_ms = 0, prepare_ms = 0, run_ms = 0;
  for (size_t r = 0; r < runtimes.size(); ++r) {
    const Tensor records = runtimes[r]->records();
    const int64_t batches =
        std::min(runtimes[r]->answered_batches() - batches_before[r], records.size(0));
    const Tensor mine = records.narrow(0, records.size(0) - batches, batches);
    const auto gpu_batches = static_cast<int64_t>(mine.select(1, 3).sum().item<double>());
    row.gpu_batches += gpu_batches;
    row.cpu_batches += batches - gpu_batches;
    seeds += mine.select(1, 0).sum().item<double>();
    wait_ms += mine.select(1, 4).sum().item<double>();
    run_ms += mine.select(1, 5).sum().item<double>();
    prepare_ms += mine.select(1, 6).sum().item<double>();
  }
  const int64_t batches = row.gpu_batches + row.cpu_batches;
  const double per_batch = batches ? 1.0 / static_cast<double>(batches) : 0.0;
  row.seeds_per_batch = seeds * per_batch;
  row.wait_ms = wait_ms * per_batch;
  row.prepare_ms = prepare_ms * per_batch;
  row.model_side_ms = (run_ms - prepare_ms) * per_batch;
  return row;
}

// Each configuration's runtime under each rate (after half a second of warm-up at the lowest,
// not counted): a table, then the highest rate each answered in full with p99 within the
// objective (--objective-ms), it and every lower rate.
void measure_load(const Options& o, const Graph& g, const Sampler& sampler,
                  const c10::intrusive_ptr<quiver::runtime::FeatureTiers>& tiers, SAGE& model,
                  const at::Device& device, const std::string& mode) {
  std::vector<LoadRow> rows;
  std::printf("open-loop load, %.1f s a rate, batches of at most %lld seeds closed after %.1f ms\n",
              o.load_seconds, static_cast<long long>(o.max_batch), o.max_wait_ms);
  std::printf("%-9s %8s %9s %8s %7s %8s %8s %9s %6s %6s %7s %7s %7s %7s %7s %7s %6s %6s\n", "config",
              "offered", "answered/s", "refused", "failed", "p50 ms", "p99 ms", "p99.9 ms",
              "cpu b", "gpu b", "seeds/b", "mallocs", "retries", "wait/b", "prep/b", "model/b",
              "late", "late99");
  std::printf("(wait/b, prep/b, model/b: a batch's mean ms from its first request's arrival to "
              "a sampler taking it (the batching window included), sampling and gathering, then "
              "with the model side; late, late99: ms the senders submitted behind "
              "schedule, mean and 99th percentile)\n");
  std::fflush(stdout);
  // gpu2: a runtime on each of two GPUs, each with its own copy of the topology, the cache
  // and the model, as scripts/serve_load.py's gpu2 (ServingPool).
  struct OtherGpu {
    at::Device device;
    std::unique_ptr<Sampler> sampler;
    c10::intrusive_ptr<quiver::runtime::FeatureTiers> tiers;
    SAGE model;
  };
  std::vector<OtherGpu> others;
  for (const std::string& config : o.load_configs) {
    TORCH_CHECK(config == "cpu" || device.is_cuda(), "--load-configs ", config,
                " samples on a GPU, and this run has none (--mode CPU or no CUDA)");
  }
  if (std::count(o.load_configs.begin(), o.load_configs.end(), "gpu2") > 0) {
    TORCH_CHECK(torch::cuda::device_count() >= 2, "--load-configs gpu2 needs two GPUs, and "
                "libtorch sees ", torch::cuda::device_count());
    const at::Device second(at::kCUDA, 1);
    SAGE copy(g.rows.size(1), o.hidden, g.num_classes, o.fanouts.size());
    copy->to(second);
    {
      torch::NoGradGuard no_grad;
      auto theirs = copy->named_parameters();
      for (const auto& p : model->named_parameters()) theirs[p.key()].copy_(p.value());
    }
    others.push_back(OtherGpu{second, std::make_unique<Sampler>(g, mode, second, o.fanouts),
                              feature_tiers(g, second, o.cache), copy});
  }
  for (const std::string& config : o.load_configs) {
    quiver::runtime::ServingOptions options;
    options.fanouts = o.fanouts;
    options.device = device.str();
    options.max_batch_nodes = o.max_batch;
    options.max_wait_ms = o.max_wait_ms;
    options.cpu_samplers = config == "gpu" || config == "gpu2" ? 0 : o.cpu_samplers;
    options.gpu_streams = config == "cpu" ? 0 : o.gpu_streams;
    options.seed = o.seed;
    options.capture_batches = o.capture;
    options.latency_objective_ms = o.objective_ms;
    const int64_t model_threads = options.cpu_samplers + options.gpu_streams;
    std::vector<c10::intrusive_ptr<quiver::runtime::ServingRuntime>> runtimes{
        serving_runtime(options, g, sampler, tiers, model, model_threads)};
    std::vector<at::Device> devices{device};
    if (config == "gpu2") {
      for (OtherGpu& other : others) {
        options.device = other.device.str();
        runtimes.push_back(
            serving_runtime(options, g, *other.sampler, other.tiers, other.model, model_threads));
        devices.push_back(other.device);
      }
    }
    std::vector<quiver::runtime::ServingRuntime*> pool;
    for (const auto& runtime : runtimes) pool.push_back(runtime.get());
    if (config == "dispatch") {
      std::printf("dispatch: calibrated threshold PSGS %.0f (batches at or below it sample on the "
                  "CPU when the runtime is idle)\n", runtimes.front()->threshold());
    }
    const int64_t lowest = *std::min_element(o.load_rates.begin(), o.load_rates.end());
    open_loop(pool, g.test_idx, lowest, 0.5, o.seed + 1);  // warm-up: captures, caches
    for (size_t r = 0; r < o.load_rates.size(); ++r) {
      const auto before = allocator_counts(devices);
      LoadRow row = open_loop(pool, g.test_idx, o.load_rates[r], o.load_seconds, o.seed + 2 + r);
      const auto after = allocator_counts(devices);
      row.config = config;
      row.device_mallocs = after.first - before.first;
      row.alloc_retries = after.second - before.second;
      std::printf(
          "%-9s %8lld %9.0f %8lld %7lld %8.2f %8.2f %9.2f %6lld %6lld %7.1f %7lld %7lld %7.2f "
          "%7.2f %7.2f %6.2f %6.2f\n",
          config.c_str(), static_cast<long long>(row.rate), row.answered_per_s,
          static_cast<long long>(row.refused), static_cast<long long>(row.failed), row.p50, row.p99,
          row.p999, static_cast<long long>(row.cpu_batches), static_cast<long long>(row.gpu_batches),
          row.seeds_per_batch, static_cast<long long>(row.device_mallocs),
          static_cast<long long>(row.alloc_retries), row.wait_ms, row.prepare_ms, row.model_side_ms,
          row.late_mean_ms, row.late_p99_ms);
      std::fflush(stdout);
      rows.push_back(row);
    }
    for (const auto& runtime : runtimes) runtime->close(60.0);
  }
  // The highest rate answered in full within the objective with every lower rate also
  // answered so: one lucky window above a failing rate does not count.
  for (const std::string& config : o.load_configs) {
    std::vector<const LoadRow*> mine;
    for (const LoadRow& row : rows)
      if (row.config == config) mine.push_back(&row);
    std::sort(mine.begin(), mine.end(),
              [](const LoadRow* a, const LoadRow* b) { return a->rate < b->rate; });
    int64_t best = 0;
    for (const LoadRow* row : mine) {
      // Every request sent was answered: a rate of which none was (too short a window) or
      // only some were has no p99 to trust.
      if (row->sent == 0 || row->answered != row->sent || row->refused != 0 ||
          row->failed != 0 || row->p99 > o.objective_ms)
        break;
      best = row->rate;
    }
    std::printf("highest rate with p99 <= %g ms, %s: %lld requests/s\n", o.objective_ms,
                config.c_str(), static_cast<long long>(best));
  }
  std::fflush(stdout);
  int64_t failed = 0;
  const LoadRow* first_failed = nullptr;
  for (const LoadRow& row : rows) {
    failed += row.failed;
    if (row.failed != 0 && first_failed == nullptr) first_failed = &row;
  }
  TORCH_CHECK(failed == 0, failed, " requests failed under load (refusals aside); the first, ",
              first_failed ? first_failed->config + " at " + std::to_string(first_failed->rate) +
                                 " requests/s: " + first_failed->first_failure
                           : std::string());
}

// Sets how threads wait for every GPU, before their first use, so that every stream and
// event sees it. Spinning waits keep a core busy each: beside many client threads they can
// starve the threads that submit and answer. Nothing for a run on the CPU.
void set_cuda_sync(const std::string& how, bool on_gpu) {
  if (how == "auto" || !on_gpu) return;
#ifdef TRAIN_SAGE_WITH_CUDA
  const unsigned flags = how == "spin"    ? cudaDeviceScheduleSpin
                         : how == "yield" ? cudaDeviceScheduleYield
                                          : cudaDeviceScheduleBlockingSync;
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  for (int d = 0; status == cudaSuccess && d < devices; ++d) {
    status = cudaSetDevice(d);
    if (status == cudaSuccess) status = cudaSetDeviceFlags(flags);
  }
  if (status == cudaSuccess && devices > 0) status = cudaSetDevice(0);
  TORCH_CHECK(status == cudaSuccess, "--cuda-sync ", how, ": setting CUDA's device flags failed: ",
              cudaGetErrorString(status));
#else
  TORCH_CHECK(false, "--cuda-sync ", how, " needs a CUDA build of libtorch");
#endif
}

int run(const Options& o) {
  const bool gpu = torch::cuda::is_available() && o.mode != "CPU";
  set_cuda_sync(o.cuda_sync, gpu);
  torch::manual_seed(o.seed);
  const std::string mode = o.mode.empty() ? (gpu ? "UVA" : "CPU") : o.mode;
  TORCH_CHECK(mode == "GPU" || mode == "UVA" || mode == "CPU", "--mode must be GPU, UVA or CPU, got ",
              mode);
  TORCH_CHECK(mode == "CPU" || gpu, "--mode ", mode, " needs a CUDA GPU, and libtorch sees none");
  const at::Device device = gpu ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  // Before the graph and the training: a load run that cannot run is refused at once.
  if (!o.load_rates.empty()) {
    for (const std::string& config : o.load_configs) {
      TORCH_CHECK(config == "cpu" || device.is_cuda(), "--load-configs ", config,
                  " samples on a GPU, and this run has none (--mode CPU or no CUDA): give "
                  "--load-configs cpu");
      TORCH_CHECK(config != "gpu2" || torch::cuda::device_count() >= 2, "--load-configs gpu2 "
                  "needs two GPUs, and libtorch sees ", torch::cuda::device_count());
    }
  }

  auto start = std::chrono::steady_clock::now();
  Graph g = o.data.empty() ? synthetic_graph(o) : load_graph(o.data);
  Sampler sampler(g, mode, device, o.fanouts);
  auto tiers = feature_tiers(g, device, o.cache);
  Tensor labels = g.labels.to(device);
  std::cout << "graph " << (o.data.empty() ? "synthetic" : o.data) << ": " << g.rows.size(0)
            << " nodes, " << g.indices.numel() << " edges, " << g.rows.size(1) << " features, "
            << g.num_classes << " classes; device " << device << ", sampler mode " << mode
            << ", " << tiers->leading_rows() << " rows cached in GPU memory (ready in "
            << std::fixed << std::setprecision(2) << seconds_since(start) << "s)" << std::endl;

  check_layer_weights(g.rows.size(1), o.hidden, g.num_classes, o.fanouts.size(), o.data);
  SAGE model(g.rows.size(1), o.hidden, g.num_classes, o.fanouts.size());
  model->to(device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(o.lr));

  // --prefetch N: a BatchPrefetcher thread builds each batch (sample, gather, labels) up to
  // N batches ahead on a side stream, while this thread trains.
  c10::intrusive_ptr<quiver::runtime::BatchPrefetcher> prefetcher;
  if (o.prefetch > 0) {
    prefetcher = c10::make_intrusive<quiver::runtime::BatchPrefetcher>(
        sampler.runtime_sampler(), tiers, labels, device.is_cuda() ? device.index() : -1,
        o.prefetch, /*host_read_blocks=*/12, /*gather_threads=*/0);
  }
  // The lowest accuracy scored (after training, of --serve's answers): none with --epochs 0
  // (its 0 had failed every --min-accuracy of a serve-only run).
  double accuracy = std::numeric_limits<double>::infinity();
  for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
    model->train();
    double t_sample = 0, t_gather = 0, t_model = 0, total_loss = 0;
    int64_t batches = 0;
    const auto epoch_start = std::chrono::steady_clock::now();
    Tensor order = g.train_idx.index_select(0, torch::randperm(g.train_idx.numel()));
    auto train_step = [&](const Tensor& x, const std::vector<Layer>& layers, const Tensor& y) {
      optimizer.zero_grad();
      Tensor loss = torch::nn::functional::cross_entropy(model->forward(x, layers), y);
      loss.backward();
      optimizer.step();
      total_loss += loss.item<double>();  // waits for the step, as Python's float(loss) does
      ++batches;
    };
    if (prefetcher) {
      std::vector<Tensor> seed_batches;
      for (const Tensor& seeds : order.split(o.batch_size)) seed_batches.push_back(seeds.contiguous());
      const Tensor draws = torch::randint(std::numeric_limits<int64_t>::max(),
                                          {static_cast<int64_t>(seed_batches.size())}, torch::kLong);
      prefetcher->start(seed_batches, std::vector<int64_t>(draws.data_ptr<int64_t>(),
                                                           draws.data_ptr<int64_t>() + draws.numel()));
      for (std::vector<Tensor> built = prefetcher->next(); !built.empty();
           built = prefetcher->next()) {
        // (node_ids, rows, cols, edge_ids, nodes_per_hop, edges_per_hop, x, y)
        train_step(built[6], Sampler::batch_of(built[0], built[1], built[2], built[4], built[5]).layers,
                   built[7]);
      }
      prefetcher->stop();
    } else {
      for (const Tensor& seeds : order.split(o.batch_size)) {
        auto t = std::chrono::steady_clock::now();
        Batch batch = sampler.sample(seeds);
        synchronize(device, o.split);
        t_sample += seconds_since(t);
        t = std::chrono::steady_clock::now();
        Tensor x = tiers->gather(batch.node_ids);
        Tensor y = labels.index_select(0, seeds.to(device));
        synchronize(device, o.split);
        t_gather += seconds_since(t);
        t = std::chrono::steady_clock::now();
        train_step(x, batch.layers, y);
        t_model += seconds_since(t);
      }
    }
    synchronize(device);
    const double epoch_time = seconds_since(epoch_start);

    torch::NoGradGuard no_grad;
    model->eval();
    int64_t correct = 0;
    const Tensor test = g.test_idx.slice(0, 0, o.eval_nodes);
    for (const Tensor& seeds : test.split(o.batch_size)) {
      Batch batch = sampler.sample(seeds);
      Tensor predicted = model->forward(tiers->gather(batch.node_ids), batch.layers).argmax(1);
      correct += (predicted == labels.index_select(0, seeds.to(device))).sum().item<int64_t>();
    }
    accuracy = static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(1, test.numel()));
    char split[96] = "";
    if (prefetcher) {
      std::snprintf(split, sizeof(split), " (batches built %lld ahead by a BatchPrefetcher)",
                    static_cast<long long>(o.prefetch));
    } else if (o.split) {
      std::snprintf(split, sizeof(split), " (sample %.2fs, gather %.2fs, model %.2fs)", t_sample,
                    t_gather, t_model);
    }
    std::printf("epoch %lld: %.3fs%s  loss %.3f  test accuracy %.3f (chance %.3f)\n",
                static_cast<long long>(epoch), epoch_time, split,
                total_loss / static_cast<double>(batches), accuracy,
                1.0 / static_cast<double>(g.num_classes));
    std::fflush(stdout);
    // A NaN loss trains nothing more: stop, naming the likely causes (it had run on to a
    // normal-looking end, exit 0).
    TORCH_CHECK_VALUE(std::isfinite(total_loss), "the loss is ", total_loss, " after epoch ",
                      epoch, ": training diverged (--lr ", o.lr, "; a smaller one may help), "
                      "or the feature rows hold NaN or infinity");
  }
  if (o.serve > 0) accuracy = std::min(accuracy, serve(o, g, sampler, tiers, model, device, mode));
  if (!o.load_rates.empty()) measure_load(o, g, sampler, tiers, model, device, mode);
  if (accuracy < o.min_accuracy) {
    std::cerr << "test accuracy " << accuracy << " is below --min-accuracy " << o.min_accuracy
              << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  option_values::quiet_stack_traces();  // (a served package logs its ops' errors whole)
  try {
    return run(parse(argc, argv));
  } catch (const c10::Error& error) {
    std::cerr << "train_sage: " << error.what_without_backtrace() << "\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "train_sage: " << error.what() << "\n";
    return 2;
  }
}
