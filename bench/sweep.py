"""Sweeps with pruning against the same trials without, in pairs: wall time, epochs trained, the best trial found.

    python -m bench.sweep [--pairs 3] [--trials 6] [--parallel 2] [--epochs 10] [--user alice]

Against the running box (`make up`, or DSPORTAL_CONFIG's), as root: sweeps of the user's through `portal.jobs` on
the demo data set (DenseNet-121, 64 px, batch 8, one worker and one GPU per trial), `--pairs` pairs of the same
trials (the random sampler, one seed: task t draws the same learning rate in every sweep) with the median pruner
and with none, the order alternating from pair to pair (pruned first, then unpruned first, ...), so that neither
always runs on the warmer or the busier machine. The learning rate decides the outcome: it is drawn from LRS, from
one that learns the demo set's signal in a few epochs to ones that barely move in 10, so the trials differ in AUROC
and pruning has something to stop; the seed is one whose first `parallel` tasks learn (the pruner needs completed
trials to compare with) and about half of whose later tasks do not. Wall time is from submit to the sweep's end
(Slurm's state, polled every 2 s). The ratio is pruned / unpruned wall time, per pair; the target is on their
median: <= 0.8. Beside it, each sweep's best trial (its AUROC and learning rate): pruning must keep the best one.
Saved to docs/results/sweep.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench.common import markdown_table as table
from bench.results import Target, results_dir, save
from portal import jobs
from portal.config import load
from portal.jobs.demo_data import ensure_demo_data

BASE = {"template": "chexnet", "batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 4,
        "gpus_per_node": 1}
GOOD_LR, BAD_LR = 1e-3, 1e-8  # the integration tests' two-valued sweeps (seed_for)
# The benchmark's learning rates: 1e-3 learns the demo set in a few epochs, 1e-4 more slowly, 1e-6 and 1e-8 hardly.
LRS = (1e-3, 1e-4, 1e-6, 1e-8)
LEARNS = (1e-3, 1e-4)
SWEEP_TIMEOUT_S = 3600
RATIO_TARGET = 0.8


def drawn_lr(seed: int, task: int, choices: tuple[float, ...] = (GOOD_LR, BAD_LR)) -> float:
    """The learning rate task `task` draws with this seed (programkit.sweep's sampler, as the trial runs it)."""
    import optuna

    from programkit import sweep

    plan = sweep.Plan(space={"lr": {"choices": list(choices)}}, sampler="random", pruner="none", min_epochs=1,
                      seed=seed, epochs=2)
    return optuna.create_study(sampler=sweep.sampler_for(plan, task)).ask().suggest_categorical("lr", list(choices))


def bench_seed(trials: int, parallel: int) -> int:
    """A seed whose first `parallel` tasks draw 1e-3 (they complete: the pruner compares with them), about half of
    whose later tasks (at least one) draw a learning rate that does not learn, and that draws 3 rates or more."""
    later = trials - parallel
    for seed in range(2000):
        lrs = [drawn_lr(seed, task, LRS) for task in range(trials)]
        stuck = sum(lr not in LEARNS for lr in lrs[parallel:])
        if all(lr == LRS[0] for lr in lrs[:parallel]) and max(1, later // 2) <= stuck <= later - (later > 2) \
                and len(set(lrs)) >= 3:
            return seed
    raise SystemExit("bench.sweep: no seed in 0-1999 draws a sweep with something to prune")


def seed_for(trials: int, parallel: int) -> int:
    """A seed whose first `parallel` tasks learn and at least one later task does not."""
    for seed in range(500):
        lrs = [drawn_lr(seed, task) for task in range(trials)]
        if all(lr == GOOD_LR for lr in lrs[:parallel]) and BAD_LR in lrs[parallel:]:
            return seed
    raise SystemExit("bench.sweep: no seed in 0-499 draws a sweep with something to prune")


def run_sweep(user: str, trials: int, parallel: int, epochs: int, seed: int, pruner: str,
              choices: tuple[float, ...] = (GOOD_LR, BAD_LR)) -> dict:
    request = {**BASE, "epochs": epochs,
               "sweep": {"trials": trials, "parallel": parallel, "sampler": "random", "pruner": pruner,
                         "min_epochs": 2, "seed": seed, "space": {"lr": list(choices)}}}
    started = time.monotonic()
    job = jobs.submit(request, scheduler="slurm", user=user)
    state = job.wait(timeout=SWEEP_TIMEOUT_S, poll=2)
    wall = time.monotonic() - started
    view = job.sweep()
    if state != "COMPLETED":
        raise SystemExit(f"sweep {job.id} ({pruner}) ended {state}: {view.counts()}")
    best = view.best
    found = {"pruner": pruner, "sweep": job.id, "wall_s": wall, "epochs_trained": sum(r.epochs_run for r in view.rows),
             "pruned": sum(r.pruned_at is not None for r in view.rows), "trials": len(view.rows),
             "best_auroc": best.value if best else None, "best_lr": best.params.get("lr") if best else None,
             "trial_aurocs": sorted((r.value for r in view.rows if r.value is not None), reverse=True),
             "trial_rows": [{"task": r.task, "lr": r.params.get("lr"), "state": r.state, "value": r.value,
                             "epochs": r.epochs_run} for r in view.rows]}
    print(f"  sweep {job.id} (pruner {pruner}): {wall:.0f} s, {found['epochs_trained']} epochs trained, "
          f"{found['pruned']} of {trials} pruned, best mean AUROC {found['best_auroc']}", flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="pruned/unpruned pairs, in alternating order")
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10, help="per trial, 3 or more (pruning needs them)")
    parser.add_argument("--user", default="alice", help="whose sweeps (needs a GPU quota of --parallel or more)")
    parser.add_argument("--from-saved", action="store_true",
                        help="run nothing: print the saved run's table and its targets again, and save them")
    args = parser.parse_args(argv)
    if args.from_saved:
        saved = json.loads((results_dir() / "sweep.json").read_text())
        targets = report(saved["data"])
        saved["data"]["targets_from"] = "python -m bench.sweep --from-saved"
        print(f"results: {save('sweep', command=saved['command'], targets=targets, data=saved['data'])}")
        return 0 if all(t.met for t in targets) else 1
    if args.epochs < 3 or not 1 <= args.parallel < args.trials or args.pairs < 1:
        parser.error("--epochs must be 3 or more, --parallel from 1 to below --trials, --pairs 1 or more")
    cfg = load()
    ensure_demo_data(cfg)
    seed = bench_seed(args.trials, args.parallel)
    drawn = [drawn_lr(seed, task, LRS) for task in range(args.trials)]
    print(f"seed {seed}: the tasks' learning rates {drawn}", flush=True)
    pairs = []
    for pair in range(args.pairs):
        order = ("median", "none") if pair % 2 == 0 else ("none", "median")
        runs = {pruner: run_sweep(args.user, args.trials, args.parallel, args.epochs, seed, pruner, LRS)
                for pruner in order}
        pairs.append({"order": list(order), "pruned": runs["median"], "unpruned": runs["none"],
                      "ratio": runs["median"]["wall_s"] / runs["none"]["wall_s"]})
        print(f"pair {pair + 1}: {pairs[-1]['ratio']:.2f}x", flush=True)
    data = {"pairs": pairs, "trials": args.trials, "parallel": args.parallel, "epochs": args.epochs, "seed": seed,
            "lrs": list(LRS), "drawn": drawn, "user": args.user}
    targets = report(data)
    command = (f"python -m bench.sweep --pairs {args.pairs} --trials {args.trials} --parallel {args.parallel} "
               f"--epochs {args.epochs} --user {args.user}")
    print(f"results: {save('sweep', command=command, targets=targets, data=data)}")
    return 0 if all(t.met for t in targets) else 1


def report(data: dict) -> list[Target]:
    """Print a run's pairs and its targets (adding the ratios' median and spread to `data`)."""
    pairs = data["pairs"]
    ratios = [p["ratio"] for p in pairs]
    median = statistics.median(ratios)
    data.update(ratios=ratios, median=median, spread=max(ratios) - min(ratios))
    print()
    print(table(["pair", "order", "pruned (s)", "unpruned (s)", "ratio", "epochs trained", "best AUROC (lr)",
                 "unpruned trials' AUROC"],
                [[i + 1, " then ".join(p["order"]), f"{p['pruned']['wall_s']:.0f}", f"{p['unpruned']['wall_s']:.0f}",
                  f"{p['ratio']:.2f}", f"{p['pruned']['epochs_trained']} / {p['unpruned']['epochs_trained']}",
                  f"{best_text(p['pruned'])} / {best_text(p['unpruned'])}",
                  ", ".join(f"{a:.3f}" for a in p["unpruned"]["trial_aurocs"])] for i, p in enumerate(pairs)]))
    # The best trial of each, side by side (no target: on the demo set's 17 validation images a mean AUROC moves
    # in steps of 1/128 to 1/64, and the same trial run twice differs by such a step; the table shows which
    # learning rate each sweep's best had).
    best = [(p["pruned"]["best_auroc"], p["unpruned"]["best_auroc"]) for p in pairs]
    differ = min(max(p["unpruned"]["trial_aurocs"] or [0]) - min(p["unpruned"]["trial_aurocs"] or [0])
                 for p in pairs)
    print(f"\nwall time with pruning / without: median {median:.2f}x of {len(ratios)} pairs (spread "
          f"{min(ratios):.2f}-{max(ratios):.2f}); {data['trials']} trials, {data['parallel']} at once, "
          f"{data['epochs']} epochs each, seed {data['seed']}")
    print("best trial's mean AUROC, pruned / unpruned: " + ", ".join(
        "-" if a is None or b is None else f"{a:.3f} / {b:.3f}" for a, b in best))
    targets = [Target("sweep wall time, pruned / unpruned, median of pairs", median, f"<= {RATIO_TARGET}",
                      median <= RATIO_TARGET),
               Target("unpruned trials' AUROC, best - worst, smallest of the pairs", differ, ">= 0.1",
                      differ >= 0.1)]
    for target in targets:
        print(f"  {target.name}: {target.measured:.3f} (target {target.target}): "
              f"{'met' if target.met else 'NOT MET'}")
    return targets


def best_text(run: dict) -> str:
    return "-" if run["best_auroc"] is None else f"{run['best_auroc']:.3f} ({run['best_lr']:g})"


if __name__ == "__main__":
    sys.exit(main())
