"""Partitioned sampling over NCCL from several runs of bench_dist_sampling.py, in one plot:
each run's ms a batch per way the hops travel (--slots) beside the whole graph sampled on
one GPU in the same run, each bar labelled with its ratio to that run's one GPU. Run from
the repository root, a run given as LABEL=JSON (paths under docs/runs/):

    python3 scripts/plot_dist_sampling_runs.py --out docs/plots/X.png \\
        "2 H100=2026-11-27-2xh100-s10-b-graphs-dist_sampling_nccl.json" ...

The tenth session's plot (docs/plots/2026-11-27-h100-s10-dist-sampling.png) is
``--kinds exact,launched,bounded --xmax 2.1`` over its three runs (docs/benchmarks.md).
"""
import argparse
import json


R = "docs/runs/"
KINDS = {"exact": ("exact counts first (3 waits a hop)", "#bbb"),
         "launched": ("fixed blocks, launched", "#8fb3d9"),
         "bounded": ("blocks of the bounds, replayed CUDA graph", "#3b75af"),
         "seen": ("blocks sized by what was seen, replayed", "#d9822b")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="LABEL=JSON under docs/runs/")
    parser.add_argument("--kinds", default="exact,bounded,seen")
    parser.add_argument("--out", required=True)
    parser.add_argument("--xmax", type=float, default=2.1)
    args = parser.parse_args()
    import matplotlib  # (after the options: --help needs none)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    kinds = args.kinds.split(",")
    groups = []  # (label, {slots: ms}, one GPU ms)
    for run in args.runs:
        name, path = run.split("=", 1)
        rows = json.load(open(R + path))["rows"]
        for parts in sorted({r["parts"] for r in rows}):
            chosen = [r for r in rows if r["parts"] == parts]
            groups.append((f"{name}: {parts} parts", {r["slots"]: r["dist_ms"] for r in chosen},
                           chosen[0]["single_ms_gpu"]))
    fig, ax = plt.subplots(figsize=(10, 1.2 + 1.1 * len(groups)))
    height = 0.8 / (len(kinds) + 1)
    for g, (label, ms, one) in enumerate(groups):
        first = g - 0.4 + height / 2
        ax.barh(first, one, height, color="#666",
                label="whole graph on one GPU" if g == 0 else None)
        for k, slots in enumerate(kinds):
            if slots in ms:
                text, color = KINDS[slots]
                y = first + (k + 1) * height
                ax.barh(y, ms[slots], height, color=color, label=text if g == 0 else None)
                ax.text(ms[slots] + 0.02, y, f"{ms[slots]:.2f} ({ms[slots] / one:.1f}x)",
                        va="center", fontsize=7)
    ax.set_yticks(range(len(groups)), [label for label, _, _ in groups], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per batch (median of the hosts' medians)")
    ax.set_title("Partitioned sampling over NCCL, a GPU a host: products-like graph, random "
                 "parts, [15, 10, 5], 1024 seeds", fontsize=10)
    ax.set_xlim(0, args.xmax)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    for label, ms, one in groups:
        print(label, {k: f"{v:.2f} ({v / one:.2f}x)" for k, v in ms.items()}, f"1 GPU {one:.2f}")


if __name__ == "__main__":
    main()
