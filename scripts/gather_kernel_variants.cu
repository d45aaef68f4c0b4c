// Row gather kernel variants on one GPU, outside the library: 400-byte rows of a
// products-sized table (2.45M rows) in HBM, batches of 430,000 random unique ids, as
// bench_feature.py's HBM row. Prints GB/s of output beside the device-to-device copy, and
// a call's wait for the whole gather against a wait for a check of its ids only. What it
// measured is in docs/benchmarks.md (issue 28, forty-second session; bulk copies, forty-
// ninth).
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

// Hopper's bulk copies (TMA without a tensor map, sm_90): each lane of a warp moves one row,
// global -> shared (cp.async.bulk, completing on the warp's mbarrier for that stage) then
// shared -> global (cp.async.bulk ... bulk_group), kStages groups of 32 rows in flight a warp.
// Rows must be 16-byte multiples at 16-byte aligned addresses. Forty-ninth session.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <int kStages>
__global__ void ktma(const char* __restrict__ table, int64_t rows, int row_bytes,
                     const int64_t* __restrict__ ids, int64_t n, char* __restrict__ out,
                     uint64_t* err) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem) + warp * kStages;  // 1 KiB reserved
  char* bufs = smem + 1024 + int64_t{warp} * kStages * 32 * row_bytes;
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bars + s)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  const int64_t groups = (n + 31) / 32;
  const int64_t stride = int64_t{gridDim.x} * warps;
  const int64_t first = int64_t{blockIdx.x} * warps + warp;
  uint32_t ok_bits = 0, parity = 0;
  auto load = [&](int64_t g, int s) {
    const int64_t i = g * 32 + lane;
    bool ok = false;
    const char* src = nullptr;
    if (i < n) {
      const int64_t id = ids[i];
      if (id >= 0 && id < rows) {
        ok = true;
        src = table + id * row_bytes;
      } else if (err) {
        *err = i + 1;
      }
    }
    const unsigned mask = __ballot_sync(0xffffffffu, ok);
    const uint32_t bar = smem_u32(bars + s);
    if (lane == 0) {
      uint64_t state;
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
                   : "=l"(state) : "r"(bar), "r"(static_cast<uint32_t>(__popc(mask) * row_bytes))
                   : "memory");
    }
    __syncwarp();
    if (ok) {
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
          ::"r"(smem_u32(bufs + (int64_t{s} * 32 + lane) * row_bytes)), "l"(src), "r"(row_bytes),
          "r"(bar) : "memory");
    }
    ok_bits = ok ? (ok_bits | (1u << s)) : (ok_bits & ~(1u << s));
  };
  for (int s = 0; s < kStages; ++s) {
    const int64_t g = first + s * stride;
    if (g < groups) load(g, s);
  }
  int s = 0;
  for (int64_t g = first; g < groups; g += stride) {
    const uint32_t bar = smem_u32(bars + s);
    const uint32_t phase = (parity >> s) & 1u;
    asm volatile(
        "{\n .reg .pred done;\n WAIT_%=:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        " @!done bra WAIT_%=;\n}" ::"r"(bar), "r"(phase) : "memory");
    parity ^= 1u << s;
    const bool ok = (ok_bits >> s) & 1u;
    if (ok) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                   ::"l"(out + (g * 32 + lane) * row_bytes),
                   "r"(smem_u32(bufs + (int64_t{s} * 32 + lane) * row_bytes)), "r"(row_bytes)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
    const int64_t next = g + int64_t{kStages} * stride;
    if (next < groups) {
      if (ok) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // buffer free
      __syncwarp();
      load(next, s);
    }
    s = s + 1 == kStages ? 0 : s + 1;
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

__global__ void fill_rows(uint32_t* table, int64_t words) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < words;
       i += int64_t{gridDim.x} * blockDim.x)
    table[i] = static_cast<uint32_t>(i * 2654435761u);
}

// Rows of `out` that differ from table[ids[i]], counted into *wrong.
__global__ void count_wrong_rows(const uint32_t* table, int64_t row_words, const int64_t* ids,
                                 int64_t n, const uint32_t* out, unsigned long long* wrong) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    for (int64_t w = 0; w < row_words; ++w) {
      if (out[i * row_words + w] != table[ids[i] * row_words + w]) {
        atomicAdd(wrong, 1ull);
        break;
      }
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
  fill_rows<<<1024, 256>>>(reinterpret_cast<uint32_t*>(table), rows * row_bytes / 4);
  CK(cudaDeviceSynchronize());
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
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int stages : {1, 2, 4}) {
    for (int warps : {1, 2, 4, 8}) {
      const size_t smem = 1024 + size_t{1} * warps * stages * 32 * row_bytes;
      if (smem > 227 * 1024) continue;
      auto kernel = stages == 1 ? ktma<1> : stages == 2 ? ktma<2> : ktma<4>;
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(smem)));
      int per_sm = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * warps, smem));
      if (per_sm == 0) continue;
      char name[80];
      snprintf(name, 80, "tma stages=%d warps=%d (%d blocks/SM)", stages, warps, per_sm);
      run(name, [&](int64_t* ids) {
        kernel<<<sms * per_sm, 32 * warps, smem>>>(reinterpret_cast<const char*>(table), rows,
                                                   static_cast<int>(row_bytes), ids, n,
                                                   reinterpret_cast<char*>(out), err);
      });
    }
  }
  // The last batch's rows (the last TMA variant's last run wrote them) against the table's.
  {
    unsigned long long* wrong;
    CK(cudaMallocManaged(&wrong, 8));
    *wrong = 0;
    CK(cudaMemset(out, 0, n * row_bytes));
    ktma<2><<<sms, 64, 1024 + 2 * 2 * 32 * row_bytes>>>(reinterpret_cast<const char*>(table),
        rows, static_cast<int>(row_bytes), idsv[batches - 1], n, reinterpret_cast<char*>(out),
        err);
    count_wrong_rows<<<1024, 256>>>(reinterpret_cast<const uint32_t*>(table), row_bytes / 4,
                                    idsv[batches - 1], n, reinterpret_cast<const uint32_t*>(out),
                                    wrong);
    CK(cudaDeviceSynchronize());
    printf("tma rows that differ from the table's: %llu of %lld\n", *wrong,
           static_cast<long long>(n));
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
