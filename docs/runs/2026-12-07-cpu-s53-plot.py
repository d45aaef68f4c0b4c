"""The fifty-third session's slow CPU paths, before and after (docs/benchmarks.md, "The
fifty-third session"): python docs/runs/2026-12-07-cpu-s53-plot.py"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PATHS = [  # (path, input, seconds before, seconds after)
    ("weighted draws by prefix sums", "fanout 99,000\nof a hub of 100,000", 14.8, 0.126),
    ("bfs_order", "400,000 nodes in\n200,000 components", 2.39, 0.22),
    ("hetero sampling", "400 relations into\na one-node type", 0.256, 0.0218),
]
fig, ax = plt.subplots(figsize=(8, 4))
x = range(len(PATHS))
ax.bar([i - 0.2 for i in x], [p[2] for p in PATHS], 0.4, label="before")
ax.bar([i + 0.2 for i in x], [p[3] for p in PATHS], 0.4, label="after (same results)")
for i, (_, _, before, after) in enumerate(PATHS):
    ax.text(i - 0.2, before, f"{before:g} s", ha="center", va="bottom", fontsize=8)
    ax.text(i + 0.2, after, f"{after:g} s", ha="center", va="bottom", fontsize=8)
ax.set_xticks(list(x), [f"{p[0]}\n{p[1]}" for p in PATHS], fontsize=8)
ax.set_yscale("log")
ax.set_ylabel("seconds (log scale)")
ax.set_title("Slow CPU paths made linear (2-core CPU machine, 2026-12-07)")
ax.legend()
fig.tight_layout()
fig.savefig("docs/plots/2026-12-07-cpu-s53-slow-paths.png", dpi=110)
