// NCCL driven directly, for the slotted fetch's two exchanges of fixed blocks and the
// partitioned sampler's three exchanges a hop.
//
// Why: each c10d all-to-all costs 50-120 us of host time to post (its work object, events
// between its stream and ours, the flight recorder), and a fetch of 45 MB takes about
// 0.25 ms on the wire between two H200s, so two posts are a large part of every fetch
// (docs/benchmarks.md). Here a transport makes a communicator of its own over the group's
// store, and a fetch enqueues grouped ncclSend/ncclRecv on the caller's stream: no work
// object, no second stream.
//
// libnccl.so.2 is the copy PyTorch already loaded (found with RTLD_NOLOAD), so nothing links
// NCCL and the same library serves both. The few declarations needed are NCCL's stable C
// ABI, written out below instead of depending on nccl.h at build time.
//
// Failure: a peer that dies leaves the kernels waiting; the caller polls an event within
// its timeout and aborts the communicator (ncclCommAbort ends the waiting kernels), and the
// communicator is not used again.
#pragma once

#ifdef QUIVER_WITH_CUDA
#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace quiver::runtime {

class NcclDirect {
 public:
  // Every rank of a group calls this at the same point (a collective step). Returns null,
  // with `why` saying so, when some rank cannot drive NCCL directly (no libnccl.so.2 loaded,
  // QUIVER_NCCL_DIRECT=0): the ranks agree through the store, so either all use the
  // communicator or none does; QUIVER_NCCL_DIRECT=1 makes that an error instead. Raises if a
  // rank does not arrive within `timeout`.
  static std::unique_ptr<NcclDirect> connect(c10d::Store& store, const std::string& prefix,
                                             int rank, int size, int device,
                                             std::chrono::milliseconds timeout, std::string& why);
  ~NcclDirect();
  NcclDirect(const NcclDirect&) = delete;
  NcclDirect& operator=(const NcclDirect&) = delete;

  // Enqueues on `stream` one block of `block_bytes` to and from every other rank, in rank
  // order without this one: the block of the p-th other rank at from + p * block_bytes.
  // Raises on an NCCL error (the communicator is then aborted).
  void exchange_blocks(const void* from, void* into, size_t block_bytes, cudaStream_t stream);

  // Enqueues on `stream` an all-to-all of varied sizes: send_bytes[r] bytes to rank r from
  // `from` (blocks in rank order), recv_bytes[r] from rank r into `into` likewise; this
  // rank's own block is copied on the stream. Raises on an NCCL error (then aborted).
  void exchange_varied(const void* from, const std::vector<size_t>& send_bytes, void* into,
                       const std::vector<size_t>& recv_bytes, cudaStream_t stream);

  // Waits for `done` (recorded after the exchange) within `timeout`, polling; on a timeout
  // or an asynchronous NCCL error, aborts the communicator and raises std::runtime_error.
  void wait(cudaEvent_t done, std::chrono::milliseconds timeout);

  int device() const { return device_; }

  // Called before the communicator is aborted (a failure, a timeout, or destruction), on the
  // thread that aborts it. ncclCommAbort waits until every CUDA graph holding NCCL calls of
  // this communicator is destroyed: an owner that captures them lets go of its graphs here.
  void set_before_abort(std::function<void()> before_abort) {
    before_abort_ = std::move(before_abort);
  }

 private:
  NcclDirect(void* comm, int rank, int size, int device);
  void abort();
  [[noreturn]] void fail(const std::string& what, int result);

  void* comm_;  // ncclComm_t; null once aborted
  std::function<void()> before_abort_;
  int rank_;
  int size_;
  int device_;
};

}  // namespace quiver::runtime
#endif
