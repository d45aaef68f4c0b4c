"""The plot of docs/benchmarks.md's "Gloo lanes only for blocks worth splitting": ms per fetch
against ids per fetch, before and after, from docs/runs/2026-12-05-cpu-s37-gloo-lane-parts.log.
Run from the repository root with matplotlib installed."""
import argparse
argparse.ArgumentParser(description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # --help; it takes no options
import re
import matplotlib; matplotlib.use("Agg")
import matplotlib.pyplot as plt
log = open("docs/runs/2026-12-05-cpu-s37-gloo-lane-parts.log").read()
rows = {}
ids = None
for line in log.splitlines():
    m = re.match(r"== ids (\d+)", line)
    if m: ids = int(m[1]); continue
    m = re.match(r"\| (\d) \| \S+/(base|new_lanes)\.so \| ([\d,]+) \|", line)
    if m: rows.setdefault((m[2], ids), []).append(int(m[3].replace(",", "")) / 1000)
fig, ax = plt.subplots(figsize=(6, 4))
for lib, label in (("base", "before: one part per lane"), ("new_lanes", "now: one part per 512 KiB")):
    xs = sorted(i for (l, i) in rows if l == lib)
    for turn in (0, 1):
        ax.plot(xs, [rows[(lib, x)][turn] for x in xs], "o-" if lib == "base" else "s-",
                color="tab:red" if lib == "base" else "tab:blue", alpha=1 if turn == 0 else 0.5,
                label=label if turn == 0 else None)
ax.set_xscale("log"); ax.set_yscale("log")
ax.set_xlabel("ids a fetch (about half owned by the other host)")
ax.set_ylabel("ms per fetch (median of 5 rounds; two turns)")
ax.set_title("DistFeature over Gloo, 8 lanes, 2 hosts, 2-core machine", fontsize=10)
ax.legend(); ax.grid(True, which="both", alpha=0.3)
fig.tight_layout(); fig.savefig("docs/plots/2026-12-05-s37-gloo-lane-parts.png", dpi=110)

