"""Write a sweep's study journal the way the sweep's tasks write it (programkit.sweep), with whatever Optuna is
installed: tests/unit/data/optuna-<version>/ was made by this script under that Optuna, so that a unit test reads and
continues a journal another version left behind: 4.1.0's, the version the portal pinned before 5.0 (a sweep
started before the upgrade), and 5.0.0's (one started before a rollback). From the repository, with TZ=UTC (4.1
writes local times):

    python3.11 -m venv /var/tmp/optuna41 && /var/tmp/optuna41/bin/pip install optuna==4.1.0
    TZ=UTC PYTHONPATH=. /var/tmp/optuna41/bin/python -m tests.capture_optuna_journal tests/unit/data/optuna-4.1.0

Only programkit.sweep and Optuna are imported (no TensorFlow, no portal), so a venv of Optuna alone will do. The sweep,
as it stands when its portal is upgraded: task 0 completed, task 1 pruned by Hyperband after epoch 2 (the pruner
that writes one more kind of journal line, a trial's system attribute), task 2 failed, task 3 running after its
first epoch, the rest not started. Every searched parameter's kind is drawn: a log-scaled float, an int range, and
choices of ints, strings and booleans.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from programkit import sweep

PLAN = {"space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}, "batch_size": {"choices": [8, 16]},
                  "model": {"choices": ["densenet121", "resnet50"]}, "fp16": {"choices": [False, True]},
                  "image_size": {"low": 64, "high": 128}},
        "trials": 6, "parallel": 4, "sampler": "tpe", "pruner": "hyperband", "min_epochs": 2, "seed": 0, "epochs": 4}


def write_sweep(job_dir: Path) -> None:
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / sweep.PLAN_FILE).write_text(json.dumps(PLAN, indent=1) + "\n")
    (job_dir / sweep.JOURNAL_FILE).unlink(missing_ok=True)
    for task in range(4):
        sweep.attach(job_dir, task)
    done = sweep.TrialReporter(job_dir, 0, 0)
    for epoch, auroc in ((1, 0.61), (2, 0.72), (3, 0.75), (4, 0.78)):
        assert not done.report(epoch, auroc), f"trial 0 pruned at epoch {epoch}"
    done.complete(0.78)
    pruned = sweep.TrialReporter(job_dir, 1, 1)
    assert not pruned.report(1, 0.52) and pruned.report(2, 0.55), "Hyperband did not prune trial 1 at epoch 2"
    pruned.pruned(2)
    sweep.TrialReporter(job_dir, 2, 2).report(1, None)  # an undefined AUROC (NaN), then the training failed
    assert sweep.fail(job_dir, 2)
    sweep.TrialReporter(job_dir, 3, 3).report(1, 0.66)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.capture_optuna_journal JOB_DIR")
    write_sweep(Path(sys.argv[1]))
    import optuna

    print(f"{sys.argv[1]}: written by Optuna {optuna.__version__}")
