"""The two plots of docs/benchmarks.md's eighth-session sections (2026-11-27), from the
JSON logs under docs/runs: DistFeature before/after the transport split on two H200s, and
the H100 feature gather with its host-read options set on FeatureTiers. Run from the
repository root: python3 scripts/plot_s8_checks.py"""
import argparse
argparse.ArgumentParser(description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # --help; it takes no options
import json
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

R = "docs/runs/2026-11-27-"
# 1. Transport split: before/after, two rounds each, with the send/recv bound.
rows = [("NCCL, HBM tables", "nccl_remote_hbm_gbps"), ("NCCL, HBM, c10d all-to-all", "nccl_c10d_remote_hbm_gbps"),
        ("NCCL, 20% cached", "nccl_remote_gbps"), ("whole batches (NCCL)", "nccl_batch_gbps")]
runs = [("before, round 1", "old1"), ("after, round 1", "new1"), ("before, round 2", "old2"), ("after, round 2", "new2")]
data = {tag: json.load(open(f"{R}2xh200-s8-bench_dist_{tag}.json")) for _, tag in runs}
fig, ax = plt.subplots(figsize=(9, 4.5))
width = 0.2
for j, (label, tag) in enumerate(runs):
    xs = [i + (j - 1.5) * width for i in range(len(rows))]
    ax.bar(xs, [data[tag][key] for _, key in rows], width, label=label,
           color=["#9ecae1", "#3182bd", "#fdae6b", "#e6550d"][j])
bound = sum(data[t]["nccl_sendrecv_gbps"] for _, t in runs) / len(runs)
ax.axhline(bound, color="k", ls="--", lw=1, label=f"NCCL send/recv bound (mean of the runs, {bound:.0f} GB/s)")
ax.set_xticks(range(len(rows)))
ax.set_xticklabels([r for r, _ in rows])
ax.set_ylabel("GB/s of remote rows per host")
ax.set_title("DistFeature on 2 H200s: transport before (5efe5b4) and after the split, in turn")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig("docs/plots/2026-11-27-2xh200-s8-transport-split.png", dpi=110)

# 2. Schema options moved into objects: the H100 gather per call and in the kernel.
feat = json.load(open(f"{R}h100-s8-bench_feature.json"))
rows = feat["rows"] if isinstance(feat, dict) and "rows" in feat else feat
wanted = ["HBM", "HBM, degree order", "host, id order", "host, staged",
          "cache by degree, id order", "cache by degree, staged"]
got = {r["config"]: r for r in rows}
rows = [got[w] for w in wanted if w in got]
fig, ax = plt.subplots(figsize=(9, 4.5))
xs = range(len(rows))
ax.bar([x - 0.2 for x in xs], [r["gbps"] for r in rows], 0.4, label="per call", color="#3182bd")
ax.bar([x + 0.2 for x in xs], [r["kernel_gbps"] for r in rows], 0.4, label="in the kernel", color="#9ecae1")
hbm = got["HBM"]
ax.axhline(hbm["bound"], color="k", ls="--", lw=1, label=f"{hbm['bound_name']} bound ({hbm['bound']:.0f})")
ax.axhline(hbm["baseline"], color="#e6550d", ls=":", lw=1.5,
           label=f"{hbm['baseline_name']} ({hbm['baseline']:.0f})")
ax.set_yscale("log")
ax.set_xticks(list(xs))
ax.set_xticklabels([r["config"] for r in rows], rotation=15, fontsize=8)
ax.set_ylabel("GB/s of gathered 400-byte rows (log)")
ax.set_title("H100, options on FeatureTiers (id order, staged set on the object): bench_feature.py")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig("docs/plots/2026-11-27-h100-s8-bench_feature.png", dpi=110)
