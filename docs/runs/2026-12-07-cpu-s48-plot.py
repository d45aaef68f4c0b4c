"""Draws docs/plots/2026-12-07-cpu-s48-faults-memory-http.png from the figures the
forty-eighth session recorded in docs/benchmarks.md (typed in: each panel's numbers are in
its table there). Run from the repository root."""
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(2, 2, figsize=(12, 8))
a = ax[0][0]
names = ["close with a fetch\nin flight (20 s timeout)", "dead peer\n(60 s timeout)"]
x = range(len(names))
a.bar([i - 0.2 for i in x], [20.2, 61.1], 0.4, label="before (fetch fails)", color="tab:red")
a.bar([i + 0.2 for i in x], [0.61, 25.2], 0.4, label="after", color="tab:green")
a.set_xticks(list(x)), a.set_xticklabels(names), a.set_ylabel("seconds"), a.legend()
a.set_title("RDMA faults, soft-RoCE guest")
a = ax[0][1]
graphs = ["medium\n(both directions)", "random directed\n16M, 2 parts", "random directed\n5M, 4 parts"]
x = range(3)
a.bar([i - 0.2 for i in x], [100, 294, 270], 0.4, label="bytes an input edge")
a.bar([i + 0.2 for i in x], [100, 147, 135], 0.4, label="bytes an adjacency entry")
a.axhline(110, color="tab:red", ls="--", label="old check (110 an input edge)")
a.axhline(150, color="tab:green", ls="--", label="new check (150 an entry)")
a.set_xticks(list(x)), a.set_xticklabels(graphs), a.set_ylabel("bytes above the input")
a.legend(fontsize=8), a.set_title("METIS peak memory (pymetis 2025.2.2)")
a = ax[1][0]
builds = ["HeteroCSRTopo", "HeteroCSRTopo\n+ edge times", "generate\n(CSR)", "generate\n(COO)"]
x = range(4)
a.bar([i - 0.27 for i in x], [244, 397, 587, 808], 0.27, label="output", color="gray")
a.bar(list(x), [1532, 1838, 1759, 1815], 0.27, label="peak before", color="tab:red")
a.bar([i + 0.27 for i in x], [646, 1258, 1247, 1347], 0.27, label="peak after", color="tab:green")
a.set_xticks(list(x)), a.set_xticklabels(builds), a.set_ylabel("MB above the process")
a.set_ylim(0, 2400), a.legend(loc="upper left", ncol=3)
a.set_title("Host memory peaks (20M edges / 1M nodes)")
a = ax[1][1]
a.plot([0, 1, 2], [1.225, 1.207, 1.254], "o-", label="httptools p50")
a.plot([0, 1, 2], [1.409, 1.338, 1.401], "s-", label="h11 p50")
a.set_xticks([0, 1, 2]), a.set_xlabel("turn"), a.set_ylabel("ms a request"), a.set_ylim(0, 1.6)
a.legend(loc="lower right"), a.set_title("uvicorn parsers, sequential POST /predict (CPU)")
fig.suptitle("Forty-eighth session, 2026-12-07, the 2-core CPU machine and its soft-RoCE guest")
fig.tight_layout()
fig.savefig("docs/plots/2026-12-07-cpu-s48-faults-memory-http.png", dpi=100)
