"""DDP scaling from several runs of ``bench_e2e.py --scaling``, in one plot: a panel per cache
policy, each run's speed-up over its own one-GPU epoch against the GPU count, with the
ideal line and issue 29's targets for the clique. Run from the repository root, a run given
as LABEL=JSON (paths under docs/runs/); a run of several --scaling-variants draws a line
for each:

    python3 scripts/plot_scaling_runs.py --out docs/plots/X.png \\
        "s7=2026-11-26-4xh200-s7-scaling-after.json" "s16=2026-11-28-4xh200-s16-ddp-scaling.json"
"""
import argparse
import json


R = "docs/runs/"
POLICIES = ("device_replicate", "p2p_clique_replicate")
TARGETS = {2: 1.9, 4: 3.6}  # issue 29, with the clique


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="LABEL=JSON under docs/runs/")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import matplotlib  # (after the options: --help needs none)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(POLICIES), figsize=(11, 4.2), sharey=True)
    most = 1
    for run in args.runs:
        name, path = run.split("=", 1)
        runs = json.load(open(R + path))["scaling"]["runs"]
        for step in dict.fromkeys(r.get("step", "plain") for r in runs):
            of_step = [r for r in runs if r.get("step", "plain") == step]
            one = next(r["epoch_s"] for r in of_step if r["gpus"] == 1)
            label = name if step == "plain" else f"{name}, {step}"
            for ax, policy in zip(axes, POLICIES):
                points = [(1, 1.0)] + sorted((r["gpus"], one / r["epoch_s"]) for r in of_step
                                             if r["policy"] == policy and r["gpus"] > 1)
                most = max(most, max(g for g, _ in points))
                ax.plot(*zip(*points), marker="o", label=label)
    for ax, policy in zip(axes, POLICIES):
        ax.plot([1, most], [1, most], color="#999", linestyle=":", label="ideal")
        if policy == "p2p_clique_replicate":
            ax.scatter(list(TARGETS), list(TARGETS.values()), marker="_", s=400, color="red",
                       zorder=5, label="issue 29's target")
        ax.set_title(policy)
        ax.set_xlabel("GPUs (torchrun, one process each)")
        ax.set_xticks(range(1, most + 1))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("epoch speed-up over one GPU, same run")
    axes[-1].legend(fontsize=8, loc="upper left")
    fig.suptitle("GraphSAGE epoch on the products-like graph, GPU sampling, 20% cache per GPU "
                 "(examples/train_sage.py)", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
