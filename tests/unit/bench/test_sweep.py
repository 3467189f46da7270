"""The sweep benchmark's task and its report (bench.sweep): a seed that gives the pruner something to decide, and
the targets read from the pairs."""

from __future__ import annotations

from bench.sweep import LEARNS, LRS, bench_seed, drawn_lr, report


def test_the_seed_draws_complete_first_trials_and_later_ones_to_prune():
    seed = bench_seed(6, 2)
    lrs = [drawn_lr(seed, task, LRS) for task in range(6)]
    assert lrs[:2] == [1e-3, 1e-3] and 2 <= sum(lr not in LEARNS for lr in lrs[2:]) <= 3 and len(set(lrs)) >= 3


def run(wall: float, best: float, aurocs: list[float]) -> dict:
    return {"wall_s": wall, "epochs_trained": 30, "best_auroc": best, "best_lr": 1e-3, "trial_aurocs": aurocs}


def pairs(*walls: tuple[float, float], aurocs: list[float]) -> dict:
    return {"pairs": [{"order": ["median", "none"], "pruned": run(p, 1.0, aurocs), "unpruned": run(u, 1.0, aurocs),
                       "ratio": p / u} for p, u in walls], "trials": 6, "parallel": 2, "epochs": 10, "seed": 28}


def test_the_median_of_the_pairs_is_held_to_its_target():
    data = pairs((150, 270), (200, 225), (156, 232), aurocs=[1.0, 0.98, 0.63, 0.33])
    ratio, differ = report(data)
    assert (round(ratio.measured, 3), ratio.met, differ.met) == (0.672, True, True)
    assert data["median"] == ratio.measured and round(data["spread"], 3) == round(200 / 225 - 150 / 270, 3)
    slow = pairs((250, 270), (220, 225), (230, 232), aurocs=[1.0, 0.98, 0.63, 0.33])
    assert not report(slow)[0].met


def test_a_task_whose_trials_all_score_alike_is_said_to_be_one():
    alike = pairs((150, 270), (150, 270), (150, 270), aurocs=[1.0, 1.0, 0.98, 0.95])
    assert not report(alike)[1].met
