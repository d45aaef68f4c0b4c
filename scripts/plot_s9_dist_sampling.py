"""The plot of docs/benchmarks.md's ninth-session section (2026-11-27): partitioned sampling
over NCCL, ms a batch at each step of the change against the whole graph sampled on one GPU
in the same run, from the bench_dist_sampling.py logs under docs/runs. Run from the
repository root: python3 scripts/plot_s9_dist_sampling.py"""
import argparse
argparse.ArgumentParser(description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # --help; it takes no options
import re

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

R = "docs/runs/"
steps = [
    ("before: 4 exchanges a hop, tensor ops (2 H200, 11-26)", "2026-11-26-h200x2-reindex-dist_sampling_nccl.log", 2),
    ("a: slots, c10d, torch sort (2 H200)", "2026-11-27-2xh200-s9-a-slots-c10d-dist_sampling_nccl.log", 2),
    ("b: + grouping kernel (2 H200)", "2026-11-27-2xh200-s9-b-grouping-kernel-dist_sampling_nccl.log", 2),
    ("c: + NCCL driven directly (2 H200)", "2026-11-27-2xh200-s9-c-nccl-direct-dist_sampling_nccl.log", 2),
    ("d: + outputs left on the GPU (2 H200)", "2026-11-27-2xh200-s9-d-gpu-outputs-dist_sampling_nccl.log", 2),
    ("d on 4 H200: 2 parts", "2026-11-27-4xh200-s9-dist_sampling_nccl.log", 2),
    ("d on 4 H200: 4 parts", "2026-11-27-4xh200-s9-dist_sampling_nccl.log", 4),
]


def row(path, parts):
    """(ms a batch partitioned, ms on one GPU) of the random-partition row for `parts`."""
    for line in open(R + path):
        fields = line.split()
        if len(fields) > 10 and fields[0] == str(parts) and fields[1] == "random" and \
                re.fullmatch(r"[0-9.]+", fields[-1]):
            lanes = 1 if len(fields) == 18 else 0  # the later logs have a lanes column
            return float(fields[4 + lanes]), float(fields[-2])
    raise ValueError(f"no {parts}-part random row in {path}")


values = [row(path, parts) for _, path, parts in steps]
fig, ax = plt.subplots(figsize=(10, 4.8))
ys = range(len(steps))
ax.barh([y - 0.2 for y in ys], [d for d, _ in values], 0.4, color="#3b75af",
        label="partitioned, one process a GPU (NCCL)")
ax.barh([y + 0.2 for y in ys], [g for _, g in values], 0.4, color="#999",
        label="whole graph on one GPU, same seeds, same run")
for y, (d, g) in zip(ys, values):
    ax.text(d + 0.08, y - 0.2, f"{d:.2f} ms ({d / g:.1f}x)", va="center", fontsize=8)
ax.set_yticks(list(ys), [s for s, _, _ in steps], fontsize=8)
ax.invert_yaxis()
ax.set_xlim(0, 9.5)
ax.set_xlabel("ms per batch (median)")
ax.set_title("Partitioned sampling over NCCL: products-like graph, random parts, [15, 10, 5], "
             "1024 seeds", fontsize=10)
ax.legend(fontsize=8, loc="center right")
fig.tight_layout()
fig.savefig("docs/plots/2026-11-27-h200-s9-dist-sampling.png", dpi=110)
print("\n".join(f"{s}: {d:.2f} / {g:.2f} ms = {d / g:.2f}x" for (s, _, _), (d, g) in zip(steps, values)))
