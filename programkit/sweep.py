"""A sweep's trials, each one task of a Slurm job array (or one pod of a Kubernetes Job), sharing one Optuna study
in the job's directory.

    python -m programkit.sweep_cli claim JOB_DIR HOLDER TRIALS  # Kubernetes: which task this pod runs (prints it)
    python -m programkit.sweep_cli attach JOB_DIR TASK     # the trial of task TASK: prints its number (once per task)
    python -m chexnet.train ... --trial JOB_DIR/trials/TASK/trial.json   # trains it; rank 0 reports, prunes, tells
    python -m programkit.sweep_cli fail JOB_DIR TASK       # the training failed: the trial is FAIL
    python -m programkit.sweep_cli close JOB_DIR           # the sweep was cancelled: every unfinished trial is FAIL
    python -m programkit.sweep_cli status JOB_DIR [TASK]   # every trial (or TASK's) as JSON (the portal reads it)

The study is Optuna's journal storage, `study.journal` in the job's directory: a file on the shared home that every
node appends to under Optuna's own lock file (made with O_EXCL, which NFSv3 and later honour; broken after a
minute when its writer was killed holding it: programkit.studylock), so no database or service is needed. Its
plan, `sweep.json`, is what the portal validated at submit (portal.records.sweep).

One trial per task, counted once: the trial is made with the task's index in its user attributes, in one journal
line, and written to `trials/<task>/trial.json`. A task Slurm runs again (its node failed, `--requeue`) finds the
same trial, resumes training from `trials/<task>/checkpoints`, re-reports what its checkpoint's epochs measured
(Optuna keeps the first value of a step), and goes on; a task whose trial has already finished does nothing.

Pruning happens inside `chexnet.train`: rank 0 reports each epoch's validation mean AUROC (step = the epoch, from
1, as in TensorBoard) and asks the pruner, then tells every rank (a Horovod broadcast), so all stop together after
the same epoch and the process exits 0: the trial is PRUNED in the study, its task COMPLETED in Slurm.

On Kubernetes, whose pods carry no task index, each pod claims its task first: programkit.sweepclaims.

Only Optuna is imported here (not TensorFlow): `attach` runs once per task before any worker starts.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from programkit import tblog
from programkit.cli import UsageError
from programkit.schemas import SWEEP_PLAN, TRIAL_RECORD, check
from programkit.userfiles import read_bytes

PLAN_FILE = "sweep.json"
JOURNAL_FILE = "study.journal"
TRIALS_DIR = "trials"
TRIAL_FILE = "trial.json"
STUDY_NAME = "sweep"
TASK_ATTR = "task"  # the trial's user attribute: the index of the array task that runs it
EXIT_FINISHED = 10  # `attach`: the task's trial has already finished (a requeued task after its tell)
MAX_PLAN_BYTES = 64 * 1024
MAX_JOURNAL_BYTES = 64 * 1024 * 1024  # 200 trials x 30 epochs is ~1 MB


class SweepError(RuntimeError):
    """The sweep's files are not what the portal wrote (edited, or not a sweep's directory)."""


@dataclass(frozen=True)
class Plan:
    """The parts of `sweep.json` a trial needs (validated by the portal at submit; here only read carefully)."""

    space: dict[str, dict[str, Any]]
    sampler: str
    pruner: str
    min_epochs: int
    seed: int
    epochs: int

    @classmethod
    def read(cls, job_dir: Path) -> Plan:
        path = job_dir / PLAN_FILE
        try:
            data = json.loads(read_bytes(path, MAX_PLAN_BYTES))  # a FIFO, a link, a device: refused at once
            check(SWEEP_PLAN, data, str(path))  # the field and why, for a plan of the wrong shape
            plan = cls(space=dict(data["space"]), sampler=str(data["sampler"]), pruner=str(data["pruner"]),
                       min_epochs=int(data["min_epochs"]), seed=int(data["seed"]), epochs=int(data["epochs"]))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise SweepError(f"{path}: not a sweep's plan ({err})") from None
        return plan


def _optuna():
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line per trial in every task's log
    # TPE's multivariate and constant_liar are "experimental" in Optuna 4.1 (5.0's defaults): a task on an image still
    # carrying 4.1 is not worth a warning per task.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def storage(job_dir: Path):
    """The sweep's journal storage (a regular file of the user's, not a link or a FIFO)."""
    optuna = _optuna()
    from optuna.storages.journal import JournalFileBackend

    from programkit.studylock import StudyLock

    journal = job_dir / JOURNAL_FILE
    try:
        info = journal.lstat()
    except FileNotFoundError:
        info = None
    if info is not None and (not journal.is_file() or journal.is_symlink()):
        raise SweepError(f"{journal} is not a regular file")
    if info is not None and info.st_size > MAX_JOURNAL_BYTES:
        raise SweepError(f"{journal} is {info.st_size} bytes, more than a sweep writes ({MAX_JOURNAL_BYTES})")
    return optuna.storages.JournalStorage(JournalFileBackend(str(journal), lock_obj=StudyLock(journal)))


def sampler_for(plan: Plan, task: int):
    """Seeded per task: the same seed in every task draws the same values in each (Optuna's samplers are
    per-process), so trial `task` draws with seed + task, the same values when its task runs again."""
    optuna = _optuna()
    seed = plan.seed + task
    if plan.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # multivariate: the parameters modelled jointly; constant_liar: a running trial counts as a bad one, so parallel
    # trials spread out. Both are Optuna 5.0's defaults, spelled out so that a task still on 4.1 (an image not yet
    # rebuilt, or rolled back) uses them too.
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)


def pruner_for(plan: Plan):
    """Steps are epochs from 1. Median: a trial is stopped after epoch >= min_epochs when its AUROC is below the
    median of the completed trials' at that epoch (once one has completed). Hyperband: rungs from min_epochs up
    to the sweep's epochs, a third kept at each."""
    optuna = _optuna()
    if plan.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=plan.min_epochs)
    if plan.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=plan.min_epochs, max_resource=plan.epochs,
                                              reduction_factor=3)
    return optuna.pruners.NopPruner()


def open_study(job_dir: Path, plan: Plan, task: int = 0, create: bool = False):
    """The sweep's study, with the sampler and pruner of its plan (Optuna stores neither). Only a task's `attach`
    creates it (every creation appends to the journal, so everything else loads)."""
    optuna = _optuna()
    sampler, pruner = sampler_for(plan, task), pruner_for(plan)
    if create:
        return optuna.create_study(storage=storage(job_dir), study_name=STUDY_NAME, direction="maximize",
                                   sampler=sampler, pruner=pruner, load_if_exists=True)
    try:
        return optuna.load_study(storage=storage(job_dir), study_name=STUDY_NAME, sampler=sampler, pruner=pruner)
    except KeyError:
        raise SweepError(f"{job_dir / JOURNAL_FILE} holds no study named {STUDY_NAME!r}") from None


def _suggest(trial, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    params = {}
    for name, spec in space.items():
        if "choices" in spec:
            params[name] = trial.suggest_categorical(name, list(spec["choices"]))
        elif isinstance(spec["low"], int) and isinstance(spec["high"], int) and name != "lr":
            params[name] = trial.suggest_int(name, spec["low"], spec["high"])
        else:
            params[name] = trial.suggest_float(name, float(spec["low"]), float(spec["high"]),
                                               log=bool(spec.get("log")))
    return params


def trial_of_task(study, task: int):
    """The study's trial of this task (FrozenTrial), or None."""
    for frozen in study.get_trials(deepcopy=False):
        if frozen.user_attrs.get(TASK_ATTR) == task:
            return frozen
    return None


def attach(job_dir: Path, task: int) -> tuple[int, dict[str, Any], bool]:
    """(trial number, its parameters, whether it has already finished) of the task's trial, made if new."""
    optuna = _optuna()
    from optuna.trial import TrialState

    plan = Plan.read(job_dir)
    study = open_study(job_dir, plan, task, create=True)
    frozen = trial_of_task(study, task)
    if frozen is None:  # one journal line makes the trial with its task: no window where a kill leaves an orphan
        template = optuna.trial.create_trial(state=TrialState.RUNNING, user_attrs={TASK_ATTR: task})
        trial_id = study._storage.create_new_trial(study._study_id, template_trial=template)
    else:
        trial_id = frozen._trial_id
        if frozen.state.is_finished():
            return frozen.number, dict(frozen.params), True
    trial = optuna.trial.Trial(study, trial_id)
    params = _suggest(trial, plan.space)  # a trial asked again gets the values it drew the first time
    return trial.number, params, False


def write_trial_file(job_dir: Path, task: int, number: int, params: dict[str, Any]) -> Path:
    directory = job_dir / TRIALS_DIR / str(task)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / TRIAL_FILE
    partial = directory / f".{TRIAL_FILE}.{os.getpid()}"
    trial = {"number": number, "task": task, "params": params}
    check(TRIAL_RECORD, trial, f"{path} to write")
    partial.write_text(json.dumps(trial) + "\n")
    partial.replace(path)
    return path


class TrialReporter:
    """Rank 0's line to the study during training: report each epoch's AUROC, ask the pruner, tell the end."""

    def __init__(self, job_dir: Path, task: int, number: int):
        optuna = _optuna()
        self.plan = Plan.read(job_dir)
        self.study = open_study(job_dir, self.plan, task)
        self.number = number
        self.trial = optuna.trial.Trial(self.study, self.study._storage.get_trial_id_from_study_id_trial_number(
            self.study._study_id, number))
        self.pruned_at: int | None = None

    @classmethod
    def from_trial_file(cls, path: Path) -> TrialReporter:
        data = json.loads(read_bytes(path, MAX_PLAN_BYTES))
        check(TRIAL_RECORD, data, str(path))
        return cls(path.parent.parent.parent, data["task"], data["number"])

    @classmethod
    def for_run(cls, trial: Path | None, checkpoint_dir: Path, start_epoch: int) -> TrialReporter | None:
        """Rank 0's reporter for a training run of either program (None outside a sweep): the epochs a resumed run
        had recorded (its per-epoch record, programkit.tblog) reported again. SweepError naming --trial when the
        study cannot be opened."""
        if trial is None:
            return None
        from programkit.tags import TAG_AUROC_MEAN  # here: programkit.tags needs numpy, which the hub's image lacks

        try:
            reporter = cls.from_trial_file(trial)
        except (OSError, ValueError, KeyError, TypeError, SweepError) as err:
            raise SweepError(f"--trial {trial}: the sweep's study cannot be opened ({err})") from None
        if start_epoch:
            done = tblog.read_record(tblog.record_path(checkpoint_dir))
            reporter.catch_up({epoch: entry.scalars.get(TAG_AUROC_MEAN) for epoch, entry in done.items()
                               if epoch <= start_epoch})
        return reporter

    @classmethod
    def for_program(cls, trial: Path | None, checkpoint_dir: Path, start_epoch: int,
                    say: Callable[[str], None]) -> TrialReporter | None:
        """`for_run`, as every program's rank 0 starts it: the trial said in the run's log; UsageError (one line,
        exit 2) when the study cannot be opened."""
        try:
            reporter = cls.for_run(trial, checkpoint_dir, start_epoch)
        except SweepError as err:
            raise UsageError(str(err)) from None
        if reporter is not None:
            say(f"sweep: {reporter.describe()}")
        return reporter

    def describe(self) -> str:
        """"trial 3: lr=0.001, ...": what a run says when it starts its trial."""
        return f"trial {self.number}: {', '.join(f'{k}={v}' for k, v in self.trial.params.items())}"

    def report(self, epoch: int, value: float | None) -> bool:
        """Report epoch `epoch` (from 1); whether the pruner stops the trial here. NaN (undefined AUROC) is
        reported as such: the median pruner stops such a trial. After the last epoch nothing is left to save: the
        trial is complete, whatever the pruner would say."""
        self.trial.report(math.nan if value is None else float(value), epoch)
        return epoch < self.plan.epochs and self.trial.should_prune()

    def catch_up(self, values: dict[int, float | None]) -> None:
        """Report the epochs a resumed run's checkpoint has done (the run before may have died before reporting
        them); steps already reported keep their first value."""
        reported = set(self.study._storage.get_trial(self.trial._trial_id).intermediate_values)
        for epoch in sorted(values):
            if epoch not in reported:
                self.trial.report(math.nan if values[epoch] is None else float(values[epoch]), epoch)

    def pruned(self, epoch: int) -> None:
        from optuna.trial import TrialState

        self.pruned_at = epoch
        self.study.tell(self.number, state=TrialState.PRUNED, skip_if_finished=True)

    def complete(self, value: float | None) -> None:
        from optuna.trial import TrialState

        if value is None or not math.isfinite(value):
            self.study.tell(self.number, state=TrialState.FAIL, skip_if_finished=True)
        else:
            self.study.tell(self.number, float(value), skip_if_finished=True)


def fail(job_dir: Path, task: int) -> bool:
    """Mark the task's trial FAIL unless it has finished; whether it was marked."""
    from optuna.trial import TrialState

    if not (job_dir / JOURNAL_FILE).exists():
        return False
    study = open_study(job_dir, Plan.read(job_dir), task)
    frozen = trial_of_task(study, task)
    if frozen is None or frozen.state.is_finished():
        return False
    study.tell(frozen.number, state=TrialState.FAIL, skip_if_finished=True)
    return True


def close(job_dir: Path) -> int:
    """Every unfinished trial FAIL (the sweep was cancelled: no task runs any more); how many."""
    from optuna.trial import TrialState

    if not (job_dir / JOURNAL_FILE).exists():
        return 0
    study = open_study(job_dir, Plan.read(job_dir))
    count = 0
    for frozen in study.get_trials(deepcopy=False):
        if not frozen.state.is_finished():
            study.tell(frozen.number, state=TrialState.FAIL, skip_if_finished=True)
            count += 1
    return count


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _seconds(moment: Any) -> float | None:
    """A trial's datetime as seconds since the epoch. Optuna 4.1 writes naive local times (the clock and time zone
    of the node that wrote them), 5.0 UTC ones; 5.0 reads both as naive local times, 4.1 reads 5.0's as aware ones.
    A journal both wrote holds both kinds, which Optuna 4.1 cannot subtract or compare (FrozenTrial.duration and
    study summaries raise TypeError): each is only ever turned into seconds here, right for either kind."""
    return moment.timestamp() if moment is not None else None


def status(job_dir: Path, task: int | None = None) -> dict[str, Any]:
    """Every trial of the study (or the one of `task`): number, task, state, parameters, final value, AUROC per
    epoch, and when it started and finished (seconds since the epoch; None while it runs). The sweep's page
    reads its wall time from these, the same on every scheduler (Slurm accounts each task of an array apart)."""
    if not (job_dir / JOURNAL_FILE).exists():
        return {"trials": []}
    study = open_study(job_dir, Plan.read(job_dir))
    trials = []
    for frozen in study.get_trials(deepcopy=False):
        if task is not None and frozen.user_attrs.get(TASK_ATTR) != task:
            continue
        trials.append({"number": frozen.number, "task": frozen.user_attrs.get(TASK_ATTR),
                       "state": frozen.state.name, "params": frozen.params, "value": _finite(frozen.value),
                       "epochs": {str(step): _finite(value) for step, value in
                                  sorted(frozen.intermediate_values.items())},
                       "started": _seconds(frozen.datetime_start), "ended": _seconds(frozen.datetime_complete)})
    return {"trials": trials}

