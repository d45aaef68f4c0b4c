"""The plot of docs/benchmarks.md's tenth-session section (2026-11-27): partitioned sampling
over NCCL in slots sized by bounds (replayed as CUDA graphs, or launched as usual) against
exact counts first and against the whole graph sampled on one GPU, each run's rows from the
same run, from the bench_dist_sampling.py JSONs under docs/runs. Run from the repository
root: python3 scripts/plot_s10_dist_sampling.py"""
import json

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

R = "docs/runs/"
runs = [("2 H100", "2026-11-27-2xh100-s10-b-graphs-dist_sampling_nccl.json"),
        ("4 H100, run c", "2026-11-27-4xh100-s10-c-dist_sampling_nccl.json"),
        ("4 H100, run d", "2026-11-27-4xh100-s10-d-dist_sampling_nccl.json")]
kinds = [("exact", "exact counts first (3 waits a hop)", "#bbb"),
         ("launched", "bounded slots, launched", "#8fb3d9"),
         ("bounded", "bounded slots, replayed CUDA graph", "#3b75af")]
groups = []  # (label, {slots: ms}, one GPU ms)
for name, path in runs:
    rows = json.load(open(R + path))["rows"]
    for parts in sorted({r["parts"] for r in rows}):
        chosen = [r for r in rows if r["parts"] == parts]
        groups.append((f"{name}: {parts} parts", {r["slots"]: r["dist_ms"] for r in chosen},
                       chosen[0]["single_ms_gpu"]))
fig, ax = plt.subplots(figsize=(10, 5.6))
height = 0.2
for g, (label, ms, one) in enumerate(groups):
    ax.barh(g - 1.5 * height, one, height, color="#666", label="whole graph on one GPU" if g == 0 else None)
    for k, (slots, text, color) in enumerate(kinds):
        if slots in ms:
            y = g + (k - 0.5) * height
            ax.barh(y, ms[slots], height, color=color, label=text if g == 0 else None)
            ax.text(ms[slots] + 0.02, y, f"{ms[slots]:.2f} ({ms[slots] / one:.1f}x)", va="center",
                    fontsize=7)
ax.axvline(0, color="k", lw=0.5)
ax.set_yticks(range(len(groups)), [label for label, _, _ in groups], fontsize=8)
ax.invert_yaxis()
ax.set_xlabel("ms per batch (median of the hosts' medians)")
ax.set_title("Partitioned sampling over NCCL, a GPU a host: products-like graph, random parts, "
             "[15, 10, 5], 1024 seeds", fontsize=10)
ax.set_xlim(0, 2.1)
ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
fig.tight_layout()
fig.savefig("docs/plots/2026-11-27-h100-s10-dist-sampling.png", dpi=110)
for label, ms, one in groups:
    print(label, {k: f"{v:.2f} ({v / one:.2f}x)" for k, v in ms.items()}, f"1 GPU {one:.2f}")
