#!/bin/bash
# Issue 29/26 runs on every GPU of one host, in one call of the device tool:
#   OUT=/some/dir bash scripts/multi_gpu_runs.sh
# builds, runs the multi-GPU tests, then the benchmarks in priority order, each cut to the
# time left of a 590 s budget (BUDGET=seconds to change it). Wheels in .whl/ (none are
# needed) are installed first, for machines without a network. Every log lands in $OUT and
# in $OUT/logs.tgz.
set -u
t0=$(date +%s)
left() { local l=$(( ${BUDGET:-590} - ($(date +%s) - t0) )); [ "$l" -gt "$1" ] && l=$1; echo "$l"; }
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONUNBUFFERED=1 CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++
nvidia-smi -L | tee "$OUT/gpus.txt"
nvidia-smi topo -m >> "$OUT/gpus.txt" 2>&1
QUIVER_GPU_STAGES=build OUT=$OUT bash scripts/gpu_check.sh > "$OUT/build_stage.log" 2>&1 || { tail -30 "$OUT/build_stage.log"; exit 1; }
export TORCH_QUIVER_OPS_LIBRARY=$PWD/build/gpu/libtorch_quiver_ops.so PYTHONPATH=$PWD:/tmp/site
echo "built at $(( $(date +%s) - t0 )) s"
timeout "$(left 150)" python3 -m pytest -q -p no:cacheprovider tests/python/test_layout.py tests/python/test_dist_sampler.py -k "layout or gpus or loader" > "$OUT/pytest_multi.log" 2>&1; tail -4 "$OUT/pytest_multi.log"
echo "== at $(( $(date +%s) - t0 )) s: partitioned sampling over NCCL"
timeout "$(left 150)" python3 scripts/bench_dist_sampling.py --parts 2,4 --methods random --mode GPU --backend nccl --json "$OUT/dist_sampling_nccl.json" > "$OUT/dist_sampling_nccl.log" 2>&1; tail -4 "$OUT/dist_sampling_nccl.log"
echo "== at $(( $(date +%s) - t0 )) s: clique gather on every GPU"
timeout "$(left 150)" python3 scripts/bench_feature.py --two-gpus on --json "$OUT/feature_multi.json" > "$OUT/feature_multi.log" 2>&1; grep -A4 "GPUs, " "$OUT/feature_multi.log"
echo "== at $(( $(date +%s) - t0 )) s: DistFeature over NCCL, every GPU a host"
timeout "$(left 150)" python3 scripts/bench_dist.py --hosts "$(nvidia-smi -L | wc -l)" --epoch --json "$OUT/dist_hosts.json" > "$OUT/dist_hosts.log" 2>&1; tail -12 "$OUT/dist_hosts.log"
echo "== at $(( $(date +%s) - t0 )) s: NCCL tests of the distributed features"
timeout "$(left 100)" python3 -m pytest -q -p no:cacheprovider tests/python/test_dist.py -k nccl > "$OUT/pytest_dist_nccl.log" 2>&1; tail -3 "$OUT/pytest_dist_nccl.log"
echo "== at $(( $(date +%s) - t0 )) s: DDP scaling"
timeout "$(left 300)" python3 scripts/bench_e2e.py --scaling "1,2,$(nvidia-smi -L | wc -l)" --scaling-epochs 2 --json "$OUT/scaling.json" > "$OUT/scaling.log" 2>&1; tail -9 "$OUT/scaling.log"
tar -C "$OUT" -czf /tmp/logs.tgz --exclude=logs.tgz . && mv /tmp/logs.tgz "$OUT/logs.tgz"
echo "== done at $(( $(date +%s) - t0 )) s"
