#!/usr/bin/env bash
# One command for the GPU machine (torch with CUDA and nvcc installed, no network):
# builds with CUDA, runs the C++ and Python tests on CPU and CUDA, compute-sanitizer on
# the kernels, and the benchmarks. Logs go to $OUT (default build/gpu_out).
#   QUIVER_GPU_STAGES: comma list of build,test,sanitize,train,bench,bench_feature,bench_e2e,
#                      bench_csr (default: all of these), bench_dist (two GPUs; on one, only
#                      its CPU paths), bench_host_pages (host tables of up to 32 GiB: zero
#                      copy against staged reads; needs about 40 GiB of host memory)
#   QUIVER_PYTEST_ARGS: what pytest runs in the test stage, in one process (default: each
#                      file of tests/python in a process of its own)
#   QUIVER_BENCH_ARGS, QUIVER_FEATURE_BENCH_ARGS, QUIVER_E2E_BENCH_ARGS,
#   QUIVER_CSR_BENCH_ARGS, QUIVER_DIST_BENCH_ARGS, QUIVER_HOST_PAGES_ARGS: extra arguments for
#                      the benchmarks (e.g. QUIVER_E2E_BENCH_ARGS="--scaling 1,2,4")
set -uo pipefail
if [ $# -gt 0 ]; then  # it takes no arguments: --help (or anything) prints the header above
  sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"
  [ "$1" = -h ] || [ "$1" = --help ]; exit $?
fi
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-$REPO/build/gpu_out}
mkdir -p "$OUT"
STAGES=${QUIVER_GPU_STAGES:-build,test,sanitize,train,bench,bench_feature,bench_e2e,bench_csr}
BUILD=$REPO/build/gpu
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
export TORCH_QUIVER_OPS_LIBRARY=$BUILD/libtorch_quiver_ops.so
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
status=0
has() { [[ ",$STAGES," == *",$1,"* ]]; }
step() { printf '\n== %s\n' "$1"; }

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'

# The image's default CXX (an /opt/gcc wrapper) links libstdc++ statically into shared
# libraries; a second libstdc++ beside Python's crashes on the first formatted error
# message. Build with the system compiler, and check the result for that mistake. AOTInductor
# compiles its packages with $CXX too (tests/python/test_export.py): with the wrapper, loading
# a package segfaults.
if [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++; fi

if has build; then
  step "build (CUDA on, sm_90, $CXX)"
  rm -f "$BUILD/CMakeCache.txt"
  gtest_args=()
  [ -d "$REPO/.deps/googletest" ] && gtest_args=(-DQUIVER_GTEST_SOURCE_DIR="$REPO/.deps/googletest")
  ( cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQUIVER_WITH_CUDA=ON \
      -DQUIVER_CUDA_ARCHITECTURES=90 -DBUILD_TESTING=ON -DPython3_EXECUTABLE="$(command -v "$PY")" \
      "${gtest_args[@]}" && cmake --build "$BUILD" -j "$(nproc)" ) > "$OUT/build.log" 2>&1
  rc=$?; tail -n 15 "$OUT/build.log"
  [ $rc -eq 0 ] || { echo "BUILD FAILED"; exit 1; }
  if nm -D --defined-only "$TORCH_QUIVER_OPS_LIBRARY" | grep -q 'std::codecvt\|_ZNSt7codecvt'; then
    echo "BUILD BROKEN: libstdc++ was linked statically into the library (compiler: $CXX)"; exit 1
  fi
  "$PY" -c 'import torch_quiver_ops as q; print("CUDA kernels:", q.cuda_kernels_built())'
fi

if has test; then
  step "C++ tests"
  ctest --test-dir "$BUILD" --output-on-failure -j 4 > "$OUT/ctest.log" 2>&1 || status=1
  tail -n 6 "$OUT/ctest.log"
  step "examples/cpp on the installed library (find_package)"
  torch_prefix="$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
  ( cmake --install "$BUILD" --prefix "$BUILD/install" && \
    cmake -S examples/cpp -B "$BUILD/examples_cpp" -G Ninja -DCMAKE_BUILD_TYPE=Release -Wno-dev \
      -DCMAKE_PREFIX_PATH="$BUILD/install;$torch_prefix" && cmake --build "$BUILD/examples_cpp" ) \
    > "$OUT/examples_cpp.log" 2>&1 || { status=1; tail -n 20 "$OUT/examples_cpp.log"; }
  export QUIVER_CPP_TRAINER=$BUILD/examples_cpp/train_sage
  export QUIVER_CPP_EXPORT_RUNNER=$BUILD/examples_cpp/run_exported
  step "Python tests (CPU, GPU and UVA modes)"
  export QUIVER_TEST_BINARY_DIR=$BUILD/tests/cpp QUIVER_REQUIRE_CPP_TESTS=1
  if [ -n "${QUIVER_PYTEST_ARGS:-}" ]; then
    "$PY" -m pytest -q -ra -p no:cacheprovider $QUIVER_PYTEST_ARGS -x > "$OUT/pytest.log" 2>&1 || status=1
    tail -n 25 "$OUT/pytest.log"
  else
    # Each file in a process of its own: what one file leaves on the GPU (contexts,
    # compiled packages, runtimes' streams) does not reach the next one's spawned workers.
    : > "$OUT/pytest.log"
    for file in tests/python/test_*.py; do
      "$PY" -m pytest -q -ra -p no:cacheprovider "$file" >> "$OUT/pytest.log" 2>&1
      rc=$?
      [ $rc -eq 0 ] || [ $rc -eq 5 ] || status=1  # 5: no test collected (all deselected)
      printf '%-40s rc %s: %s\n' "$(basename "$file")" "$rc" "$(tail -n 1 "$OUT/pytest.log")"
    done
  fi
fi

if has sanitize; then
  for tool in memcheck racecheck; do
    step "compute-sanitizer $tool on the quiver kernels"
    compute-sanitizer --tool "$tool" --kernel-name kns=quiver --error-exitcode 9 \
      "$PY" scripts/sanitize_kernels.py > "$OUT/sanitize_$tool.log" 2>&1 || status=1
    tail -n 4 "$OUT/sanitize_$tool.log"
  done
fi

if has train; then
  step "main job: examples/train_sage.py on the GPU (small graph, 2 epochs)"
  "$PY" examples/train_sage.py --epochs 2 > "$OUT/train.log" 2>&1 || status=1
  tr '\r' '\n' < "$OUT/train.log" | grep -E "^(graph|device)|test accuracy|Error"
fi

# A benchmark stage: scripts/NAME.py with its json and log in $OUT, and its extra arguments.
bench() {
  local name=$1 title=$2 extra=$3
  step "benchmark: $title"
  # shellcheck disable=SC2086  # the extra arguments are meant to split
  "$PY" "scripts/$name.py" --json "$OUT/$name.json" $extra 2>&1 | tee "$OUT/$name.log" || status=1
}

has bench && bench bench_sampling "sampling" "${QUIVER_BENCH_ARGS:-}"
if has bench_feature; then
  df -h /dev/shm | tail -n 1
  bench bench_feature "feature gather" "${QUIVER_FEATURE_BENCH_ARGS:-}"
fi
has bench_e2e && bench bench_e2e "GraphSAGE epochs end to end" "${QUIVER_E2E_BENCH_ARGS:-}"
has bench_csr && bench bench_csr "CSR from COO on the GPU (papers100M-sized)" "${QUIVER_CSR_BENCH_ARGS:-}"
has bench_dist && bench bench_dist "distributed features" "${QUIVER_DIST_BENCH_ARGS:-}"
has bench_host_pages && bench bench_host_pages "host tier: zero copy and staged reads by table size" \
  "${QUIVER_HOST_PAGES_ARGS:---sizes 1,4,16,32 --pages 4k}"

echo
[ $status -eq 0 ] && echo "gpu_check: all stages passed" || echo "gpu_check: FAILURES (see logs in $OUT)"
exit $status
