#!/usr/bin/env bash
# Owed GPU runs (s52-s55): groups of pytest runs with the prebuilt library.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${BUDGET:-560}; start=$SECONDS
xz -dc .device/pack/new.so.xz > /tmp/new.so
export TORCH_QUIVER_OPS_LIBRARY=/tmp/new.so PYTHONPATH=$PWD CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch_quiver_ops as q; print("CUDA kernels:", q.cuda_kernels_built())'
group() {  # name timeout kexpr files...
  local name=$1 cap=$2 k=$3; shift 3
  local left=$((BUDGET - (SECONDS - start)))
  [ $left -lt 20 ] && { echo "SKIPPED $name (budget)"; return; }
  [ $cap -gt $left ] && cap=$left
  local t0=$SECONDS files=()
  for f in "$@"; do files+=("tests/python/$f"); done
  timeout -s INT $cap python3 -m pytest -q -p no:cacheprovider "${files[@]}" -k "not rdma and ($k)" \
    > "$OUT/$name.log" 2>&1
  echo "== $name rc=$? $((SECONDS - t0)) s: $(tail -n 1 "$OUT/$name.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/$name.log" | head -20
}
for g in ${GROUPS_TO_RUN:-this_session hetero late_fixes serving device_topology}; do
  case $g in
    this_session) group this_session 150 "many_picks or subnormal or normal_range or wrong_kind or one_hosts_own or sums or bfs" \
        test_neighbor_sample.py test_sampler.py test_dist_sampler.py test_reorder.py test_pyg_rules.py ;;
    hetero) group hetero 150 "not slow_never_matches" test_hetero.py test_pyg_hetero.py test_synthetic_hetero.py ;;
    late_fixes) group late_fixes 200 "not slow_never_matches" test_pyg.py test_uva.py test_feature.py test_fuzz.py ;;
    serving) group serving 120 "nan or answer or health or closing or ipv6 or trace" test_serving.py ;;
    device_topology) group device_topology 120 "not slow_never_matches" test_device.py test_topology.py test_partition.py ;;
    bench)
      xz -dc .device/pack/old.so.xz > /tmp/old.so
      for lib in old new; do
        echo "== bench_weighted_hubs ($lib library)"
        TORCH_QUIVER_OPS_LIBRARY=/tmp/$lib.so timeout 150 python3 scripts/bench_weighted_hubs.py \
          --fanouts ${FANOUTS:-64,1000,5000,20000} --json "$OUT/hubs-$lib.json" 2>&1 | tee "$OUT/hubs-$lib.log"
      done
      python3 scripts/bench_weighted_hubs.py --compare "$OUT/hubs-old.json" "$OUT/hubs-new.json" | tee "$OUT/hubs-compare.log" ;;
    relrows)
      xz -dc .device/pack/old.so.xz > /tmp/old.so
      for lib in old new; do
        echo "== bench_relation_rows ($lib library)"
        TORCH_QUIVER_OPS_LIBRARY=/tmp/$lib.so timeout 150 python3 scripts/bench_relation_rows.py \
          --json "$OUT/relrows-$lib.json" 2>&1 | tee "$OUT/relrows-$lib.log"
      done
      python3 scripts/bench_relation_rows.py --compare "$OUT/relrows-old.json" "$OUT/relrows-new.json" ;;
    mag)
      xz -dc .device/pack/old.so.xz > /tmp/old.so
      for lib in old new; do
        echo "== bench_hetero --scale ${MAG_SCALE:-0.25} ($lib library)"
        TORCH_QUIVER_OPS_LIBRARY=/tmp/$lib.so timeout 200 python3 scripts/bench_hetero.py \
          --scale ${MAG_SCALE:-0.25} --batches 20 --cpu-batches 2 --json "$OUT/mag-$lib.json" \
          > "$OUT/mag-$lib.log" 2>&1
        grep -E "^\||ms|Medges" "$OUT/mag-$lib.log" | tail -20
      done ;;
    uniform) group uniform 200 "not slow_never_matches" test_sample_neighbors.py test_neighbor_sample.py test_sampler.py test_sample_subgraph.py ;;
    weighted) group weighted 240 "weight or sums or successive or cumsum" test_neighbor_sample.py test_pyg_rules.py test_sampler.py test_hetero.py test_sample_neighbors.py test_pyg.py ;;
    dist) group dist 200 "not slow_never_matches" test_dist_sampler.py ;;
    gtest)
      xz -dc .device/pack/quiver_tests.xz > /tmp/quiver_tests && chmod +x /tmp/quiver_tests
      cp /tmp/new.so /tmp/libtorch_quiver_ops.so
      tl=$(python3 -c 'import torch,os,glob; d=os.path.dirname(torch.__file__); print(":".join([d+"/lib"]+glob.glob(os.path.dirname(d)+"/nvidia/*/lib")+glob.glob(os.path.dirname(d)+"/nvidia/cu*/lib")))')
      LD_LIBRARY_PATH=/tmp:$tl:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} timeout 120 /tmp/quiver_tests > "$OUT/gtest.log" 2>&1
      echo "== gtest rc=$?: $(grep -E 'PASSED|FAILED' "$OUT/gtest.log" | tail -3 | tr '\n' ' ')" ;;
  esac
done
echo "total $((SECONDS - start)) s"
