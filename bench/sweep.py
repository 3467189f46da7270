"""A sweep with pruning against the same trials without: wall time, epochs trained, the best trial found.

    python -m bench.sweep [--trials 6] [--parallel 2] [--epochs 8] [--user alice]

Against the running box (`make up`, or DSPORTAL_CONFIG's), as root: two sweeps of the user's through
`portal.jobs`, one after the other, on the demo data set (64 px, batch 8, one worker and one GPU per trial):
the same trials (the random sampler, one seed: task t draws the same learning rate in both) with the median
pruner, then with none. The learning rate is drawn from two values far apart, 1e-3 (learns the demo set's signal)
and 1e-8 (does not move), so that there is something to prune; the seed is one whose first two tasks learn, so the
pruner has completed trials to compare with. Wall time is from submit to the sweep's end (Slurm's state, polled
every 2 s). The ratio is pruned / unpruned: below 1 is time saved. No target; saved to docs/results/sweep.json.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.common import markdown_table as table
from bench.results import save
from portal import jobs
from portal.config import load
from portal.jobs.demo_data import ensure_demo_data

BASE = {"template": "chexnet", "batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 4,
        "gpus_per_node": 1}
GOOD_LR, BAD_LR = 1e-3, 1e-8
SWEEP_TIMEOUT_S = 3600


def drawn_lr(seed: int, task: int) -> float:
    """The learning rate task `task` draws with this seed (chexnet.sweep's sampler, as the trial runs it)."""
    import optuna

    from chexnet import sweep

    plan = sweep.Plan(space={"lr": {"choices": [GOOD_LR, BAD_LR]}}, sampler="random", pruner="none", min_epochs=1,
                      seed=seed, epochs=2)
    return optuna.create_study(sampler=sweep.sampler_for(plan, task)).ask().suggest_categorical(
        "lr", [GOOD_LR, BAD_LR])


def seed_for(trials: int, parallel: int) -> int:
    """A seed whose first `parallel` tasks learn and at least one later task does not."""
    for seed in range(500):
        lrs = [drawn_lr(seed, task) for task in range(trials)]
        if all(lr == GOOD_LR for lr in lrs[:parallel]) and BAD_LR in lrs[parallel:]:
            return seed
    raise SystemExit("bench.sweep: no seed in 0-499 draws a sweep with something to prune")


def run_sweep(user: str, trials: int, parallel: int, epochs: int, seed: int, pruner: str) -> dict:
    request = {**BASE, "epochs": epochs,
               "sweep": {"trials": trials, "parallel": parallel, "sampler": "random", "pruner": pruner,
                         "min_epochs": 2, "seed": seed, "space": {"lr": [GOOD_LR, BAD_LR]}}}
    started = time.monotonic()
    job = jobs.submit(request, backend="slurm", user=user)
    state = job.wait(timeout=SWEEP_TIMEOUT_S, poll=2)
    wall = time.monotonic() - started
    view = job.sweep()
    if state != "COMPLETED":
        raise SystemExit(f"sweep {job.id} ({pruner}) ended {state}: {view.counts()}")
    best = view.best
    found = {"pruner": pruner, "sweep": job.id, "wall_s": wall, "epochs_trained": sum(r.epochs_run for r in view.rows),
             "pruned": sum(r.pruned_at is not None for r in view.rows), "trials": len(view.rows),
             "best_auroc": best.value if best else None, "best_lr": best.params.get("lr") if best else None}
    print(f"  sweep {job.id} (pruner {pruner}): {wall:.0f} s, {found['epochs_trained']} epochs trained, "
          f"{found['pruned']} of {trials} pruned, best mean AUROC {found['best_auroc']}", flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=8, help="per trial, 3 or more (pruning needs them)")
    parser.add_argument("--user", default="alice", help="whose sweeps (needs a GPU quota of --parallel or more)")
    args = parser.parse_args(argv)
    if args.epochs < 3 or not 1 <= args.parallel < args.trials:
        parser.error("--epochs must be 3 or more, --parallel from 1 to below --trials")
    cfg = load()
    ensure_demo_data(cfg)
    seed = seed_for(args.trials, args.parallel)
    pruned = run_sweep(args.user, args.trials, args.parallel, args.epochs, seed, "median")
    unpruned = run_sweep(args.user, args.trials, args.parallel, args.epochs, seed, "none")
    ratio = pruned["wall_s"] / unpruned["wall_s"]
    print()
    print(table(["pruner", "wall (s)", "epochs trained", "pruned", "best mean AUROC"],
                [[r["pruner"], f"{r['wall_s']:.0f}", r["epochs_trained"], f"{r['pruned']} of {r['trials']}",
                  "-" if r["best_auroc"] is None else f"{r['best_auroc']:.4f}"] for r in (pruned, unpruned)]))
    print(f"\nwall time with pruning / without: {ratio:.2f}x ({args.trials} trials, {args.parallel} at once, "
          f"{args.epochs} epochs each, seed {seed})")
    data = {"runs": [pruned, unpruned], "ratio": ratio, "trials": args.trials, "parallel": args.parallel,
            "epochs": args.epochs, "seed": seed, "user": args.user}
    command = (f"python -m bench.sweep --trials {args.trials} --parallel {args.parallel} --epochs {args.epochs} "
               f"--user {args.user}")
    print(f"results: {save('sweep', command=command, targets=[], data=data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
