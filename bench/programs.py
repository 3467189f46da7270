"""The PyTorch program beside the TensorFlow one: the same job on the Slurm box, images/s and time to the first point.

    python -m bench.programs [--rounds 5] [--epochs 3] [--user alice]

Against the running box (`make up`, or DSPORTAL_CONFIG's), as root: the user's jobs through `portal.jobs` on the
demo data set, DenseNet-121 at 64 px, batch 8 per worker, one CPU per worker (bench.nodes' and bench.kube's job),
in three runs per round, one job at a time:

    tf x2      template chexnet        (TensorFlow 2.15 + Horovod, mpirun)   2 nodes x 1 worker
    torch x2   template chexnet-torch  (PyTorch DDP over gloo, torchrun)     2 nodes x 1 worker
    torch x1   template chexnet-torch                                        1 node  x 1 worker

The round's order alternates (tf x2, torch x2, torch x1; then torch x1, torch x2, tf x2), so that each pair
compared (torch x2 with tf x2, torch x2 with torch x1) runs one after the other, and neither side always goes
first. Per job, from its TensorBoard events (both programs write the same tags): images/s is the median of its
`throughput/images_per_sec` points after the first epoch (which holds the start and the first step's tracing),
the time to the first point is from submit to its first `throughput/images_per_sec` point (what the job page
shows first), an epoch's time the median interval between its `loss/val` points. Each ratio is the median of
the rounds' ratios (bench.programs_report has the targets).

These are CPU figures: the box's nodes are network namespaces of one machine and share its cores, the GPUs are
fake (the PyTorch program trains on the CPU with gloo, autocast and channels_last off), and other work on the
machine falls on both sides alike. DenseNet-121 at 224 px would take about 12 times as long per epoch on these
2 cores: at 64 px a round takes 4-5 minutes (TensorFlow's job most of it). Figures are saved to
docs/results/programs.json; exit 1 when a target is not met.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench import programs_report as report
from bench.results import save

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorBoard's event reader loads TensorFlow: no start-up chatter
TAG_THROUGHPUT = "throughput/images_per_sec"
TAG_LOSS_VAL = "loss/val"
BASE = {"batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 4, "gpus_per_node": 1,
        "model": "densenet121"}
JOB_TIMEOUT_S = 1800


def event_points(logdir: Path, tag: str) -> list[tuple[float, int, float]]:
    """(wall time, step, value) of `tag` in every event file under the run's logdir, in wall-time order: TF2's
    writer stores scalars as tensors, torch.utils.tensorboard as simple values; both are read."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util.tensor_util import make_ndarray

    found = []
    for path in sorted(logdir.rglob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == tag:
                    number = value.simple_value if value.HasField("simple_value") else \
                        float(make_ndarray(value.tensor))
                    found.append((event.wall_time, event.step, number))
    return sorted(found)


def run_job(kind: str, user: str, epochs: int) -> dict[str, Any]:
    from portal import jobs

    template, nodes = report.RUNS[kind]
    submitted = time.time()
    job = jobs.submit({**BASE, "template": template, "epochs": epochs, "nodes": nodes}, scheduler="slurm", user=user)
    state = job.wait(timeout=JOB_TIMEOUT_S, poll=2)
    if state != "COMPLETED":
        raise SystemExit(f"job {job.id} ({kind}) ended {state}:\n{job.logs(tail=40)}")
    logdir = Path(job.job_dir) / "tensorboard"
    figures = report.job_figures(submitted, event_points(logdir, TAG_THROUGHPUT), event_points(logdir, TAG_LOSS_VAL))
    if figures["images_per_sec"] is None:
        raise SystemExit(f"job {job.id} ({kind}): no {TAG_THROUGHPUT} point after its first epoch in {logdir}; "
                         "use --epochs 2 or more")
    print(f"  job {job.id} {kind}: {figures['images_per_sec']:.1f} images/s, first point after "
          f"{figures['first_point_s']:.1f} s, {figures['epoch_s']:.1f} s/epoch "
          f"({time.time() - submitted:.0f} s from submit)", flush=True)
    return {"job": job.id, **figures}


def command(args: argparse.Namespace) -> str:
    return f"python -m bench.programs --rounds {args.rounds} --epochs {args.epochs} --user {args.user}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the three jobs, order alternating (default 5)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per job, 2 or more (default 3)")
    parser.add_argument("--user", default="alice", help="whose jobs (needs 2 nodes and a GPU quota of 2 or more)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.epochs < 2:
        parser.error(f"--rounds {args.rounds}, --epochs {args.epochs}; allowed: --rounds 1 or more, --epochs 2 or "
                     "more (the first epoch holds the start, images/s is measured after it)")
    from portal import jobs
    from portal.config import load
    from portal.jobs.demo_data import ensure_demo_data

    cfg = load()
    ensure_demo_data(cfg)
    limits = jobs.limits("slurm", user=args.user, cfg=cfg)
    if limits.nodes < 2 or limits.quota.limit < 2:
        print(f"bench.programs: needs 2 usable nodes and a GPU quota of 2; {args.user} has {limits.nodes} node(s) "
              f"and a quota of {limits.quota.limit}", file=sys.stderr)
        return 2
    rounds = []
    for index in range(args.rounds):
        order = report.order(index)
        print(f"round {index + 1}/{args.rounds}: {', '.join(order)}", flush=True)
        rounds.append({"order": list(order), **{kind: run_job(kind, args.user, args.epochs) for kind in order}})
    data = {**report.figures(rounds), "spec": BASE, "epochs": args.epochs, "user": args.user, "cpu_figures": True}
    print()
    print(report.table(data))
    targets = report.targets(data)
    print("\n".join(report.verdicts(targets)))
    print(f"results: {save('programs', command=command(args), targets=targets, data=data)}")
    return 0 if all(t.met for t in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
