"""The plot of a GPU-mode sampling batch before and after a change (docs/benchmarks.md):
GPU time a batch by kernel group (from two profiler traces of probe_sampling_batch.py,
summarized once into a JSON file), and sample()'s ms a batch in each interleaved round of
compare_sampler_capture.py (its JSON lines).

    python scripts/plot_sampling_batch.py --traces BEFORE.json AFTER.json --groups-out G.json
    python scripts/plot_sampling_batch.py --groups G.json --compare compare.log --out plot.png
"""
import argparse
import collections
import json

GROUPS = [("sample_rows", "sampling rows"), ("insert_neighbors", "inserting neighbors"),
          ("flag_first", "flagging first mentions"), ("number_and_relabel", "numbering, relabelling"),
          ("assign_new", "numbering, relabelling"), ("relabel_rows", "numbering, relabelling"),
          ("DeviceScan", "scans (CUB)"), ("plan_rows", "planning rows"),
          ("join_parts", "joining the outputs"), ("CatArray", "edge_index (stack)"),
          ("emset", "memsets"), ("insert_nodes", "seeds into the table"),
          ("number_nodes", "seeds into the table"), ("Memcpy", "copies")]


def kernel_groups(trace_path, batches=10):
    """Microseconds a batch by kernel group over a trace of `batches` profiled batches."""
    events = json.load(open(trace_path))["traceEvents"]
    total = collections.Counter()
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"):
            continue
        group = next((g for key, g in GROUPS if key in e["name"]), "other")
        total[group] += e["dur"] / batches
    return dict(total)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", nargs=2)
    parser.add_argument("--groups-out")
    parser.add_argument("--groups")
    parser.add_argument("--compare")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.traces:
        groups = {"before": kernel_groups(args.traces[0]), "after": kernel_groups(args.traces[1])}
        json.dump(groups, open(args.groups_out, "w"), indent=1)
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    groups = json.load(open(args.groups))
    rows = [json.loads(line[5:]) for line in open(args.compare) if line.startswith("JSON ")]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    names = sorted({k for side in groups.values() for k in side},
                   key=lambda k: -groups["before"].get(k, 0))
    bottoms = [0.0, 0.0]
    colors = plt.get_cmap("tab20").colors
    for index, name in enumerate(names):
        values = [groups[side].get(name, 0.0) for side in ("before", "after")]
        left.bar([0, 1], values, bottom=bottoms, label=name, width=0.6,
                 color=colors[(2 * index) % 20 + (index >= 10)])
        bottoms = [b + v for b, v in zip(bottoms, values)]
    left.set_xticks([0, 1], [f"before\n{bottoms[0]:.0f} us", f"after\n{bottoms[1]:.0f} us"])
    left.set_ylabel("GPU time a batch, us (profiled)")
    left.set_title("Where a batch's GPU time goes")
    left.set_xlim(-0.5, 2.9)  # room on the right for the legend
    left.legend(fontsize=7, loc="upper right")
    for mode, marker in (("GPU", "o"), ("UVA", "s")):
        for label, color in (("before", "tab:gray"), ("after", "tab:blue")):
            ms = [r[mode]["ms"] for r in rows if r["label"] == label]
            right.plot(range(1, len(ms) + 1), ms, marker=marker, color=color,
                       label=f"{mode} mode, {label}")
    right.axhline(0.30, color="tab:red", ls="--", lw=1, label="issue 28's target (0.30 ms, GPU)")
    right.set_xticks(range(1, max(len(rows) // 2, 1) + 1))
    right.set_xlabel("round (before and after in turn, each its own process)")
    right.set_ylabel("sample(), CPU seeds, ms a batch (median, synchronized)")
    right.set_title("GraphSageSampler.sample, [15, 10, 5], 1024 seeds")
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    fig.suptitle("GPU-mode sampling batch, products-like graph, NVIDIA H200, 2026-11-28")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
