"""The plot of docs/benchmarks.md's "Gloo lanes on the 16-core host" (2026-12-05, H100 host):
us per fetch against ids per fetch, 1 lane against 8, from the two runs' logs
(docs/runs/2026-12-05-h100-s38-b-faults-lanes.log and -c-dist-sampler-lanes.log). Run from
the repository root with matplotlib installed."""
import argparse
argparse.ArgumentParser(description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # --help; it takes no options
import re
import matplotlib; matplotlib.use("Agg")
import matplotlib.pyplot as plt
points = {}  # lanes -> [(ids, us)]
for name in ("b-faults-lanes", "c-dist-sampler-lanes"):
    lanes_ids = None
    for line in open(f"docs/runs/2026-12-05-h100-s38-{name}.log"):
        m = re.match(r"ids=(\d+) lanes=(\d+)", line)
        if m:
            lanes_ids = (int(m[2]), int(m[1]))
            continue
        m = re.match(r"\| 1 \| installed \| ([\d,]+) \|", line)
        if m and lanes_ids:
            points.setdefault(lanes_ids[0], []).append((lanes_ids[1], int(m[1].replace(",", ""))))
fig, ax = plt.subplots(figsize=(6, 4))
for lanes, style in ((1, "o"), (8, "s")):
    xs, ys = zip(*sorted(points[lanes]))
    ax.plot(xs, ys, style, label=f"{lanes} lane{'s' if lanes > 1 else ''} (each run)")
ax.set_xscale("log"); ax.set_yscale("log")
ax.set_xlabel("ids a fetch (about half owned by the other host; 128-byte rows)")
ax.set_ylabel("us per fetch (median of 5 rounds)")
ax.set_title("DistFeature over Gloo, 2 processes, H100 host (16 cores)", fontsize=10)
ax.legend(); ax.grid(True, which="both", alpha=0.3)
fig.tight_layout(); fig.savefig("docs/plots/2026-12-05-s38-gloo-lanes-16-cores.png", dpi=110)
