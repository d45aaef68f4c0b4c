// The serving runtime as a libtorch server uses it: no Python, a C++ model on the runtime's
// threads (serve_with), requests submitted and waited for from several threads.
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <quiver/batch_prefetcher.h>
#include <quiver/serving.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <unordered_map>

#include "graphs.h"

namespace {

using quiver::runtime::FeatureTiers;
using quiver::runtime::ServedBatch;
using quiver::runtime::ServingOptions;
using quiver::runtime::ServingRuntime;
using quiver::testing::OnEveryDevice;

// One layer of sum aggregation: each seed's row plus its sampled neighbors' rows.
at::Tensor sum_model(const ServedBatch& b) {
  const at::Tensor& edges = b.edge_index.back();
  const int64_t targets = b.layer_sizes.back();
  at::Tensor out = b.x.narrow(0, 0, targets).clone();
  return out.index_add_(0, edges[1], b.x.index_select(0, edges[0]));
}

class Serving : public OnEveryDevice {
 protected:
  quiver::testing::Graph graph = quiver::testing::random_graph(500, 4000, at::kLong);
  at::Tensor x = at::randn({500, 6});

  bool on_gpu() const { return GetParam() != "cpu"; }

  c10::intrusive_ptr<ServingRuntime> make(ServingOptions o) {
    o.device = on_gpu() ? "cuda" : "cpu";
    if (!on_gpu()) o.gpu_streams = 0;
    std::optional<at::Tensor> gpu_indptr, gpu_indices;
    if (on_gpu()) {
      gpu_indptr = place_topology(graph.indptr);
      gpu_indices = place_topology(graph.indices);
    }
    auto features = c10::make_intrusive<FeatureTiers>(
        std::vector<at::Tensor>{on_gpu() ? x.cuda() : x}, std::nullopt);
    return c10::make_intrusive<ServingRuntime>(graph.indptr, graph.indices, gpu_indptr,
                                               gpu_indices, features, o);
  }

  // One hop of 2, one CPU sampler, each batch closed at once.
  c10::intrusive_ptr<ServingRuntime> make_one_hop() {
    ServingOptions o;
    o.fanouts = {2};
    o.cpu_samplers = 1;
    o.max_wait_ms = 0.0;
    return make(o);
  }

  // Every neighbor (fanout -1): the answer is x[v] + the sum of x over v's neighbors.
  at::Tensor reference(const at::Tensor& ids) const {
    const int64_t* ptr = graph.indptr.const_data_ptr<int64_t>();
    std::vector<at::Tensor> rows;
    for (int64_t v : std::vector<int64_t>(ids.data_ptr<int64_t>(),
                                          ids.data_ptr<int64_t>() + ids.numel())) {
      rows.push_back(x[v] + x.index_select(0, graph.indices.slice(0, ptr[v], ptr[v + 1])).sum(0));
    }
    return at::stack(rows);
  }
};

TEST_P(Serving, AnswersEqualTheReferenceFromManyClients) {
  ServingOptions o;
  o.fanouts = {-1};
  o.cpu_samplers = 2;
  o.gpu_streams = 2;
  o.max_batch_nodes = 64;
  o.threshold = 30.0;  // both kinds serve on a GPU machine
  auto runtime = make(o);
  runtime->serve_with(sum_model, 2);
  std::atomic<int> wrong{0};
  std::atomic<int64_t> nodes{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c) {
    clients.emplace_back([&, c] {
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(c);
      for (int i = 0; i < 15; ++i) {
        const at::Tensor ids = at::randint(500, {1 + 7 * i % 40}, gen, at::kLong);
        nodes += ids.numel();
        int64_t ticket = ServingRuntime::kOverloaded;
        while (ticket == ServingRuntime::kOverloaded) ticket = runtime->submit(ids);
        const at::Tensor rows = runtime->wait(ticket, 60.0);
        if (!at::allclose(rows, reference(ids), 1e-4, 1e-4)) ++wrong;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(wrong.load(), 0);
  runtime->close(30.0);
  const at::Tensor records = runtime->records();
  EXPECT_EQ(records.select(1, 0).sum().item<double>(), static_cast<double>(nodes.load()));
  EXPECT_EQ(runtime->accepted(), 45);
  // A batch's sampling and gathering is part of its run (from a sampler taking it to its
  // answer), and its wait before that is not negative.
  ASSERT_EQ(records.size(1), 7);
  EXPECT_TRUE(records.select(1, 6).ge(0).all().item<bool>());
  EXPECT_TRUE(records.select(1, 6).le(records.select(1, 5)).all().item<bool>());
  EXPECT_TRUE(records.select(1, 4).ge(0).all().item<bool>());
  if (on_gpu()) {  // each batch went where the threshold says
    for (int64_t r = 0; r < records.size(0); ++r) {
      EXPECT_EQ(records[r][3].item<double>() == 1.0, records[r][2].item<double>() > 30.0);
    }
  }
}

// What an event loop does: every request collected, one thread taking the answers as they
// come; a failing batch's error comes the same way.
TEST_P(Serving, CollectedAnswersComeToOneThreadAndEqualTheReference) {
  ServingOptions o;
  o.fanouts = {-1};
  o.cpu_samplers = 2;
  o.gpu_streams = 2;
  o.max_batch_nodes = 32;
  auto runtime = make(o);
  constexpr int64_t kBadNode = 499;  // a batch that holds it fails
  runtime->serve_with(
      [](const ServedBatch& b) -> at::Tensor {
        TORCH_CHECK(!b.node_ids.narrow(0, 0, b.seed_count).eq(kBadNode).any().item<bool>(),
                    "node 499 is bad luck");
        return sum_model(b);
      },
      2);
  const auto hand_out = [&](size_t count) {
    std::vector<int64_t> handed;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (handed.size() < count && std::chrono::steady_clock::now() < until) {
      for (int64_t t : runtime->next_collected(1.0)) handed.push_back(t);
    }
    return handed;
  };
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
  std::unordered_map<int64_t, at::Tensor> sent;
  std::vector<int64_t> early;  // answered before they are collected
  for (int i = 0; i < 60; ++i) {
    const at::Tensor ids = at::randint(kBadNode, {1 + i % 9}, gen, at::kLong);
    const int64_t ticket = runtime->submit(ids);
    ASSERT_GE(ticket, 0);
    sent.emplace(ticket, ids);
    if (i < 30) {
      early.push_back(ticket);
    } else {
      runtime->collect(ticket);
    }
    if (i == 29) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (runtime->outstanding() > 0 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ASSERT_EQ(runtime->outstanding(), 0);
      for (int64_t t : early) runtime->collect(t);
    }
  }
  const std::vector<int64_t> handed = hand_out(sent.size());
  ASSERT_EQ(handed.size(), sent.size());
  EXPECT_TRUE(runtime->next_collected(0.01).empty());
  int wrong = 0;
  for (int64_t t : handed) {
    if (!at::allclose(runtime->take(t), reference(sent.at(t)), 1e-4, 1e-4)) ++wrong;
    sent.erase(t);
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(sent.empty());  // each ticket handed out once
  EXPECT_THROW(runtime->take(handed.front()), c10::ValueError);  // taken already

  const int64_t unlucky = runtime->submit(at::tensor({kBadNode}, at::kLong));
  runtime->collect(unlucky);
  EXPECT_THROW(runtime->collect(unlucky), c10::ValueError);
  EXPECT_THROW(runtime->wait(unlucky, 1.0), c10::ValueError);
  ASSERT_EQ(hand_out(1), std::vector<int64_t>{unlucky});
  try {
    runtime->take(unlucky);
    ADD_FAILURE() << "the model's error was not raised";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad luck"), std::string::npos) << e.what();
  }
  runtime->close(30.0);
}

TEST_P(Serving, RefusesBadIdsAndOverflowAndAnswersEveryAcceptedRequestOnClose) {
  ServingOptions o;
  o.fanouts = {3, 2};
  o.cpu_samplers = 1;
  o.gpu_streams = 0;
  o.max_queue = 2;
  o.max_batch_nodes = 8;
  auto runtime = make(o);
  EXPECT_THROW(runtime->submit(at::tensor({500}, at::kLong)), c10::IndexError);
  EXPECT_THROW(runtime->submit(at::tensor({-1}, at::kLong)), c10::IndexError);
  EXPECT_THROW(runtime->submit(at::empty({0}, at::kLong)), c10::ValueError);
  EXPECT_THROW(runtime->submit(at::arange(9)), c10::ValueError);
  EXPECT_THROW(runtime->submit(at::ones({2}, at::kFloat)), c10::TypeError);
  runtime->serve_with(
      [](const ServedBatch& b) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        return sum_model(b);
      },
      1);
  std::vector<int64_t> tickets;
  int overloaded = 0;
  for (int i = 0; i < 20; ++i) {
    const int64_t t = runtime->submit(at::tensor({i}, at::kLong));
    if (t == ServingRuntime::kOverloaded) ++overloaded;
    else tickets.push_back(t);
  }
  EXPECT_GT(overloaded, 0);
  runtime->close(30.0);
  for (int64_t t : tickets) EXPECT_EQ(runtime->wait(t, 1.0).size(0), 1);
  EXPECT_EQ(runtime->submit(at::tensor({1}, at::kLong)), ServingRuntime::kClosed);
}

TEST_P(Serving, AModelThatThrowsFailsItsRequestsOnly) {
  auto runtime = make_one_hop();
  runtime->serve_with(
      [](const ServedBatch& b) -> at::Tensor {
        TORCH_CHECK(b.seed_count != 3, "three seeds are bad luck");
        return sum_model(b);
      },
      1);
  const int64_t bad = runtime->submit(at::tensor({1, 2, 3}, at::kLong));
  try {
    runtime->wait(bad, 30.0);
    ADD_FAILURE() << "the model's error was not raised";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad luck"), std::string::npos) << e.what();
  }
  EXPECT_EQ(runtime->wait(runtime->submit(at::tensor({4, 5}, at::kLong)), 30.0).size(0), 2);
}

TEST_P(Serving, AForgottenTicketIsLetGoAnsweredOrNot) {
  auto runtime = make_one_hop();
  runtime->serve_with(
      [](const ServedBatch& b) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return sum_model(b);
      },
      1);
  const int64_t first = runtime->submit(at::tensor({1}, at::kLong));
  const int64_t queued = runtime->submit(at::tensor({2}, at::kLong));
  runtime->forget(queued);  // dropped while it waits its turn: answer() skips it
  EXPECT_EQ(runtime->wait(first, 30.0).size(0), 1);
  const int64_t answered = runtime->submit(at::tensor({3}, at::kLong));
  const int64_t waited = runtime->submit(at::tensor({4}, at::kLong));
  EXPECT_EQ(runtime->wait(waited, 30.0).size(0), 1);  // answered after `answered`
  runtime->forget(answered);  // answered, never read: the rows go
  runtime->forget(answered);  // unknown now: left alone
  EXPECT_EQ(runtime->outstanding(), 0);
  EXPECT_THROW(runtime->wait(queued, 0.0), c10::ValueError);
  EXPECT_THROW(runtime->wait(answered, 0.0), c10::ValueError);
}

// Null pointers come only from C++ (Python's None is an empty optional): each had crashed
// the process at its first use (a probe).
// The ValueError of `make`, whose message must hold `words`.
template <typename Make>
void expect_value_error_naming(Make make, const std::string& words) {
  try {
    make();
    ADD_FAILURE() << "no error; expected one naming: " << words;
  } catch (const c10::ValueError& error) {
    EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
  }
}

TEST(RuntimeClasses, NullPointersAreRefusedByName) {
  quiver::testing::Graph graph = quiver::testing::random_graph(50, 200, at::kLong);
  ServingOptions o;
  o.fanouts = {2};
  o.gpu_streams = 0;
  o.device = "cpu";
  expect_value_error_naming([&] {
    ServingRuntime(graph.indptr, graph.indices, std::nullopt, std::nullopt,
                   c10::intrusive_ptr<FeatureTiers>(), o);
  }, "ServingRuntime: features is a null pointer");
  using quiver::runtime::BatchPrefetcher;
  auto sampler = c10::make_intrusive<quiver::runtime::SubgraphSampler>(
      graph.indptr, graph.indices, std::nullopt, std::vector<int64_t>{2}, false, std::nullopt,
      std::nullopt, std::nullopt, std::nullopt, false, "uniform", false, std::nullopt, false);
  auto features = c10::make_intrusive<FeatureTiers>(
      std::vector<at::Tensor>{at::randn({50, 3})}, std::nullopt);
  expect_value_error_naming([&] {
    BatchPrefetcher(c10::intrusive_ptr<quiver::runtime::SubgraphSampler>(), features,
                    std::nullopt, -1, 1, 0, 0);
  }, "BatchPrefetcher: sampler is a null pointer");
  expect_value_error_naming([&] {
    BatchPrefetcher(sampler, std::optional(c10::intrusive_ptr<FeatureTiers>()), std::nullopt,
                    -1, 1, 0, 0);
  }, "BatchPrefetcher: features holds a null pointer");
  BatchPrefetcher fine(sampler, features, std::nullopt, -1, 1, 0, 0);  // and no features:
  BatchPrefetcher bare(sampler, std::nullopt, std::nullopt, -1, 1, 0, 0);
}

TEST(ServingCosts, ExpectedSampledCountsOfOneHopAreOnePlusTheClampedDegree) {
  auto graph = quiver::testing::random_graph(300, 2000, at::kLong);
  const at::Tensor one_hop = ServingRuntime::expected_sampled_counts(graph.indptr, graph.indices, {4});
  EXPECT_TRUE(at::allclose(one_hop, 1 + graph.degree().to(at::kDouble).clamp_max(4)));
  // Two hops with every neighbor: the tree's size exactly.
  const at::Tensor two = ServingRuntime::expected_sampled_counts(graph.indptr, graph.indices, {-1, -1});
  const at::Tensor degree = graph.degree().to(at::kDouble);
  const int64_t v = 7;
  const at::Tensor nbrs = graph.indices.slice(0, graph.indptr[v].item<int64_t>(),
                                              graph.indptr[v + 1].item<int64_t>());
  EXPECT_NEAR(two[v].item<double>(), 1 + (1 + degree.index_select(0, nbrs)).sum().item<double>(),
              1e-9);
}

QUIVER_ON_EVERY_DEVICE(Serving);

}  // namespace
