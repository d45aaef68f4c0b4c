// CUDA graph capture for the samplers' batches, shared by the sampling ops' captured
// batches (ops/cuda/batch_graphs.h) and the partitioned sampler's (runtime/slotted_batch.h):
// a graph whose allocations come from a pool of its own, and the stream captures run on.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/MemPool.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <mutex>
#include <unordered_map>

namespace quiver::cuda {

// One captured batch as a CUDA graph, its allocations in a memory pool of its own. Not
// at::cuda::CUDAGraph: that one also puts PyTorch's default CUDA generator into capture
// mode, which breaks random numbers drawn by other threads meanwhile (the model's, beside a
// prefetching loader); our kernels read their key from the board instead.
class BatchGraph {
 public:
  BatchGraph() = default;
  BatchGraph(const BatchGraph&) = delete;
  BatchGraph& operator=(const BatchGraph&) = delete;
  ~BatchGraph() {
    if (exec_ != nullptr) C10_CUDA_CHECK_WARN(cudaGraphExecDestroy(exec_));
    if (pooled_) c10::cuda::CUDACachingAllocator::releasePool(device_, pool_);
  }

  // Captures what `queue` queues on `stream` (not the default stream). Only this thread's
  // unsafe CUDA calls are refused meanwhile; allocations on `stream` come from the pool.
  template <typename Queue>
  void capture(c10::DeviceIndex device, cudaStream_t stream, Queue&& queue) {
    device_ = device;
    pool_ = at::cuda::MemPool::graph_pool_handle(/*is_user_created=*/false);
    c10::cuda::CUDACachingAllocator::beginAllocateToPool(device_, pool_, [this](cudaStream_t s) {
      cudaStreamCaptureStatus status;
      unsigned long long id = 0;
      return cudaStreamGetCaptureInfo(s, &status, &id) == cudaSuccess &&
             status == cudaStreamCaptureStatusActive && id == capture_id_;
    });
    pooled_ = true;
    cudaGraph_t graph = nullptr;
    try {
      C10_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      cudaStreamCaptureStatus status;
      C10_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &capture_id_));
      queue();
    } catch (...) {
      (void)cudaStreamEndCapture(stream, &graph);
      (void)cudaGetLastError();
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      c10::cuda::CUDACachingAllocator::endAllocateToPool(device_, pool_);
      throw;
    }
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device_, pool_);
    C10_CUDA_CHECK(ended);
    const cudaError_t made = cudaGraphInstantiateWithFlags(&exec_, graph, 0);
    C10_CUDA_CHECK_WARN(cudaGraphDestroy(graph));
    C10_CUDA_CHECK(made);
  }

  void replay(cudaStream_t stream) { C10_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  c10::DeviceIndex device_ = 0;
  at::cuda::MempoolId_t pool_{0, 0};
  bool pooled_ = false;
  unsigned long long capture_id_ = 0;
  cudaGraphExec_t exec_ = nullptr;
};

// The stream batches are captured on: one per GPU, created for this and never handed out by
// PyTorch's stream pool. A pool stream can be another thread's current stream (a serving
// runtime's samplers, a loader's side stream): while it is being captured, that thread's
// copies from pageable memory are refused ("Cannot copy between CPU and CUDA tensors during
// CUDA graph capture") and its kernels would be recorded into the graph. Captures take turns
// on it (they are few: a couple per shape). Never destroyed: at exit the CUDA context may be
// gone before statics.
class CaptureStream {
 public:
  static CaptureStream& of(c10::DeviceIndex device) {
    static std::mutex made;
    static auto* streams = new std::unordered_map<c10::DeviceIndex, CaptureStream*>();
    const std::lock_guard<std::mutex> lock(made);
    CaptureStream*& stream = (*streams)[device];
    if (stream == nullptr) stream = new CaptureStream(device);
    return *stream;
  }
  at::cuda::CUDAStream stream() const {
    return at::cuda::getStreamFromExternal(stream_, device_);
  }
  std::mutex& turn() { return turn_; }

 private:
  explicit CaptureStream(c10::DeviceIndex device) : device_(device) {
    const c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  c10::DeviceIndex device_;
  cudaStream_t stream_ = nullptr;
  std::mutex turn_;
};

}  // namespace quiver::cuda
