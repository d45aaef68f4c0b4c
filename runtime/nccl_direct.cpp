#ifdef QUIVER_WITH_CUDA
#include "runtime/nccl_direct.h"

#include "runtime/bounded_wait.h"
#include "runtime/collective_wait.h"
#include "runtime/dynamic_library.h"
#include "runtime/host_agreement.h"
#include "runtime/interrupt_watch.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace quiver::runtime {
namespace {

// NCCL's C ABI, as stable across 2.x releases: results and data types are C enums (ints),
// a communicator is an opaque pointer, a unique id is 128 bytes passed by value.
constexpr int kNcclSuccess = 0;
constexpr int kNcclInProgress = 7;
constexpr int kNcclUint8 = 1;
struct NcclUniqueId {
  char internal[128];
};

struct NcclApi {
  int (*get_unique_id)(NcclUniqueId*) = nullptr;
  int (*comm_init_rank)(void**, int, NcclUniqueId, int) = nullptr;
  int (*comm_abort)(void*) = nullptr;
  int (*comm_get_async_error)(void*, int*) = nullptr;
  int (*send)(const void*, size_t, int, int, void*, cudaStream_t) = nullptr;
  int (*recv)(void*, size_t, int, int, void*, cudaStream_t) = nullptr;
  int (*group_start)() = nullptr;
  int (*group_end)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  std::string error;  // empty when every symbol was found
};

const NcclApi& nccl() {
  static const NcclApi api = [] {
    NcclApi a;
    // Only the copy already in the process (PyTorch's): a second NCCL would be a second
    // set of globals beside the one c10d uses.
    void* library = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (library == nullptr) {
      a.error = "libnccl.so.2 is not loaded in this process";
      return a;
    }
    std::string missing;
    bind_symbol(library, "ncclGetUniqueId", a.get_unique_id, missing);
    bind_symbol(library, "ncclCommInitRank", a.comm_init_rank, missing);
    bind_symbol(library, "ncclCommAbort", a.comm_abort, missing);
    bind_symbol(library, "ncclCommGetAsyncError", a.comm_get_async_error, missing);
    bind_symbol(library, "ncclSend", a.send, missing);
    bind_symbol(library, "ncclRecv", a.recv, missing);
    bind_symbol(library, "ncclGroupStart", a.group_start, missing);
    bind_symbol(library, "ncclGroupEnd", a.group_end, missing);
    bind_symbol(library, "ncclGetErrorString", a.error_string, missing);
    if (!missing.empty()) a.error = "libnccl.so.2 lacks " + missing;
    return a;
  }();
  return api;
}

std::string nccl_error(int result) {
  const char* text = nccl().error_string ? nccl().error_string(result) : nullptr;
  return "NCCL error " + std::to_string(result) + (text ? std::string(" (") + text + ")" : "");
}

// Why this rank cannot drive NCCL directly; empty when it can.
std::string why_not_here() {
  const char* setting = std::getenv("QUIVER_NCCL_DIRECT");
  if (setting != nullptr && std::strcmp(setting, "0") == 0) return "QUIVER_NCCL_DIRECT=0";
  return nccl().error;
}

std::vector<uint8_t> as_bytes(const std::string& text) { return {text.begin(), text.end()}; }

}  // namespace

std::unique_ptr<NcclDirect> NcclDirect::connect(c10d::Store& store, const std::string& prefix,
                                                int rank, int size, int device,
                                                std::chrono::milliseconds timeout,
                                                std::string& why) {
  // 1. Every rank says whether it can; all read all, so all decide alike.
  const std::string mine = why_not_here();
  store.set(prefix + "can/" + std::to_string(rank), as_bytes(mine.empty() ? "1" : "0" + mine));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + "can/" + std::to_string(r));
  wait_for_keys(store, keys, timeout, "every rank to say whether it can drive NCCL directly");
  for (int r = 0; r < size; ++r) {
    const std::vector<uint8_t> said = store.get(keys[r]);
    if (!said.empty() && said[0] == '0') {
      why = "host " + std::to_string(r) + ": " + std::string(said.begin() + 1, said.end());
      const char* setting = std::getenv("QUIVER_NCCL_DIRECT");
      TORCH_CHECK(setting == nullptr || std::strcmp(setting, "1") != 0,
                  "QUIVER_NCCL_DIRECT=1 asks for NCCL driven directly, but ", why);
      return nullptr;
    }
  }
  // 2. Rank 0 makes the communicator's id; every rank joins with it.
  NcclUniqueId id{};
  const std::string id_key = prefix + "id";
  if (rank == 0) {
    const int made = nccl().get_unique_id(&id);
    TORCH_CHECK(made == kNcclSuccess, "ncclGetUniqueId: ", nccl_error(made));
    store.set(id_key, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    wait_for_keys(store, {id_key}, timeout, "rank 0's NCCL id");
    const std::vector<uint8_t> bytes = store.get(id_key);
    TORCH_CHECK(bytes.size() == sizeof(id.internal), "the NCCL id in the store has ", bytes.size(),
                " bytes, not ", sizeof(id.internal));
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }
  // The join waits for every rank, and a rank that gave up above (its wait timed out as
  // this one arrived) never comes: the join runs on a thread of its own, waited for within
  // the timeout. A join that completes after this rank gave up frees its communicator.
  struct Join {
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false, abandoned = false;
    void* comm = nullptr;
    int result = kNcclSuccess;
  };
  auto join = std::make_shared<Join>();
  std::thread([join, size, id, rank, device] {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    void* comm = nullptr;
    const int result = nccl().comm_init_rank(&comm, size, id, rank);
    const std::lock_guard<std::mutex> lock(join->mutex);
    if (join->abandoned) {
      if (result == kNcclSuccess) nccl().comm_abort(comm);
      return;
    }
    join->comm = comm;
    join->result = result;
    join->done = true;
    join->finished.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(join->mutex);
  const InterruptWatch interrupts;
  if (!wait_up_to(join->finished, lock, std::chrono::duration<double>(timeout).count(),
                  [&] { return join->done; }, &interrupts)) {
    join->abandoned = true;
    if (interrupts.interrupted()) throw Interrupted("every rank to join the NCCL communicator");
    TORCH_CHECK(false, "ncclCommInitRank (rank ", rank, " of ", size, ") did not complete within ",
                timeout.count(), " ms: a rank did not join");
  }
  TORCH_CHECK(join->result == kNcclSuccess, "ncclCommInitRank (rank ", rank, " of ", size,
              "): ", nccl_error(join->result));
  return std::unique_ptr<NcclDirect>(new NcclDirect(join->comm, rank, size, device));
}

NcclDirect::NcclDirect(void* comm, int rank, int size, int device)
    : comm_(comm), rank_(rank), size_(size), device_(device) {}

NcclDirect::~NcclDirect() { abort(); }

void NcclDirect::abort() {
  // Local: frees this rank's resources and ends its kernels still waiting for a peer; the
  // peers are not waited for (a destroy would wait for unfinished work).
  if (comm_ == nullptr) return;
  if (before_abort_) before_abort_();
  nccl().comm_abort(comm_);
  comm_ = nullptr;
}

void NcclDirect::fail(const std::string& what, int result) {
  abort();
  throw std::runtime_error(what + ": " + nccl_error(result));
}

void NcclDirect::exchange_blocks(const void* from, void* into, size_t block_bytes,
                                 cudaStream_t stream) {
  TORCH_CHECK(comm_ != nullptr,
              "this transport's NCCL communicator was aborted after a failed fetch");
  if (block_bytes == 0 || size_ < 2) return;
  const auto* sending = static_cast<const char*>(from);
  auto* receiving = static_cast<char*>(into);
  int result = nccl().group_start();
  for (int r = 0, p = 0; r < size_ && result == kNcclSuccess; ++r) {
    if (r == rank_) continue;
    result = nccl().send(sending + p * block_bytes, block_bytes, kNcclUint8, r, comm_, stream);
    if (result == kNcclSuccess) {
      result = nccl().recv(receiving + p * block_bytes, block_bytes, kNcclUint8, r, comm_, stream);
    }
    ++p;
  }
  const int ended = nccl().group_end();  // always closes the group it opened
  if (result == kNcclSuccess) result = ended;
  if (result != kNcclSuccess) fail("posting ncclSend/ncclRecv", result);
}

void NcclDirect::exchange_varied(const void* from, const std::vector<size_t>& send_bytes,
                                 void* into, const std::vector<size_t>& recv_bytes,
                                 cudaStream_t stream) {
  TORCH_CHECK(comm_ != nullptr,
              "this transport's NCCL communicator was aborted after a failed fetch");
  TORCH_CHECK(static_cast<int>(send_bytes.size()) == size_ &&
                  static_cast<int>(recv_bytes.size()) == size_,
              "exchange_varied: one size per rank (", size_, "), got ", send_bytes.size(), " and ",
              recv_bytes.size());
  const auto* sending = static_cast<const char*>(from);
  auto* receiving = static_cast<char*>(into);
  std::vector<size_t> send_at(size_ + 1, 0), recv_at(size_ + 1, 0);
  for (int r = 0; r < size_; ++r) {
    send_at[r + 1] = send_at[r] + send_bytes[r];
    recv_at[r + 1] = recv_at[r] + recv_bytes[r];
  }
  TORCH_CHECK(send_bytes[rank_] == recv_bytes[rank_], "exchange_varied: this rank sends itself ",
              send_bytes[rank_], " bytes but expects ", recv_bytes[rank_]);
  if (send_bytes[rank_] > 0) {
    C10_CUDA_CHECK(cudaMemcpyAsync(receiving + recv_at[rank_], sending + send_at[rank_],
                                   send_bytes[rank_], cudaMemcpyDeviceToDevice, stream));
  }
  // Empty blocks are skipped on both sides: the sizes were agreed (each side's send is the
  // other's receive).
  int result = nccl().group_start();
  for (int r = 0; r < size_ && result == kNcclSuccess; ++r) {
    if (r == rank_) continue;
    if (send_bytes[r] > 0) {
      result = nccl().send(sending + send_at[r], send_bytes[r], kNcclUint8, r, comm_, stream);
    }
    if (result == kNcclSuccess && recv_bytes[r] > 0) {
      result = nccl().recv(receiving + recv_at[r], recv_bytes[r], kNcclUint8, r, comm_, stream);
    }
  }
  const int ended = nccl().group_end();  // always closes the group it opened
  if (result == kNcclSuccess) result = ended;
  if (result != kNcclSuccess) fail("posting ncclSend/ncclRecv", result);
}

void NcclDirect::wait(cudaEvent_t done, std::chrono::milliseconds timeout) {
  TORCH_CHECK(comm_ != nullptr,
              "this transport's NCCL communicator was aborted after a failed fetch");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const InterruptWatch interrupts;
  for (uint32_t spin = 0;; ++spin) {
    const cudaError_t state = cudaEventQuery(done);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) C10_CUDA_CHECK(state);
    if (spin % 64 == 63) {  // the clock and NCCL's error word, now and then
      int async = kNcclSuccess;
      nccl().comm_get_async_error(comm_, &async);
      if (async != kNcclSuccess && async != kNcclInProgress) fail("NCCL reported", async);
      if (std::chrono::steady_clock::now() > deadline) {
        abort();
        no_answer_within(timeout);
      }
      if (interrupts.interrupted()) {
        abort();  // as a timeout does: the peers may be midway through the exchange
        throw Interrupted("the other hosts");
      }
    }
    std::this_thread::yield();
  }
}

}  // namespace quiver::runtime
#endif
