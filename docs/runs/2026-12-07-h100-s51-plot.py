"""Draws docs/plots/2026-12-07-h100-s51-gpu-tests.png: each group of the fifty-first session's
H100 test calls (docs/runs/2026-12-07-h100-s51-{a,b}-*.log), its cases passed and skipped,
and the seconds pytest took. Groups cut by their deadline (no summary line) are left out.
Run from the repository root: python docs/runs/2026-12-07-h100-s51-plot.py"""
import re
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = []
for log in sorted(Path("docs/runs").glob("2026-12-07-h100-s51-[ab]-*.log")):
    summary = [line for line in log.read_text().splitlines() if re.search(r"\d+ passed", line)]
    if not summary:
        continue
    line = summary[-1]
    count = {k: int(n) for n, k in re.findall(r"(\d+) (passed|skipped|failed)", line)}
    seconds = float(re.search(r"in ([\d.]+)s", line).group(1))
    call, group = re.match(r"2026-12-07-h100-s51-([ab])-(.+)\.log", log.name).groups()
    rows.append((f"{group} (call {call.upper()})", count.get("passed", 0),
                 count.get("skipped", 0), count.get("failed", 0), seconds))

fig, (cases, time) = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
names = [r[0] for r in rows]
y = range(len(rows))
cases.barh(y, [r[1] for r in rows], color="tab:green", label="passed")
cases.barh(y, [r[2] for r in rows], left=[r[1] for r in rows], color="tab:gray",
           label="skipped (need two GPUs)")
cases.set_yticks(list(y), names)
cases.set_xlabel("test cases")
cases.legend(loc="upper right")
time.barh(y, [r[4] for r in rows], color="tab:blue")
time.set_xlabel("seconds (pytest's own count)")
fig.suptitle("Tests on one H100 80GB HBM3, 2026-12-07 (fifty-first session): none failed")
fig.tight_layout()
fig.savefig("docs/plots/2026-12-07-h100-s51-gpu-tests.png", dpi=110)
