"""Draw docs/benchmarks.png from the figures in docs/benchmarks.md (the medians of the runs recorded there).

    python docs/benchmarks_chart.py
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OUT = Path(__file__).with_name("benchmarks.png")

# Input pipeline, images/s (median of 5 alternating runs) and the spread.
PIPELINE = [("old, PNGs", 117, 115, 118), ("new, PNGs", 235, 230, 238), ("PNG limit", 248, 243, 252),
            ("new, JPEG records", 2976, 2819, 3016), ("JPEG limit", 6542, 6500, 6609)]
# Spawn, seconds from the form to JupyterLab (medians, N=10), by segment: ours, stock.
SPAWN = {"queue": (0.69, 0.60), "server start": (1.12, 2.01), "hub ready": (0.03, 0.69), "other": (0.16, 0.11)}
# Dashboard, 200 users: p50 and p99 in ms by request.
DASHBOARD = [("api/jobs", 10.3, 78.7), ("jobs page", 2.8, 20.6), ("submit", 111.1, 265.1), ("cancel", 45.8, 130.7)]
# Liveness, seconds: measured median and target.
LIVENESS = [("submit -> first\nimages/sec", 45.1, 60), ("event -> visible", 3.6, 10)]


def main() -> None:
    fig, ((ax1, ax2), (ax3, ax4)) = plt.subplots(2, 2, figsize=(12, 8))
    names = [p[0] for p in PIPELINE]
    medians = [p[1] for p in PIPELINE]
    errors = [[p[1] - p[2] for p in PIPELINE], [p[3] - p[1] for p in PIPELINE]]
    ax1.barh(names, medians, xerr=errors, color=["#bbb", "#6a9", "#999", "#2a7", "#777"])
    ax1.axvline(2000, color="red", linestyle="--", label="target 2,000 images/s")
    ax1.set_xscale("log")
    ax1.set_xlabel("images/s delivered (2 cores, log scale)")
    ax1.set_title("Input pipeline, 1024 px PNG vs 256 px JPEG records")
    ax1.legend(loc="lower right")

    left = [0.0, 0.0]
    for segment, (ours, stock) in SPAWN.items():
        ax2.barh(["ours", "stock batchspawner"], [ours, stock], left=left, label=segment)
        left = [left[0] + ours, left[1] + stock]
    ax2.set_xlabel("seconds, form submit -> JupyterLab (medians of 10)")
    ax2.set_title("Spawn through Slurm: 0.57x stock")
    ax2.legend(loc="lower right")

    x = range(len(DASHBOARD))
    ax3.bar([i - 0.2 for i in x], [d[1] for d in DASHBOARD], width=0.4, label="p50")
    ax3.bar([i + 0.2 for i in x], [d[2] for d in DASHBOARD], width=0.4, label="p99")
    ax3.axhline(250, color="red", linestyle="--", label="p99 target for reads, 250 ms")
    ax3.set_xticks(list(x), [d[0] for d in DASHBOARD])
    ax3.set_ylabel("ms")
    ax3.set_title("Dashboard, 200 users for 60 s, 0 errors")
    ax3.legend()

    ax4.bar([name for name, _, _ in LIVENESS], [m for _, m, _ in LIVENESS], label="measured (median)")
    ax4.scatter([name for name, _, _ in LIVENESS], [t for _, _, t in LIVENESS], color="red", marker="_", s=2000,
                label="target")
    ax4.set_ylabel("seconds")
    ax4.set_title("Liveness of the embedded TensorBoard")
    ax4.legend()

    fig.tight_layout()
    fig.savefig(OUT, dpi=90)
    print(OUT)


if __name__ == "__main__":
    main()
