"""Plot bench_e2e --model-streams runs: each prefetching row's epoch in its turn, grouped
by configuration, one panel a run, with the model alone run beside each epoch.

    python scripts/plot_model_streams.py RUN.json[:TITLE[:before]] ... --out PNG

``before`` marks a run made before SampleLoader's ``own_stream`` existed: its rows without
a suffix ran their steps on the default stream.

Needs matplotlib only (no torch), so it runs wherever the JSON files are."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

# A row name's suffix -> where its steps queued their kernels (bench_e2e --model-streams,
# and the --model-priorities of its first form, the same day).
SUFFIXES = {" on the default stream": "the default stream",
            " on a new stream": "a new stream", " model normal-priority": "a new stream",
            " on a high-priority stream": "a high-priority stream",
            " model high-priority": "a high-priority stream"}
COLORS = {"the loader's own stream": "C0", "the default stream": "C3",
          "a new stream": "C2", "a high-priority stream": "C1"}


def split_name(config: str, before: bool):
    """(configuration, where its steps ran) of a row's name."""
    for suffix, where in SUFFIXES.items():
        if config.endswith(suffix):
            return config[:-len(suffix)], where
    return config, "the default stream" if before else "the loader's own stream"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="bench_e2e JSON files, each optionally "
                                                "followed by :TITLE")
    parser.add_argument("--out", required=True, help="the PNG to write")
    args = parser.parse_args()
    runs = []
    for spec in args.runs:
        path, _, title = spec.partition(":")
        title, _, mark = title.partition(":")
        if mark not in ("", "before"):
            parser.error(f"{spec}: the third field may only be 'before', got {mark!r}")
        try:
            results = json.loads(Path(path).read_text())
            rows = results["rows"]
        except (OSError, ValueError, KeyError) as error:
            parser.error(f"{path}: not a bench_e2e --json file ({error})")
        runs.append((title or Path(path).stem, results, rows, mark == "before"))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(runs), figsize=(5.2 * len(runs), 5.0), squeeze=False)
    for ax, (title, results, rows, before) in zip(axes[0], runs):
        chosen = [row for row in rows if row["config"].startswith("prefetch")
                  and "alone" not in row["config"]]
        groups = list(dict.fromkeys(split_name(row["config"], before)[0] for row in chosen))
        x = 0.0
        ticks = []
        for group in groups:
            members = [row for row in chosen
                       if split_name(row["config"], before)[0] == group]
            start = x
            for row in members:
                where = split_name(row["config"], before)[1]
                ax.bar(x, row["epoch_s"], 0.8, color=COLORS[where],
                       label=where if where not in ax.get_legend_handles_labels()[1] else None)
                ax.text(x, row["epoch_s"], f"{row['epoch_s']:.2f}", ha="center",
                        va="bottom", fontsize=6)
                if row.get("model_alone_beside_s"):
                    ax.scatter([x], [row["model_alone_beside_s"]], marker="_", s=150,
                               color="black", zorder=3,
                               label="model alone beside that epoch"
                               if "model alone beside that epoch"
                               not in ax.get_legend_handles_labels()[1] else None)
                x += 1
            ticks.append(((start + x - 1) / 2, group.removeprefix("prefetch ")))
            x += 0.8
        ax.set_xticks([t for t, _ in ticks], [g for _, g in ticks], fontsize=7)
        ax.set_ylabel("seconds per epoch (bars in their turns, left to right)")
        ax.set_title(f"{title}\n{results.get('graph')}, {results.get('model', 'eager')}",
                     fontsize=8)
        ax.legend(fontsize=6, loc="lower center")
    devices = {results.get("device") for _, results, _, _ in runs}
    fig.suptitle("Where the loop's steps queue their kernels, beside the prefetching loader"
                 + (f", {devices.pop()}" if len(devices) == 1 else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
