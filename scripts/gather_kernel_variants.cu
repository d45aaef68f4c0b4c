// Row gather kernel variants on one GPU, outside the library: 400-byte rows of a
// products-sized table (2.45M rows) in HBM, batches of 430,000 random unique ids, as
// bench_feature.py's HBM row. Prints GB/s of output beside the device-to-device copy, and
// a call's wait for the whole gather against a wait for a check of its ids only. What it
// measured is in docs/benchmarks.md (issue 28, forty-second session).
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/gather_kernel_variants \
//     scripts/gather_kernel_variants.cu && /tmp/gather_kernel_variants
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <type_traits>
#include <vector>
#include <algorithm>
#include <random>
#include <chrono>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

__device__ inline uint4 ld_na(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// The library's shape: a block of (row_vecs lanes x rows), R rows' loads in flight a thread.
// kHints: non-allocating loads and streaming stores.
template <int R, bool kHints>
__global__ void k2d(const uint4* __restrict__ table, int64_t rows, int64_t row_vecs,
                    const int64_t* __restrict__ ids, int64_t n, uint4* __restrict__ out,
                    uint64_t* err) {
  const int64_t step = int64_t{blockDim.y} * R;
  for (int64_t first = blockIdx.x * step; first < n; first += int64_t{gridDim.x} * step) {
    const uint4* src[R];
    int64_t dst[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      src[r] = nullptr;
      const int64_t i = first + r * int64_t{blockDim.y} + threadIdx.y;
      if (i >= n) continue;
      const int64_t id = ids[i];
      if (id < 0 || id >= rows) { if (err && threadIdx.x == 0) *err = i + 1; continue; }
      src[r] = table + id * row_vecs;
      dst[r] = i;
    }
    for (int64_t v = threadIdx.x; v < row_vecs; v += blockDim.x) {
      uint4 val[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (src[r]) val[r] = kHints ? ld_na(src[r] + v) : src[r][v];
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!src[r]) continue;
        if (kHints) {
          __stcs(out + dst[r] * row_vecs + v, val[r]);
        } else {
          out[dst[r] * row_vecs + v] = val[r];
        }
      }
    }
  }
}

// Flat: thread t of the grid moves output vectors t, t + T, ... (R of them in flight).
template <int R>
__global__ void kflat(const uint4* __restrict__ table, int64_t rows, int row_vecs,
                      const int64_t* __restrict__ ids, int64_t n, uint4* __restrict__ out,
                      uint64_t* err) {
  const int64_t total = n * row_vecs;
  const int64_t T = int64_t{gridDim.x} * blockDim.x;
  for (int64_t base = int64_t{blockIdx.x} * blockDim.x * R + threadIdx.x; base < total;
       base += T * R) {
    uint4 val[R];
    bool ok[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t e = base + int64_t{r} * blockDim.x;
      ok[r] = false;
      if (e >= total) continue;
      const int64_t i = e / row_vecs;
      const int v = static_cast<int>(e - i * row_vecs);
      const int64_t id = ids[i];
      if (id < 0 || id >= rows) { if (err) *err = i + 1; continue; }
      val[r] = table[id * row_vecs + v];
      ok[r] = true;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (ok[r]) out[base + int64_t{r} * blockDim.x] = val[r];
    }
  }
}

__global__ void check_ids(const int64_t* __restrict__ ids, int64_t n, int64_t rows, uint64_t* err) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t id = ids[i];
    if (id < 0 || id >= rows) *err = i + 1;
  }
}

int main() {
  const int64_t rows = 2449029, row_bytes = 400, row_vecs = row_bytes / 16, n = 430000;
  const int batches = 24;
  uint4* table; CK(cudaMalloc(&table, rows * row_bytes));
  CK(cudaMemset(table, 1, rows * row_bytes));
  std::mt19937_64 gen(1);
  std::vector<int64_t> perm(rows);
  for (int64_t i = 0; i < rows; ++i) perm[i] = i;
  std::vector<int64_t*> idsv(batches);
  for (int b = 0; b < batches; ++b) {
    for (int64_t i = 0; i < n; ++i) std::swap(perm[i], perm[i + gen() % (rows - i)]);
    CK(cudaMalloc(&idsv[b], n * 8));
    CK(cudaMemcpy(idsv[b], perm.data(), n * 8, cudaMemcpyHostToDevice));
  }
  uint4* out; CK(cudaMalloc(&out, n * row_bytes));
  uint64_t* err_host; CK(cudaHostAlloc(&err_host, 8, cudaHostAllocMapped));
  uint64_t* err; CK(cudaHostGetDevicePointer(&err, err_host, 0));
  *err_host = 0;
  // copy bound
  void *a, *b2; size_t cb = size_t{1} << 30;
  CK(cudaMalloc(&a, cb)); CK(cudaMalloc(&b2, cb));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  float ms = 0;
  CK(cudaMemcpy(b2, a, cb, cudaMemcpyDeviceToDevice));
  cudaEventRecord(e0);
  for (int i = 0; i < 5; ++i) cudaMemcpyAsync(b2, a, cb, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1); cudaEventSynchronize(e1); cudaEventElapsedTime(&ms, e0, e1);
  printf("d2d copy: %.1f GB/s output (%.1f read+write)\n", 5 * cb / ms / 1e6, 10 * cb / ms / 1e6);
  CK(cudaFree(a)); CK(cudaFree(b2));

  auto run = [&](const char* name, auto launch) {
    for (int b = 0; b < 4; ++b) launch(idsv[b]);
    if (cudaGetLastError() != cudaSuccess) {  // e.g. too many registers for the block
      printf("%-40s launch refused\n", name);
      return;
    }
    CK(cudaDeviceSynchronize());
    cudaEventRecord(e0);
    for (int rep = 0; rep < 3; ++rep)
      for (int b = 0; b < batches; ++b) launch(idsv[b]);
    cudaEventRecord(e1); CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1));
    printf("%-40s %8.1f GB/s in stream (%.1f us/batch)\n", name,
           3.0 * batches * n * row_bytes / ms / 1e6, ms * 1000 / (3 * batches));
  };
  for (int R : {2, 4, 8}) {
    for (int threads : {256, 512, 1024}) {
      dim3 block(row_vecs, threads / row_vecs);
      int64_t per = int64_t{block.y} * R;
      int blocks = (n + per - 1) / per;
      auto both = [&](auto hints) {  // hints: std::bool_constant, the kernel's kHints
        constexpr bool kHints = decltype(hints)::value;
        char name[80];
        snprintf(name, 80, "2d%s R=%d threads=%d", kHints ? " hints" : "", R, threads);
        run(name, [&](int64_t* ids) {
          if (R == 2) k2d<2, kHints><<<blocks, block>>>(table, rows, row_vecs, ids, n, out, err);
          if (R == 4) k2d<4, kHints><<<blocks, block>>>(table, rows, row_vecs, ids, n, out, err);
          if (R == 8) k2d<8, kHints><<<blocks, block>>>(table, rows, row_vecs, ids, n, out, err);
        });
      };
      both(std::false_type{});
      both(std::true_type{});
    }
  }
  for (int R : {1, 2, 4}) {
    for (int threads : {256, 512}) {
      const int64_t total = n * row_vecs;
      int blocks = (total + int64_t{threads} * R - 1) / (int64_t{threads} * R);
      char name[80];
      snprintf(name, 80, "flat R=%d threads=%d", R, threads);
      run(name, [&](int64_t* ids) {
        if (R == 1) kflat<1><<<blocks, threads>>>(table, rows, row_vecs, ids, n, out, err);
        if (R == 2) kflat<2><<<blocks, threads>>>(table, rows, row_vecs, ids, n, out, err);
        if (R == 4) kflat<4><<<blocks, threads>>>(table, rows, row_vecs, ids, n, out, err);
      });
    }
  }
  // Host-side per call: launch + wait for the whole gather, against launch + a check kernel,
  // an event after it, the gather, and a wait for the event only.
  dim3 block(row_vecs, 256 / row_vecs);
  int blocks = (n + block.y * 4 - 1) / (block.y * 4);
  cudaEvent_t checked; cudaEventCreateWithFlags(&checked, cudaEventDisableTiming);
  for (int mode = 0; mode < 2; ++mode) {
    CK(cudaDeviceSynchronize());
    auto t0 = std::chrono::steady_clock::now();
    for (int rep = 0; rep < 3; ++rep)
      for (int b = 0; b < batches; ++b) {
        *err_host = 0;
        if (mode == 0) {
          k2d<4, false><<<blocks, block>>>(table, rows, row_vecs, idsv[b], n, out, err);
          CK(cudaStreamSynchronize(0));
        } else {
          check_ids<<<264, 512>>>(idsv[b], n, rows, err);
          cudaEventRecord(checked);
          k2d<4, false><<<blocks, block>>>(table, rows, row_vecs, idsv[b], n, out, nullptr);
          CK(cudaEventSynchronize(checked));
        }
        if (*err_host) printf("error!\n");
      }
    CK(cudaDeviceSynchronize());
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("per call, %-30s %8.1f GB/s\n", mode ? "check kernel + event wait" : "stream sync",
           3.0 * batches * n * row_bytes / s / 1e9);
  }
  return 0;
}
