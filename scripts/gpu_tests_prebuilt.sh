#!/usr/bin/env bash
# Python tests (and one benchmark command) on the GPU machine with a library built on the
# CPU machine, so that a device call spends no minutes compiling (scripts/gpu_check.sh
# builds there). The CPU machine's build has the CUDA kernels (nvcc compiles and links
# there); pack it, then carry .device to the GPU machine:
#
#   rm -rf .device/inst && cmake --install build/py --prefix .device/inst && mkdir -p \
#     .device/pack && xz -T2 -6 -c .device/inst/torch_quiver_ops/lib/libtorch_quiver_ops.so \
#     > .device/pack/new.so.xz
#   FILES="test_serving.py test_dist.py" KEXPR="not slow" DEADLINE=560 \
#     BENCH="python3 scripts/probe_sampling_batch.py" bash scripts/gpu_tests_prebuilt.sh
#
# Each file runs in its own pytest process with -k "not rdma" (no RDMA device there), its
# log in $OUT; files that the DEADLINE (seconds for the whole call) leaves no time for are
# named as skipped.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$SECONDS
DEADLINE=${DEADLINE:-560}
[ -f .device/pack/new.so.xz ] || { echo "no .device/pack/new.so.xz: pack the library first (see the header)" >&2; exit 2; }
xz -dc .device/pack/new.so.xz > /tmp/libtorch_quiver_ops.so
export TORCH_QUIVER_OPS_LIBRARY=/tmp/libtorch_quiver_ops.so PYTHONPATH=$PWD CXX=/usr/bin/g++ \
  CUDAHOSTCXX=/usr/bin/g++ PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch_quiver_ops as q; print("CUDA kernels:", q.cuda_kernels_built())'
k="not rdma"; [ -n "${KEXPR:-}" ] && k="$k and ($KEXPR)"
for f in ${FILES:-}; do
  left=$((DEADLINE - (SECONDS - start)))
  [ $left -lt 20 ] && { echo "SKIPPED $f (deadline)"; continue; }
  name=$(basename "$f" .py)
  t0=$SECONDS
  timeout -s INT $left python3 -m pytest -q -p no:cacheprovider "tests/python/$f" -k "$k" \
    > "$OUT/$name.log" 2>&1
  rc=$?
  echo "== $f rc=$rc $((SECONDS - t0)) s: $(tail -n 1 "$OUT/$name.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/$name.log" | head -20
done
if [ -n "${BENCH:-}" ]; then
  left=$((DEADLINE - (SECONDS - start)))
  echo "== bench: $BENCH"
  timeout -s INT $left bash -c "$BENCH" 2>&1 | tee "$OUT/bench.log" | tail -n 60
fi
