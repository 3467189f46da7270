"""The same Horovod training on one node and on two: time per epoch, images/sec and scaling efficiency.

    python -m bench.nodes [--repeats 3] [--epochs 3] [--user alice]

Against the running box (`make up`, or DSPORTAL_CONFIG's), as root: the user's jobs through `portal.jobs`, on the
demo data set (64 px, batch 8 per worker, one CPU per worker), in three layouts: 1 node x 1 worker (the
reference), 1 node x 2 workers and 2 nodes x 1 worker, one job at a time, the layouts in a rotating order so that
drift on a shared machine falls on all of them. Per job, from its TensorBoard events:
- images/sec: the median of its `throughput/images_per_sec` points after the first epoch (which compiles);
- time per epoch: the median interval between its epochs' validation points, after the first epoch.
Efficiency = images/sec / (workers x the 1-worker rate). The table gives the median over the repeats.

On the cluster in a box these are CPU figures: every node is a namespace of the same machine, sharing its cores,
and the network between nodes is a bridge in memory, so a second node adds no cores and costs only the
all-reduce over TCP instead of shared memory. They show the method; a real cluster's GPUs and network give the
numbers that matter. No target: every job's figures, the medians and ranges per layout and the efficiencies are
saved to docs/results/nodes.json (bench.results).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common import markdown_table as table
from bench.results import save
from portal import jobs
from portal.config import load
from portal.jobs.demo_data import ensure_demo_data
from portal.metrics import TAG_LOSS_VAL, TAG_THROUGHPUT

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorBoard's event reader loads TensorFlow: no start-up chatter
LAYOUTS = ((1, 1), (1, 2), (2, 1))  # (nodes, workers per node): one worker per (fake) GPU
BASE = {"template": "chexnet", "batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 4}
JOB_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Result:
    nodes: int
    workers_per_node: int
    images_per_sec: float
    seconds_per_epoch: float

    @property
    def workers(self) -> int:
        return self.nodes * self.workers_per_node


def points(logdir: Path, tag: str) -> list[tuple[float, int, float]]:
    """(wall time, step, value) of one tag over the run's event files, in wall-time order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    found = []
    for events in sorted(logdir.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0, "tensors": 0})
        accumulator.Reload()
        if tag in accumulator.Tags().get("tensors", []):
            found += [(e.wall_time, e.step, float(make_ndarray(e.tensor_proto))) for e in accumulator.Tensors(tag)]
        elif tag in accumulator.Tags().get("scalars", []):
            found += [(e.wall_time, e.step, e.value) for e in accumulator.Scalars(tag)]
    return sorted(found)


def measure(logdir: Path, nodes: int, workers_per_node: int) -> Result:
    epochs = points(logdir, TAG_LOSS_VAL)
    if len(epochs) < 2:
        raise SystemExit(f"{logdir}: fewer than 2 epochs logged; use --epochs 2 or more")
    first_done = epochs[0][0]
    rates = [value for wall, _, value in points(logdir, TAG_THROUGHPUT) if wall > first_done]
    intervals = [later[0] - earlier[0] for earlier, later in zip(epochs, epochs[1:], strict=False)]
    return Result(nodes, workers_per_node, statistics.median(rates) if rates else float("nan"),
                  statistics.median(intervals))


def run_one(user: str, epochs: int, nodes: int, workers_per_node: int) -> Result:
    job = jobs.submit({**BASE, "epochs": epochs, "nodes": nodes, "gpus_per_node": workers_per_node},
                      scheduler="slurm", user=user)
    started = time.monotonic()
    state = job.wait(timeout=JOB_TIMEOUT_S, poll=2)
    if state != "COMPLETED":
        raise SystemExit(f"job {job.id} ({nodes} node(s) x {workers_per_node}) ended {state}:\n{job.logs(tail=30)}")
    result = measure(Path(job.job_dir) / "tensorboard", nodes, workers_per_node)
    print(f"  job {job.id}: {nodes} node(s) x {workers_per_node} worker(s): {result.images_per_sec:.1f} images/s, "
          f"{result.seconds_per_epoch:.1f} s/epoch ({time.monotonic() - started:.0f} s from submit)", flush=True)
    return result


def layout_name(nodes: int, per_node: int) -> str:
    return f"{nodes} node{'s' if nodes > 1 else ''} x {per_node} worker{'s' if per_node > 1 else ''}"


def results(runs: list[Result]) -> dict:
    """What is saved and printed: per layout (fewest workers first) the medians over its jobs (images/s with its
    range: `median`, `min`, `max`), the efficiency against the 1-worker rate; 2 nodes over 1; every job."""
    by_layout: dict[tuple[int, int], list[Result]] = {}
    for run in runs:
        by_layout.setdefault((run.nodes, run.workers_per_node), []).append(run)
    reference = statistics.median(r.images_per_sec for r in by_layout.get((1, 1), []) or runs)
    layouts = []
    for (nodes, per_node), found in sorted(by_layout.items(), key=lambda item: (item[0][0] * item[0][1], item[0])):
        rates = [r.images_per_sec for r in found]
        layouts.append({"name": layout_name(nodes, per_node), "nodes": nodes, "workers_per_node": per_node,
                        "workers": nodes * per_node, "runs": len(found),
                        "seconds_per_epoch": statistics.median(r.seconds_per_epoch for r in found),
                        "median": statistics.median(rates), "min": min(rates), "max": max(rates), "samples": rates,
                        "efficiency": statistics.median(rates) / (nodes * per_node * reference)})
    one, two = by_layout.get((1, 2)), by_layout.get((2, 1))
    ratio = (statistics.median(r.images_per_sec for r in two) / statistics.median(r.images_per_sec for r in one)
             if one and two else None)
    return {"unit": "images/s", "rows": layouts, "two_nodes_over_one": ratio,
            "jobs": [{**asdict(r), "workers": r.workers} for r in runs]}


def summary(runs: list[Result]) -> str:
    data = results(runs)
    rows = [[row["name"], row["workers"], f"{row['seconds_per_epoch']:.1f}", f"{row['median']:.1f}",
             f"{row['min']:.1f}-{row['max']:.1f}", f"{row['efficiency']:.2f}", row["runs"]] for row in data["rows"]]
    text = table(["layout", "workers", "s/epoch", "images/s", "images/s range", "efficiency", "runs"], rows)
    if data["two_nodes_over_one"] is not None:
        text += f"\n\n2 workers on 2 nodes / on 1 node: {data['two_nodes_over_one']:.2f}x the images/s"
    return text + ("\n\nCPU figures (the box's nodes share this machine's cores; the network between them is a "
                   "bridge in memory): they show the method, not GPU numbers.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="jobs per layout (default 3)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per job, 2 or more (default 3)")
    parser.add_argument("--user", default="alice", help="whose jobs (needs a GPU quota of 2 or more)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.epochs < 2:
        parser.error("--repeats must be 1 or more and --epochs 2 or more")
    cfg = load()
    ensure_demo_data(cfg)
    limits = jobs.limits("slurm", user=args.user, cfg=cfg)
    if limits.nodes < 2 or limits.quota.limit < 2:
        print(f"bench.nodes: needs 2 usable nodes and a GPU quota of 2; {args.user} has {limits.nodes} "
              f"node(s) and a quota of {limits.quota.limit}", file=sys.stderr)
        return 2
    done: list[Result] = []
    for repeat in range(args.repeats):
        order = LAYOUTS[repeat % len(LAYOUTS):] + LAYOUTS[:repeat % len(LAYOUTS)]
        print(f"repeat {repeat + 1}/{args.repeats}", flush=True)
        done += [run_one(args.user, args.epochs, nodes, per_node) for nodes, per_node in order]
    print()
    print(summary(done))
    data = {**results(done), "epochs": args.epochs, "repeats": args.repeats, "user": args.user}
    command = f"python -m bench.nodes --repeats {args.repeats} --epochs {args.epochs} --user {args.user}"
    print(f"results: {save('nodes', command=command, targets=[], data=data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
