"""Plots examples/cpp/train_sage --load-rates logs: for each log, p50 and p99 latency against
the offered rate per configuration (the 30 ms objective drawn across), and the rate answered.

    python scripts/plot_serve_cpp_load.py OUT.png "title one=run1.log" "title two=a.log+b.log"

Each title should name the machine the run had; logs joined by "+" share a column. Where the
logs have the senders' lateness (from 2026-12-02), its 99th percentile is drawn dotted: a
latency that follows it was spent before the request reached the runtime.
"""
from __future__ import annotations

import argparse
import re

# The logs of 2026-11-28's twelfth session end at seeds/batch; later ones add the caching
# allocator's mallocs and retries, and from 2026-12-02 a batch's mean ms in three parts and
# the senders' lateness.
ROW = re.compile(r"^(cpu|gpu2|gpu|dispatch)\s+(\d+)\s+([0-9.]+)\s+(\d+)\s+(\d+)\s+([0-9.]+)\s+"
                 r"([0-9.]+)\s+([0-9.]+)\s+(\d+)\s+(\d+)\s+([0-9.]+)(\s+\d+\s+\d+)?"
                 r"((?:\s+[0-9.]+){5})?\s*$")


def read_rows(path: str) -> dict:
    """config -> list of (offered, answered/s, refused, p50 ms, p99 ms, senders' late p99 ms or
    None), in the logs' order; `path` may join several logs with "+"."""
    rows: dict = {}
    for one in path.split("+"):
        with open(one) as log:
            for line in log:
                match = ROW.match(line.strip())
                if match:
                    config, offered, answered, refused = match.group(1), *map(float, match.groups()[1:4])
                    p50, p99 = float(match.group(6)), float(match.group(7))
                    late99 = float(match.group(13).split()[4]) if match.group(13) else None
                    rows.setdefault(config, []).append((offered, answered, refused, p50, p99, late99))
    return rows


def main(argv):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out, runs = argv[0], [item.split("=", 1) for item in argv[1:]]
    fig, axes = plt.subplots(2, len(runs), figsize=(5 * len(runs), 8), squeeze=False)
    colors = {"gpu": "C0", "dispatch": "C2", "cpu": "C3", "gpu2": "C4"}
    for column, (title, path) in enumerate(runs):
        rows = read_rows(path)
        latency, answered = axes[0][column], axes[1][column]
        for config, points in rows.items():
            offered = [p[0] for p in points]
            latency.plot(offered, [p[4] for p in points], "o-", color=colors[config],
                         label=f"{config} p99")
            latency.plot(offered, [p[3] for p in points], "x--", color=colors[config],
                         alpha=0.6, label=f"{config} p50")
            if all(p[5] is not None for p in points):
                latency.plot(offered, [max(p[5], 0.01) for p in points], ":", color=colors[config],
                             label=f"{config} senders' late p99")
            answered.plot(offered, [p[1] for p in points], "o-", color=colors[config],
                          label=config)
        latency.axhline(30, color="grey", linestyle=":", label="30 ms objective")
        latency.set_yscale("log")
        latency.set_title(title, fontsize=10)
        latency.set_xlabel("offered requests/s")
        latency.set_ylabel("latency, ms")
        latency.legend(fontsize=7)
        top = max(p[0] for points in rows.values() for p in points)
        answered.plot([0, top], [0, top], color="grey", linestyle=":", label="all answered")
        answered.set_xlabel("offered requests/s")
        answered.set_ylabel("answered requests/s")
        answered.legend(fontsize=7)
    fig.suptitle("ServingRuntime under open-loop load, no Python (examples/cpp/train_sage "
                 "--load-rates), products-like graph, [15, 10, 5]")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote", out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("png", help="where to write the plot")
    parser.add_argument("runs", nargs="+", metavar="TITLE=LOG[+LOG...]",
                        help="a column's title and its train_sage --load-rates log(s)")
    args = parser.parse_args()
    main([args.png, *args.runs])
