"""The forty-ninth session's plot: row gathers by bulk copies (TMA) against the library's
kernel shape on an H100, from docs/runs/2026-12-07-h100-s49-6-gather-variants.log.

    python docs/runs/2026-12-07-h100-s49-plot.py
"""
import re
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RUNS = Path(__file__).parent
log = (RUNS / "2026-12-07-h100-s49-6-gather-variants.log").read_text()
copy = float(re.search(r"d2d copy: ([\d.]+) GB/s output", log)[1])
rows = re.findall(r"^(2d R=\d threads=\d+|2d hints R=\d threads=\d+|flat R=\d threads=\d+|"
                  r"tma stages=\d warps=\d) .*?([\d.]+) GB/s in stream", log, re.M)
names = [name for name, _ in rows]
rates = [float(rate) for _, rate in rows]
colors = ["tab:orange" if n.startswith("tma") else
          "tab:blue" if n == "2d R=4 threads=256" else "tab:gray" for n in names]
fig, ax = plt.subplots(figsize=(9, 6.5))
ax.barh(range(len(rates)), rates, color=colors)
ax.set_yticks(range(len(rates)), names, fontsize=8)
ax.invert_yaxis()
ax.axvline(copy, color="k", ls="--", lw=1)
ax.text(copy, len(rates) - 0.5, f" device copy\n {copy:.0f} GB/s", va="bottom", fontsize=8)
ax.axvline(1300, color="tab:red", ls=":", lw=1)
ax.text(1300, -0.8, "issue 28: 1,300 per call", color="tab:red", fontsize=8, ha="center")
ax.set_xlim(900, 1600)
ax.set_xlabel("GB/s of output (400-byte rows, 430,000 random ids a batch, in stream)")
ax.set_title("Row gathers on an H100: the library's shape (blue), other shapes (gray),\n"
             "Hopper bulk copies through shared memory (orange)", fontsize=10)
fig.tight_layout()
out = RUNS.parent / "plots" / "2026-12-07-h100-s49-gather-bulk-copies.png"
fig.savefig(out, dpi=110)
print(out)
