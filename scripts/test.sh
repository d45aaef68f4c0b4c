#!/usr/bin/env bash
# Runs every test: the GoogleTest suite, the libtorch training program (examples/cpp, run
# by the pytest suite), the pytest suite (which also drives the libtorch
# binary that loads a TorchScript model), the RDMA tests in a soft-RoCE guest, and a
# separate CMake project that uses the installed package through find_package. Sets
# everything up first (scripts/setup.sh --rdma-vm; QUIVER_SKIP_RDMA_VM=1 skips the guest
# and its packages).
# Extra arguments go to pytest, e.g. scripts/test.sh -k sample.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
bash scripts/setup.sh --rdma-vm
VENV=${QUIVER_VENV:-$REPO/.venv}
BUILD_DIR=${QUIVER_BUILD_DIR:-$REPO/build/py}
export PATH="$VENV/bin:$PATH"

# Each section's header says when it began (seconds since the start): where CI's time goes.
section() { printf '\n== %s (at %d s)\n' "$1" "$SECONDS"; }

section "C++ tests (GoogleTest through the dispatcher)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j 2

section "examples/cpp: the libtorch training program, built on the installed package"
# The README's command, from the repository root (tests/python/test_readme.py checks it too).
prefix="$("$VENV/bin/python" -c 'import torch, torch_quiver_ops as q; print(q.cmake_prefix_path + ";" + torch.utils.cmake_prefix_path)')"
cmake -S examples/cpp -B build/examples_cpp -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release -Wno-dev > build/examples_cpp.log 2>&1 || { cat build/examples_cpp.log; exit 1; }
cmake --build build/examples_cpp
export QUIVER_CPP_TRAINER="$REPO/build/examples_cpp/train_sage"  # run by the Python tests
export QUIVER_CPP_EXPORT_RUNNER="$REPO/build/examples_cpp/run_exported"

section "Python tests"
# Run from outside the source tree so that the installed package is the one under test;
# the slowest tests are listed at the end (where CI's time goes).
(cd /tmp && QUIVER_TEST_BINARY_DIR="$BUILD_DIR/tests/cpp" QUIVER_REQUIRE_CPP_TESTS=1 \
  "$VENV/bin/python" -m pytest -q -ra --durations=15 --rootdir "$REPO" -c "$REPO/pyproject.toml" \
  "$REPO/tests/python" "$@")

section "RDMA for real: soft-RoCE (rdma_rxe) in a QEMU guest"
if [ "${QUIVER_SKIP_RDMA_VM:-0}" = 1 ]; then
  echo "skipped: QUIVER_SKIP_RDMA_VM=1"
elif ! grep -q '"rdma": "ON"' "$BUILD_DIR/build_info.json" 2>/dev/null; then
  echo "skipped: the library was built without rdma-core's headers (no RDMA transport)"
elif ! command -v qemu-system-x86_64 >/dev/null || ! ls /lib/modules/*/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko >/dev/null 2>&1; then
  echo "skipped: QEMU or a kernel with rdma_rxe is missing (scripts/setup.sh installs them on Debian)"
else
  # The verbs transport's GoogleTests (two processes over rxe0), DistFeature over RDMA, and
  # the partitioned sampler reading its peers' rows with one-sided READs. (The FakeRdma
  # tests need no device: ctest ran them above.)
  bash scripts/rdma_vm.sh --timeout 1200 -- bash -c "
    '$BUILD_DIR/tests/cpp/quiver_tests' --gtest_color=no --gtest_brief=1 \
      --gtest_filter='RdmaOverDevice.*' &&
    cd /tmp && QUIVER_EARLY_FORKSERVER=1 '$VENV/bin/python' -m pytest -q -ra -p no:cacheprovider --rootdir '$REPO' \
      -c '$REPO/pyproject.toml' '$REPO/tests/python/test_dist.py' \
      '$REPO/tests/python/test_dist_sampler.py' -k rdma"
fi

section "find_package(TorchQuiverOps) from a separate libtorch project"
cmake -S tests/cpp/consumer -B build/consumer -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release -Wno-dev > build/consumer.log 2>&1 || { cat build/consumer.log; exit 1; }
cmake --build build/consumer
./build/consumer/consumer

printf '\nall tests passed in %d s\n' "$SECONDS"
