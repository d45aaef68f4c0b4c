"""Draws scripts/bench_link.py's JSON as a bar chart of epoch seconds per configuration.

    python scripts/plot_bench_link.py RUN.json OUT.png      (needs matplotlib)
"""
import argparse
import json


def main(source: str, target: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = json.load(open(source))
    labels = [r["config"].replace(": ", "\n") for r in rows]
    seconds = [r["epoch_s"] for r in rows]
    colors = ["tab:blue" if "Prefetcher" in r["config"] else
              "tab:gray" if "alone" in r["config"] else "tab:orange" for r in rows]
    fig, ax = plt.subplots(figsize=(9, 4))
    bars = ax.bar(range(len(rows)), seconds, color=colors)
    for bar, r in zip(bars, rows):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(),
                f"{r['epoch_s']:.2f} s\n{r['ratio_to_model_alone']:.2f}x", ha="center",
                va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("epoch, s (1M seed edges)")
    ax.set_ylim(0, max(seconds) * 1.25)
    ax.set_title("Link prediction on the products-like graph: our loader beside the model alone")
    fig.tight_layout()
    fig.savefig(target, dpi=110)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="the JSON that scripts/bench_link.py --json wrote")
    parser.add_argument("png", help="where to write the chart")
    args = parser.parse_args()
    main(args.run, args.png)
