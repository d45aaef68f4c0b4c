"""Plots scripts/probe_epoch_overlap.py --ab-rounds: ms per batch of each round's model alone
and its prefetching loop with the Python thread and with the C++ thread (the JSON line the
probe prints last, read from its log).

    python scripts/plot_ab_rounds.py LOG --out PNG [--title TEXT]
"""
import argparse
import json
import re
from pathlib import Path


def rounds_of(log: Path) -> dict:
    """{round: {"model alone": ms, "Python": ms, "C++": ms, "first": thread}} from the log."""
    result = json.loads([line for line in log.read_text().splitlines()
                         if line.startswith("{")][-1])
    rounds = {}
    for row in result["rows"]:
        match = re.match(r"round (\d+): (.*)", row["what"])
        if not match:
            continue
        k, what = int(match.group(1)), match.group(2)
        entry = rounds.setdefault(k, {})
        if what == "model alone":
            entry["model alone"] = row["ms_per_batch"]
        else:
            thread = "Python" if "Python thread" in what else "C++"
            entry.setdefault("first", thread)
            entry[thread] = row["ms_per_batch"]
    return rounds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--out", required=True)
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    import matplotlib  # (after the options: --help needs none)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rounds = rounds_of(args.log)
    ks = sorted(rounds)
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, style in (("model alone", "k--"), ("Python", "o-"), ("C++", "s-")):
        ax.plot(ks, [rounds[k][name] for k in ks], style, label=name)
    for k in ks:
        ax.annotate(f"{rounds[k]['first']} first", (k, max(rounds[k]["Python"], rounds[k]["C++"])),
                    textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    ax.set_xlabel("round")
    ax.set_ylabel("ms per batch")
    ax.set_title(args.title or "prefetching loop with the model: Python vs C++ loader thread")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    for k in ks:
        r = rounds[k]
        print(f"round {k} ({r['first']} first): model alone {r['model alone']:.3f}, Python "
              f"{r['Python']:.3f}, C++ {r['C++']:.3f} ms/batch")


if __name__ == "__main__":
    main()
