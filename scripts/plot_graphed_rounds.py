"""Plots scripts/probe_epoch_overlap.py --graphed-rounds: ms per batch of each round's model
alone and prefetching loop, the step eager and replayed as a CUDA graph (GraphedStep), one
panel per graph and cache (the JSON line each probe prints last, read from its log).

    python scripts/plot_graphed_rounds.py LOG [LOG ...] --out PNG [--title TEXT]
"""
import argparse
import json
import re
from pathlib import Path


SERIES = [("eager model alone", "k--"), ("eager prefetching loop", "ko-"),
          ("graphed model alone", "C1--"), ("graphed prefetching loop", "C1s-")]


def panels_of(log: Path) -> dict:
    """{(graph, cache): {round: {series: ms}}} from one probe's log."""
    result = json.loads([line for line in log.read_text().splitlines()
                         if line.startswith("{")][-1])
    panels = {}
    for row in result["rows"]:
        match = re.match(r"round (\d+): (.*)", row["what"])
        if match:
            panel = panels.setdefault((result["graph"], row["cache"]), {})
            panel.setdefault(int(match.group(1)), {})[match.group(2)] = row["ms_per_batch"]
    return panels


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("logs", type=Path, nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    import matplotlib  # (after the options: --help needs none)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = {}
    for log in args.logs:
        panels.update(panels_of(log))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), squeeze=False)
    for ax, ((graph, cache), rounds) in zip(axes[0], panels.items()):
        ks = sorted(rounds)
        for name, style in SERIES:
            ax.plot(ks, [rounds[k].get(name, float("nan")) for k in ks], style, label=name)
        ax.set_title(f"{graph}, {'every row in HBM' if cache == 'HBM' else cache + ' cache'}")
        ax.set_xlabel("round (eager first in even rounds)")
        ax.set_ylabel("ms per batch")
        ax.set_xticks(ks)
        ax.grid(alpha=0.3)
        for k in ks:
            print(f"{graph} {cache} round {k}: " + ", ".join(
                f"{name} {rounds[k][name]:.3f}" for name, _ in SERIES if name in rounds[k]))
    axes[0][0].legend(fontsize=8)
    fig.suptitle(args.title or "the training step eager and as one CUDA graph, alone and "
                               "beside the prefetching loader")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
