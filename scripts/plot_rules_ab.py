"""Grouped bars of bench_sampling_rules.py runs side by side (ms per batch by mode and
variant), e.g. a library before and after a change, in the order the runs were made.

    python scripts/plot_rules_ab.py OUT.png "LABEL=RUN.json" ["LABEL=RUN.json" ...] \
        [--variants "uniform (sample_subgraph),weighted"]
"""
import argparse
import json


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("png")
    parser.add_argument("runs", nargs="+", help="LABEL=RUN.json")
    parser.add_argument("--variants", default="uniform (sample_subgraph),weighted,"
                                              "weighted (prefix sums)")
    args = parser.parse_args()
    import matplotlib  # (after the options: --help needs none)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [(spec.split("=", 1)[0], json.load(open(spec.split("=", 1)[1]))["rows"])
            for spec in args.runs]
    variants = args.variants.split(",")
    modes = list(dict.fromkeys(r["mode"] for _, rows in runs for r in rows))
    fig, axes = plt.subplots(1, len(modes), figsize=(5 * len(modes), 3.8), squeeze=False)
    width = 0.8 / len(runs)
    for ax, mode in zip(axes[0], modes):
        for k, (label, rows) in enumerate(runs):
            ms = [next((r["ms_per_batch"] for r in rows
                        if r["mode"] == mode and r["variant"] == v), 0.0) for v in variants]
            ax.bar([i + k * width for i in range(len(variants))], ms, width, label=label)
        ax.set_xticks([i + width * (len(runs) - 1) / 2 for i in range(len(variants))],
                      variants, rotation=15, fontsize=8)
        ax.set_title(f"{mode}: ms per batch (median)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)


if __name__ == "__main__":
    main()
