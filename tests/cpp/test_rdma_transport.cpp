// The RDMA transport, in plain GoogleTest (no Python):
//  - RdmaOverDevice.*: two processes over a real verbs device (soft-RoCE rxe0 in the QEMU
//    guest of scripts/rdma_vm.sh): endpoints through a TCPStore, batched one-sided reads of
//    random rows checked against the peer's table, a wrong remote key and reads past the
//    served region answered by the NIC as errors, a killed peer named within the timeout,
//    queue pairs and registrations released. Skipped where no device exists.
//  - FakeVerbs.*: the same transport over an in-process fake provider, for what a device
//    rarely does on demand: error completions, retries exceeded, a full completion queue,
//    reads that never complete. These run everywhere.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <quiver/transport.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "fake_verbs.h"
#include "runtime/rdma_test_hooks.h"
#include "runtime/verbs.h"

namespace {

using quiver::runtime::rdma_with_test_hooks;
using quiver::runtime::LocalRows;
using quiver::runtime::RdmaTestHooks;
using quiver::runtime::Transport;
using quiver::testing::FakeVerbs;
using Clock = std::chrono::steady_clock;

constexpr int64_t kRows = 5000;
constexpr int64_t kWidth = 8;

// Host h's table: row r, column c holds h << 40 | r << 8 | c, so any row read is checkable.
at::Tensor host_table(int64_t host) {
  const at::Tensor rows = at::arange(kRows, at::kLong).view({-1, 1});
  const at::Tensor cols = at::arange(kWidth, at::kLong).view({1, -1});
  return (rows * 256 + cols + (host << 40)).contiguous();
}

at::Tensor like() { return at::empty({0, kWidth}, at::kLong); }

// What a host serves, as a reader sees it: only the rows' dtype and shape. A one-sided
// reader never asks its own host to serve.
class NoServedRows final : public LocalRows {
 public:
  int64_t num_rows() const override { return kRows; }
  at::Tensor empty_rows() const override { return like(); }
  at::Tensor read(const at::Tensor&, const at::Device&) override {
    throw std::logic_error("an RDMA transport never serves through its owner");
  }
};

// Fetches `ids` of `peer`'s table through `transport` (a two-host setup).
at::Tensor read_from(Transport& transport, int64_t peer, const at::Tensor& ids) {
  std::vector<at::Tensor> requests(2, at::empty({0}, at::kLong));
  requests[peer] = ids;
  NoServedRows mine;
  return transport.fetch(requests, mine, at::kCPU, 0)[peer];
}

void expect_rows_of(const at::Tensor& rows, int64_t host, const at::Tensor& ids) {
  EXPECT_TRUE(at::equal(rows, host_table(host).index_select(0, ids)));
}

Transport::RdmaOptions quick(double timeout_s = 30) {
  Transport::RdmaOptions options;
  options.timeout_s = timeout_s;
  options.staging_bytes = 64 * kWidth * 8;  // small: a fetch runs through several chunks
  options.qps_per_peer = 3;
  if (const char* device = std::getenv("RXE_DEV")) options.device = device;
  if (const char* gid = std::getenv("RXE_GID_INDEX")) options.gid_index = std::atoi(gid);
  return options;
}

// ---- real device, two processes ----

// The other host's side of `scenario`, in the process start_peer forks.
void run_peer(const std::string& role, int port) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.timeout = std::chrono::seconds(60);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  const int transports = role == "serve2" ? 2 : 1;  // as many as the parent makes
  std::vector<c10::intrusive_ptr<Transport>> made;
  for (int k = 0; k < transports; ++k) {
    made.push_back(Transport::rdma(store, 1, 2, host_table(1), quick()));
  }
  if (role == "read") {
    const at::Tensor ids = at::randint(kRows, {2500}, at::kLong);
    expect_rows_of(read_from(*made[0], 0, ids), 0, ids);
  }
  if (role == "hang") {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));  // until killed
  }
  store->wait({"parent/done"});
}

// Forks host 1, running the peer side of `scenario`; its exit status says whether its
// checks passed. Forked, not started afresh: loading libtorch again takes half a minute on
// the soft-RoCE guest's emulated CPU. The parent has made no queue pair or registration yet.
pid_t start_peer(const std::string& scenario, int port) {
  const pid_t pid = fork();
  if (pid == 0) {
    // ATen on this thread alone: the parent's OpenMP threads did not survive the fork.
    at::set_num_threads(1);
    int status = 0;
    try {
      run_peer(scenario, port);
      status = ::testing::Test::HasFailure() ? 1 : 0;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "host 1 (%s): %s\n", scenario.c_str(), error.what());
      status = 2;
    }
    std::fflush(stdout);
    _exit(status);
  }
  return pid;
}

int wait_peer(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

c10::intrusive_ptr<c10d::TCPStore> server_store() {
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(60);
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
}

// QPs (or MRs) of this process that the kernel lists: what a leak would leave behind.
int kernel_objects(const char* kind) {
  const std::string command = std::string("rdma resource show ") + kind + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  const std::string mine = "pid " + std::to_string(getpid()) + " ";
  int count = 0;
  char line[1024];
  while (fgets(line, sizeof(line), pipe))
    count += std::string(line).find(mine) != std::string::npos;
  pclose(pipe);
  return count;
}

class RdmaOverDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Transport::rdma_available()) {
      GTEST_SKIP() << "no RDMA device here (libibverbs or a device is missing); "
                      "scripts/rdma_vm.sh runs these tests over soft-RoCE in a QEMU guest";
    }
  }
};

TEST_F(RdmaOverDevice, ReadsRandomRowsOfThePeer) {
  auto store = server_store();
  const pid_t peer = start_peer("read", store->getPort());
  {
    auto transport = Transport::rdma(store, 0, 2, host_table(0), quick());
    EXPECT_EQ(transport->kind().rfind("rdma:", 0), 0u);
    EXPECT_FALSE(transport->is_collective());
    for (int round = 0; round < 3; ++round) {
      const at::Tensor ids = at::randint(kRows, {1500 + round * 700}, at::kLong);
      expect_rows_of(read_from(*transport, 1, ids), 1, ids);
    }
    const at::Tensor every = at::arange(kRows, at::kLong).flip(0);
    expect_rows_of(read_from(*transport, 1, every), 1, every);
    store->set("parent/done", {1});
    EXPECT_EQ(wait_peer(peer), 0);
  }
}

TEST_F(RdmaOverDevice, WrongRemoteKeyIsARemoteAccessError) {
  auto store = server_store();
  const pid_t peer = start_peer("serve", store->getPort());
  auto transport = rdma_with_test_hooks(store, 0, 2, host_table(0), quick(),
                                        RdmaTestHooks{/*unchecked=*/false, /*wrong_rkey=*/true});
  try {
    read_from(*transport, 1, at::arange(10, at::kLong));
    ADD_FAILURE() << "a read with a wrong remote key succeeded";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("from host 1 failed"), std::string::npos)
        << error.what();
  }
  EXPECT_THROW(read_from(*transport, 1, at::arange(1, at::kLong)), c10::Error);  // stays failed
  store->set("parent/done", {1});
  EXPECT_EQ(wait_peer(peer), 0);
}

TEST_F(RdmaOverDevice, ReadsPastTheServedRegionAreRefused) {
  auto store = server_store();
  const pid_t peer = start_peer("serve2", store->getPort());
  auto checked = Transport::rdma(store, 0, 2, host_table(0), quick());
  EXPECT_THROW(read_from(*checked, 1, at::tensor({kRows}, at::kLong)), c10::IndexError);
  auto unchecked = rdma_with_test_hooks(store, 0, 2, host_table(0), quick(),  // the NIC answers
                                        RdmaTestHooks{/*unchecked=*/true, /*wrong_rkey=*/false});
  try {
    read_from(*unchecked, 1, at::tensor({kRows + 3}, at::kLong));
    ADD_FAILURE() << "a read past the peer's table succeeded";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("from host 1 failed"), std::string::npos)
        << error.what();
  }
  store->set("parent/done", {1});
  EXPECT_EQ(wait_peer(peer), 0);
}

TEST_F(RdmaOverDevice, KilledPeerIsNamedWithinTheTimeout) {
  auto store = server_store();
  const pid_t peer = start_peer("hang", store->getPort());
  // A generous timeout: the peer starts slowly under emulation, and a dead peer is found
  // by the queue pair's retries (a second or so) long before the timeout.
  auto transport = Transport::rdma(store, 0, 2, host_table(0), quick(30));
  expect_rows_of(read_from(*transport, 1, at::arange(5, at::kLong)), 1, at::arange(5, at::kLong));
  kill(peer, SIGKILL);
  wait_peer(peer);
  const auto start = Clock::now();
  try {
    read_from(*transport, 1, at::arange(200, at::kLong));
    ADD_FAILURE() << "reading from a killed peer succeeded";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("host 1"), std::string::npos) << error.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(35));
}

TEST_F(RdmaOverDevice, ReleasesQueuePairsAndRegistrations) {
  const int qps_before = kernel_objects("qp");
  if (qps_before < 0) GTEST_SKIP() << "the `rdma` tool (iproute2) is not available";
  auto store = server_store();
  const pid_t peer = start_peer("serve", store->getPort());
  {
    auto transport = Transport::rdma(store, 0, 2, host_table(0), quick());
    expect_rows_of(read_from(*transport, 1, at::arange(3, at::kLong)), 1, at::arange(3, at::kLong));
    EXPECT_EQ(kernel_objects("qp"), qps_before + 3);
    store->set("parent/done", {1});
  }
  EXPECT_EQ(wait_peer(peer), 0);
  EXPECT_EQ(kernel_objects("qp"), qps_before);
  EXPECT_EQ(kernel_objects("mr"), 0);
}

// ---- the fake provider ----

// The fake's one device, whatever device the environment names.
Transport::RdmaOptions fake_options(double timeout_s = 30) {
  Transport::RdmaOptions options = quick(timeout_s);
  options.device = "";
  options.gid_index = -1;
  return options;
}

class FakeRdma : public ::testing::Test {
 protected:
  void SetUp() override { FakeVerbs::instance().set_fault(FakeVerbs::Fault::kNone); }
  void TearDown() override {
    FakeVerbs::instance().set_fault(FakeVerbs::Fault::kNone);
    EXPECT_EQ(FakeVerbs::instance().live_objects(), 0) << "verbs objects leaked";
  }

  // Two hosts in this process, connected through an in-memory store (they connect at once,
  // each waiting for the other's endpoint).
  std::pair<c10::intrusive_ptr<Transport>, c10::intrusive_ptr<Transport>> connect(
      const Transport::RdmaOptions& options, const at::Tensor& table_0 = host_table(0),
      const at::Tensor& table_1 = host_table(1)) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    auto second = std::async(std::launch::async,
                             [&] { return Transport::rdma(store, 1, 2, table_1, options); });
    auto first = Transport::rdma(store, 0, 2, table_0, options);
    return {first, second.get()};
  }

  FakeVerbs::Installed fake_;
};

TEST_F(FakeRdma, ReadsRowsBetweenTwoHosts) {
  auto [zero, one] = connect(fake_options());
  const at::Tensor ids = at::randint(kRows, {3000}, at::kLong);
  expect_rows_of(read_from(*zero, 1, ids), 1, ids);
  expect_rows_of(read_from(*one, 0, ids), 0, ids);
  EXPECT_EQ(zero->kind(), "rdma:fake0");
}

TEST_F(FakeRdma, AnEmptyGidSlotIsNamed) {
  FakeVerbs::instance().set_empty_gids(true);
  auto store = c10::make_intrusive<c10d::HashStore>();
  Transport::RdmaOptions options = fake_options();
  options.gid_index = 5;
  try {
    Transport::rdma(store, 0, 2, host_table(0), options);
    ADD_FAILURE() << "an empty GID slot was used";
  } catch (const c10::Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("gid_index 5 of fake0 port 1 holds no GID"), std::string::npos)
        << message;
  }
  FakeVerbs::instance().set_empty_gids(false);
}

TEST_F(FakeRdma, GidsOfTwoKindsAreNamedOnBothHosts) {
  // A link-local GID on one host and an IPv4 one on the other: moving the queue pairs to
  // RTR failed with EINVAL, naming neither gid_index (found by a probe over soft-RoCE).
  Transport::RdmaOptions ipv4 = fake_options(), link_local = fake_options();
  ipv4.gid_index = 3;
  link_local.gid_index = 0;
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto second = std::async(std::launch::async,
                           [&] { return Transport::rdma(store, 1, 2, host_table(1), ipv4); });
  for (int host = 0; host < 2; ++host) {
    try {
      if (host == 0) {
        Transport::rdma(store, 0, 2, host_table(0), link_local);
      } else {
        second.get();
      }
      ADD_FAILURE() << "host " << host << " connected to a GID of another kind";
    } catch (const c10::ValueError& error) {
      // Each host finds it itself (not only told it by the other).
      const std::string message = error.what();
      EXPECT_NE(message.find("give every host a gid_index of one kind"), std::string::npos)
          << message;
      EXPECT_NE(message.find("0000:0000:0000:0000:0000:ffff:0a00:0003"), std::string::npos)
          << message;
      EXPECT_EQ(message.find("failed to set up its RDMA transport"), std::string::npos)
          << message;
    }
  }
}

TEST_F(FakeRdma, APeerThatFailsToSetUpIsNamedAtOnceAndUsesUpItsTurn) {
  // Host 1's timeout is refused: host 0 waited out its own timeout for host 1's endpoint,
  // naming no cause, and the refusal (made before the turn was taken) left the two hosts'
  // next transports on different keys, so that they could never connect (from a probe).
  auto store = c10::make_intrusive<c10d::HashStore>();
  Transport::RdmaOptions bad = fake_options();
  bad.timeout_s = std::nan("");
  auto second = std::async(std::launch::async,
                           [&] { return Transport::rdma(store, 1, 2, host_table(1), bad); });
  const auto began = Clock::now();
  try {
    Transport::rdma(store, 0, 2, host_table(0), fake_options(30));
    ADD_FAILURE() << "host 0 connected to a host that refused its options";
  } catch (const c10::Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("host 1 failed to set up its RDMA transport"), std::string::npos)
        << message;
    EXPECT_NE(message.find("timeout_s"), std::string::npos) << message;
  }
  EXPECT_LT(Clock::now() - began, std::chrono::seconds(10));
  EXPECT_THROW(second.get(), c10::ValueError);
  auto again = std::async(std::launch::async, [&] {
    return Transport::rdma(store, 1, 2, host_table(1), fake_options());
  });
  auto zero = Transport::rdma(store, 0, 2, host_table(0), fake_options());
  auto one = again.get();
  const at::Tensor ids = at::randint(kRows, {100}, at::kLong);
  expect_rows_of(read_from(*zero, 1, ids), 1, ids);
  expect_rows_of(read_from(*one, 0, ids), 0, ids);
}

TEST_F(FakeRdma, RunsOfConsecutiveRowsTravelAsOneReadEach) {
  auto [zero, one] = connect(fake_options());
  // Runs of every length, ascending and not, some crossing a staging chunk's end.
  const at::Tensor ids = at::cat({at::arange(0, 700, at::kLong), at::arange(900, 880, -1, at::kLong),
                                  at::arange(100, 1000, 3, at::kLong), at::arange(kRows - 5, kRows, at::kLong)});
  const int before = FakeVerbs::instance().reads();
  expect_rows_of(read_from(*zero, 1, ids), 1, ids);
  const int reads = FakeVerbs::instance().reads() - before;
  EXPECT_LT(reads, ids.numel() / 2) << "consecutive rows were read one by one";
  EXPECT_GE(reads, 20 + 300);  // each descending or strided row is a read of its own
}

void expect_failure_naming_host_1(Transport& transport, const std::string& what) {
  try {
    // Every other row: 500 separate reads (consecutive rows would travel as one).
    read_from(transport, 1, at::arange(0, 1000, 2, at::kLong));
    ADD_FAILURE() << "the fetch did not fail";
  } catch (const c10::Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("host 1"), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  }
  EXPECT_THROW(read_from(transport, 1, at::arange(1, at::kLong)), c10::Error);  // stays failed
}

TEST_F(FakeRdma, ErrorCompletionNamesThePeer) {
  auto [zero, one] = connect(fake_options());
  FakeVerbs::instance().set_fault(FakeVerbs::Fault::kRemoteAccess, /*after_reads=*/37);
  expect_failure_naming_host_1(*zero, "remote access error");
}

TEST_F(FakeRdma, RetriesExceededNamesThePeer) {
  auto [zero, one] = connect(fake_options());
  FakeVerbs::instance().set_fault(FakeVerbs::Fault::kRetryExceeded, 100);
  expect_failure_naming_host_1(*zero, "retry counter exceeded");
}

TEST_F(FakeRdma, CompletionQueueOverflowIsReported) {
  auto [zero, one] = connect(fake_options());
  FakeVerbs::instance().set_fault(FakeVerbs::Fault::kCqOverflow, 10);
  try {
    read_from(*zero, 1, at::arange(0, 1000, 2, at::kLong));
    ADD_FAILURE() << "an overflowed completion queue went unnoticed";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("overflowed"), std::string::npos) << error.what();
  }
}

TEST_F(FakeRdma, ReadsThatNeverCompleteTimeOutNamingThePeer) {
  auto [zero, one] = connect(fake_options(/*timeout_s=*/0.5));
  FakeVerbs::instance().set_fault(FakeVerbs::Fault::kSilent, 20);
  const auto start = Clock::now();
  expect_failure_naming_host_1(*zero, "did not complete within");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

// With the default buffers a large fetch waits for room on its queue pairs (more reads than
// may be in flight): that wait must end at the timeout too, not re-arm on every poll.
TEST_F(FakeRdma, ReadsThatNeverCompleteTimeOutWithTheDefaultBuffers) {
  Transport::RdmaOptions options;  // the defaults: 64 MiB staging, 256 reads in flight per QP
  options.timeout_s = 1.0;
  auto [zero, one] = connect(options);
  FakeVerbs::instance().set_fault(FakeVerbs::Fault::kSilent, 20);
  const at::Tensor ids = at::randint(kRows, {options.qps_per_peer * options.reads_in_flight * 8},
                                     at::kLong);
  const auto start = Clock::now();
  try {
    read_from(*zero, 1, ids);
    ADD_FAILURE() << "a fetch whose reads never complete returned";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("host 1"), std::string::npos) << error.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

// A batch that needs nothing from a peer (empty, or every row local) returns no rows.
TEST_F(FakeRdma, FetchesOfNoRowsReturnNoRows) {
  auto [zero, one] = connect(fake_options());
  for (int k = 0; k < 3; ++k) {
    const at::Tensor rows = read_from(*zero, 1, at::empty({0}, at::kLong));
    EXPECT_EQ(rows.sizes(), at::IntArrayRef({0, kWidth}));
  }
  std::vector<at::Tensor> nothing(2, at::empty({0}, at::kLong));
  NoServedRows mine;
  const auto out = zero->fetch(nothing, mine, at::kCPU, 0);
  EXPECT_EQ(out[1].numel(), 0);
  const at::Tensor ids = at::randint(kRows, {100}, at::kLong);
  expect_rows_of(read_from(*zero, 1, ids), 1, ids);  // and the next fetch works
}

// share_memory_() (which pickling a table for worker processes runs) points the table's
// storage at a copy and frees the memory a peer reads through the registration. The
// transport holds that memory, so peers go on reading the rows (as they were when moved)
// instead of freed pages (320 KB: malloc's own mapping, unmapped when freed).
TEST_F(FakeRdma, PeersReadTheTableAfterItsMemoryMoved) {
  const at::Tensor table_1 = host_table(1);
  auto [zero, one] = connect(fake_options(), host_table(0), table_1);
  c10::StorageImpl* storage = table_1.storage().unsafeGetStorageImpl();
  const size_t bytes = storage->nbytes();
  c10::DataPtr copy = c10::GetDefaultCPUAllocator()->allocate(bytes);
  std::memcpy(copy.get(), storage->data(), bytes);
  storage->set_data_ptr_noswap(std::move(copy));  // as share_memory_ does: the old one freed
  // Memory freed and handed out again, filled with other bytes: rows read from the old
  // address unless the transport holds it would be these (freed bytes left as they were
  // had passed the check below).
  std::vector<c10::DataPtr> reused;
  for (int i = 0; i < 4; ++i) {
    reused.push_back(c10::GetDefaultCPUAllocator()->allocate(bytes));
    std::memset(reused.back().get(), 0xff, bytes);
  }
  const at::Tensor ids = at::randint(kRows, {3000}, at::kLong);
  expect_rows_of(read_from(*zero, 1, ids), 1, ids);
  EXPECT_NO_THROW(read_from(*one, 0, ids));  // the moved host itself goes on fetching
}

// Hosts serving rows of one size but another dtype would read each other's bits as theirs.
TEST_F(FakeRdma, HostsWithTablesOfAnotherDtypeRefuseToConnect) {
  const at::Tensor as_doubles = host_table(1).to(at::kDouble);  // 8 bytes too, like int64
  for (const bool swapped : {false, true}) {
    try {
      connect(fake_options(), swapped ? as_doubles : host_table(0),
              swapped ? host_table(1) : as_doubles);
      ADD_FAILURE() << "hosts with an int64 and a float64 table connected";
    } catch (const c10::Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("torch.float64"), std::string::npos) << message;
      EXPECT_NE(message.find("torch.int64"), std::string::npos) << message;
    }
  }
}

TEST_F(FakeRdma, RefusesRowsOutsideThePeersTableBeforePosting) {
  auto [zero, one] = connect(fake_options());
  EXPECT_THROW(read_from(*zero, 1, at::tensor({kRows}, at::kLong)), c10::IndexError);
  EXPECT_THROW(read_from(*zero, 1, at::tensor({-1}, at::kLong)), c10::IndexError);
}

TEST(RdmaWithoutDevice, ExplainsWhatIsMissing) {
  if (Transport::rdma_available()) GTEST_SKIP() << "an RDMA device is present";
  auto store = c10::make_intrusive<c10d::HashStore>();
  try {
    Transport::rdma(store, 0, 1, host_table(0), quick());
    ADD_FAILURE() << "an RDMA transport was made without a device";
  } catch (const c10::Error& error) {
    const std::string message = error.what();
    EXPECT_TRUE(message.find("no RDMA device") != std::string::npos ||
                message.find("libibverbs") != std::string::npos ||
                message.find("without rdma-core") != std::string::npos)
        << message;
  }
}

}  // namespace
