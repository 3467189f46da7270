"""A hyperparameter sweep's request: what to search, how many trials, how many at once, how to stop bad ones early.

    {"trials": 6, "parallel": 2, "sampler": "tpe", "pruner": "median", "min_epochs": 2, "seed": 0,
     "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": true}, "batch_size": [8, 16], "model": ["densenet121"]}}

beside a job spec's fields (portal.records.spec), which every trial shares: the resources (every task of one Slurm job
array asks for the same), the data, the epochs. A parameter of `space` is either a list of choices or a range
(`low`, `high`, and for `lr` optionally `log`); a parameter the space leaves out keeps the job spec's value.

Pure, like the job spec's validator: `parse_sweep` takes the user's dict and what they may ask for, and returns a
`SweepPlan` or a `JobSpecError` naming the field ("sweep.space.lr.low") and what is allowed. The plan goes into the
job's record and, as `sweep.json`, into its directory, where every trial (programkit.sweep) reads it: the search and
the pruning are Optuna's, the study a journal file in the job's directory.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from portal import inputs
from portal.errors import BadAnswer
from portal.inputs import InputError
from portal.records import programs
from portal.records.limits import JobLimits
from portal.records.programs import Program
from portal.records.spec import MAX_BATCH_SIZE, MAX_EPOCHS, MAX_IMAGE_SIZE, MIN_IMAGE_SIZE, JobSpecError

FIELD = "sweep"
SAMPLERS = ("tpe", "random")  # Optuna's TPESampler (random for its first 10 trials) and RandomSampler
PRUNERS = ("median", "hyperband", "none")  # Optuna's MedianPruner, HyperbandPruner, NopPruner
MAX_TRIALS = 200  # one job array; Slurm's MaxArraySize (1001) is far above
MAX_CHOICES = 16
MIN_PRUNING_EPOCHS = 3  # pruning needs an epoch to compare after the ones every trial runs, and one to save
DEFAULT_TRIALS = 8
DEFAULT_PARALLEL = 2
DEFAULT_MIN_EPOCHS = 2  # every trial trains this many epochs before it may be pruned: epoch 1 is mostly noise
MAX_LR = 1.0

# What a sweep may search: every program's hyperparameters (programkit.trials.COMMON), each with its kind and
# bounds (the job spec's where it has them), and the program's own declared fields (params_of). `lr` and
# `warmup_epochs` are the learning-rate schedule: the rate of one worker, and how many epochs it ramps up over to
# `lr` x workers (then the plateau cuts it).
COMMON_PARAMS: dict[str, tuple[str, Any, Any]] = {
    "lr": ("float", 0.0, MAX_LR),  # exclusive of 0
    "warmup_epochs": ("int", 0, MAX_EPOCHS),
    "batch_size": ("int", 1, MAX_BATCH_SIZE),
    "image_size": ("int", MIN_IMAGE_SIZE, MAX_IMAGE_SIZE),
}


def params_of(program: Program) -> dict[str, tuple[str, Any, Any]]:
    """What a sweep of `program` may search: COMMON_PARAMS and each of its declared fields (a choice among its
    choices, a switch, a whole number within its bounds)."""
    own = {f.name: ("choice", f.choices, None) if f.kind == "choice" else ("int", f.low, f.high) if f.kind == "int"
           else ("bool", None, None) for f in program.fields}
    return {**COMMON_PARAMS, **own}
SWEEP_FIELDS = ("space", "trials", "parallel", "sampler", "pruner", "min_epochs", "seed")
DEFAULT_SPACE = {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}


@dataclass(frozen=True)
class Param:
    """One searched hyperparameter: `choices`, or a range `low`..`high` (log-scaled when `log`)."""

    name: str
    choices: tuple[Any, ...] = ()
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False

    def to_dict(self) -> dict[str, Any]:
        if self.choices:
            return {"choices": list(self.choices)}
        return {"low": self.low, "high": self.high, **({"log": True} if self.log else {})}

    def describe(self) -> str:
        if self.choices:
            return f"{self.name} in {{{', '.join(map(str, self.choices))}}}"
        return f"{self.name} from {self.low:g} to {self.high:g}{' (log scale)' if self.log else ''}"


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep (build it with `parse_sweep`): what each trial of the job array does with Optuna."""

    space: tuple[Param, ...]
    trials: int
    parallel: int  # trials at once: the job array's throttle (%K)
    sampler: str
    pruner: str
    min_epochs: int  # epochs every trial trains before the pruner may stop it
    seed: int  # the sampler's; each trial adds its task index, so concurrent trials do not draw the same values
    epochs: int  # the job spec's: the most any trial trains

    def to_dict(self) -> dict[str, Any]:
        return {"space": {p.name: p.to_dict() for p in self.space}, "trials": self.trials,
                "parallel": self.parallel, "sampler": self.sampler, "pruner": self.pruner,
                "min_epochs": self.min_epochs, "seed": self.seed, "epochs": self.epochs}

    def file_dict(self) -> dict[str, Any]:
        """to_dict, checked against sweep.json's schema (programkit.schemas.SWEEP_PLAN), as the writers write it."""
        from programkit.schemas import SWEEP_PLAN, check

        plan = self.to_dict()
        check(SWEEP_PLAN, plan, "sweep.json to write")
        return plan

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.space)


NUMBER_TEXT = re.compile(r"[+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?", re.ASCII)


def _number(value: Any, field: str, kind: str, low: Any, high: Any) -> float | int:
    if kind == "int":
        return inputs.whole_number(value, field, low, high)
    allowed = f"allowed: a number above {low:g}, at most {high:g}"
    if isinstance(value, str) and len(value) <= inputs.MAX_NUMBER_TEXT and NUMBER_TEXT.fullmatch(value.strip()):
        value = float(value.strip())  # a form's text, "1e-4"; ASCII only, like every number the portal reads
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(field, f"{inputs.shown(value)} is not a number; {allowed}")
    if not low < value <= high:
        raise InputError(field, f"{inputs.shown(value)} is out of range; {allowed}")
    return float(value)


def _choice(value: Any, field: str, kind: str, low: Any, high: Any) -> Any:
    if kind == "choice":
        return inputs.choice(value, field, low)
    if kind == "bool":
        return inputs.boolean(value, field)
    return _number(value, field, kind, low, high)


def _param(name: Any, raw: Any, params: Mapping[str, tuple[str, Any, Any]], program: str) -> Param:
    if not isinstance(name, str) or name not in params:
        field = inputs.field_label(name, f"{FIELD}.space")
        raise InputError(f"{FIELD}.space" if field == f"{FIELD}.space" else f"{FIELD}.space.{field}",
                         f"not a hyperparameter a sweep of {program} can search; allowed: {', '.join(params)}")
    field = f"{FIELD}.space.{name}"
    kind, low, high = params[name]
    if isinstance(raw, (list, tuple)):
        if not 1 <= len(raw) <= MAX_CHOICES:
            raise InputError(field, f"{inputs.shown(raw)}; allowed: 1 to {MAX_CHOICES} choices")
        choices = tuple(_choice(value, f"{field}[{i}]", kind, low, high) for i, value in enumerate(raw))
        if len(set(choices)) != len(choices):
            raise InputError(field, "a choice is listed twice; allowed: each value once")
        return Param(name, choices=choices)
    if kind in ("choice", "bool"):
        raise InputError(field, f"{inputs.shown(raw)} is not a list of choices; allowed: a list such as "
                                f"{list(low) if kind == 'choice' else [False, True]}")
    if not isinstance(raw, Mapping):
        raise InputError(field, f"{inputs.shown(raw)}; allowed: a list of choices, or a range "
                                '{"low": ..., "high": ...}')
    inputs.check_fields(raw, ("low", "high", "log") if name == "lr" else ("low", "high"), field)
    for end in ("low", "high"):
        if end not in raw:
            raise InputError(f"{field}.{end}", "missing; a range needs both low and high")
    first = _number(raw["low"], f"{field}.low", kind, low, high)
    last = _number(raw["high"], f"{field}.high", kind, low, high)
    if not first < last:
        raise InputError(f"{field}.high", f"{last:g} is not above low ({first:g}); allowed: high > low")
    log = inputs.boolean(raw["log"], f"{field}.log") if "log" in raw else False
    return Param(name, low=first, high=last, log=log)


@inputs.refused_as(JobSpecError)
def parse_sweep(raw: Any, epochs: int, limits: JobLimits | None, gpus_per_trial: int,
                at_once: Callable[[int], tuple[int, str]] | None = None, template: str | None = None) -> SweepPlan:
    """The sweep part of a request, validated; `limits` None re-reads a recorded plan (nothing is capped then).
    `template` names the trials' program (the default one when None or unknown: the spec's check names it first):
    what its sweep may search (params_of).

    `parallel` is capped so that that many trials fit the user's GPU quota now (each trial holds
    `gpus_per_trial`), and so that the cluster's nodes can ever hold them at once (`at_once(most)`: how many of
    `most` trials they can, and the arithmetic in words; JobLimits.runs_at_once for the trial's spec): asked for
    more, the user gets the refusal saying how many fit and why."""
    raw = inputs.fields_of(raw, SWEEP_FIELDS, FIELD)
    registered = programs.registry()
    program = registered.get(template) if template in registered.names else registered.default
    params = params_of(program)
    space_raw = raw.get("space", DEFAULT_SPACE)
    if not isinstance(space_raw, Mapping) or not space_raw:
        raise InputError(f"{FIELD}.space", f"{inputs.shown(space_raw)}; allowed: an object of at least one of "
                                            f"{', '.join(params)}, each a list of choices or a range")
    space = tuple(_param(name, value, params, program.name) for name, value in space_raw.items())
    trials = inputs.whole_number(raw.get("trials", DEFAULT_TRIALS), f"{FIELD}.trials", 1, MAX_TRIALS)
    most = trials
    why = f" (at most the {trials} trials)"
    if limits is not None and gpus_per_trial:
        fit = limits.quota.left // gpus_per_trial
        if fit < most:
            most = fit
            why = f" (trials of {gpus_per_trial} GPU(s) that fit your GPU quota at once: {limits.quota.held()})"
        if fit < 1:
            raise InputError(f"{FIELD}.parallel", f"no trial of {gpus_per_trial} GPU(s) fits your GPU quota now "
                                                  f"({limits.quota.held()}); lower gpus_per_node or end a job")
    if at_once is not None:
        fit, words = at_once(most)
        if fit < most:
            most, why = max(1, fit), f" ({words})"
    parallel = inputs.whole_number(raw.get("parallel", min(DEFAULT_PARALLEL, most)), f"{FIELD}.parallel", 1, most,
                                   why)
    sampler = inputs.choice(raw.get("sampler", SAMPLERS[0]), f"{FIELD}.sampler", SAMPLERS)
    pruner = inputs.choice(raw.get("pruner", PRUNERS[0]), f"{FIELD}.pruner", PRUNERS)
    if pruner != "none" and epochs < MIN_PRUNING_EPOCHS:
        raise InputError(f"{FIELD}.pruner", f"pruning needs epochs of at least {MIN_PRUNING_EPOCHS} (epochs is "
                                            f"{epochs}); allowed: more epochs, or pruner \"none\"")
    min_epochs = inputs.whole_number(raw.get("min_epochs", min(DEFAULT_MIN_EPOCHS, max(1, epochs - 1))),
                                     f"{FIELD}.min_epochs", 1, max(1, epochs - 1),
                                     f" (epochs every trial trains before it may be pruned; epochs is {epochs})")
    seed = inputs.whole_number(raw.get("seed", 0), f"{FIELD}.seed", 0, 2**31 - 1 - MAX_TRIALS)
    return SweepPlan(space=space, trials=trials, parallel=parallel, sampler=sampler, pruner=pruner,
                     min_epochs=min_epochs, seed=seed, epochs=epochs)


def recorded_plan(raw: Any, epochs: int, template: str) -> SweepPlan:
    """A plan as a record holds it (validated at submit; read again as the user's file: the same rules), for a
    sweep of the program `template`."""
    if not isinstance(raw, Mapping):
        raise JobSpecError(FIELD, f"{inputs.shown(raw)} is not an object")
    space = raw.get("space")
    if isinstance(space, Mapping):  # recorded as {"choices": [...]} or a range
        space = {name: value["choices"] if isinstance(value, Mapping) and "choices" in value else value
                 for name, value in space.items()}
    return parse_sweep({**{k: v for k, v in raw.items() if k != "epochs"}, "space": space}, epochs, None, 0,
                       template=template)


# --- a sweep as it stands: the study's trials (programkit.sweep status, run as the user) beside Slurm's tasks ---

MAX_STATUS_BYTES = 8 * 1024 * 1024  # 200 trials x 1000 epochs; the user's file: read capped, every field checked
STUDY_STATES = ("RUNNING", "WAITING", "COMPLETE", "PRUNED", "FAIL")
TASK_ID = re.compile(r"^([0-9]{1,12})_([0-9]{1,6})\Z")
PENDING_TASKS = re.compile(r"^([0-9]{1,12})_\[([0-9,%-]{1,200})\]\Z")
SLURM_STATE = re.compile(r"[A-Z][A-Z_]{0,31}")
RUNNING_STATES = ("RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED", "STOPPED")
# What "best" means, said once: the value Optuna maximises (chexnet.train tells the study the last epoch's
# validation mean AUROC; a pruned trial's is where it stopped, and a pruned trial is never the best).
OBJECTIVE = "final mean AUROC"
BEST_BY = (f"the highest {OBJECTIVE} (the last epoch's validation mean AUROC: the value Optuna maximises) among "
           "completed trials; a pruned trial is never the best")


class SweepStatusError(BadAnswer, ValueError):
    """The study's answer is not one programkit.sweep writes."""


@dataclass(frozen=True)
class TrialRow:
    """One task of the sweep and its trial: what the sweep page and the API list."""

    task: int
    number: int | None  # the study's trial number; None before the task has started
    state: str  # COMPLETED, PRUNED, RUNNING, PENDING, FAILED, CANCELLED (or Slurm's word for a task that ended)
    params: dict[str, Any]
    value: float | None  # the trial's objective: its last epoch's mean AUROC (a pruned trial's where it stopped)
    best_auroc: float | None  # the best epoch's
    epochs_run: int
    pruned_at: int | None  # the epoch after which the pruner stopped it
    started_at: float | None = None  # the study's: when the trial started, seconds since the epoch
    ended_at: float | None = None  # when it finished (None while it runs)

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "trial": self.number, "state": self.state, "params": self.params,
                "value": self.value, "best_auroc": self.best_auroc, "epochs_run": self.epochs_run,
                "pruned": self.pruned_at is not None, "pruned_at": self.pruned_at,
                "started_at": self.started_at, "ended_at": self.ended_at}


@dataclass(frozen=True)
class SweepView:
    plan: SweepPlan
    rows: tuple[TrialRow, ...]
    problem: str = ""  # why the study could not be read (the rows then come from Slurm alone)

    @property
    def best(self) -> TrialRow | None:
        """The completed trial with the highest objective (BEST_BY); a pruned trial never is."""
        done = [row for row in self.rows if row.state == "COMPLETED" and row.value is not None]
        return max(done, key=lambda row: row.value) if done else None

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for row in self.rows:
            found[row.state] = found.get(row.state, 0) + 1
        return found

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {"plan": self.plan.to_dict(), "trials": [row.to_dict() for row in self.rows],
                "best": best.to_dict() if best else None, "objective": OBJECTIVE, "best_by": BEST_BY,
                "counts": self.counts(), "problem": self.problem}


def task_states(sacct: str, array_id: str) -> dict[int, str]:
    """Each task's state from `sacct -n -X -P -j <array> -o JobID,State` (the last run of a requeued task); the
    pending rest of the array comes as one line, "12_[2-5%2]"."""
    states: dict[int, str] = {}
    for line in sacct.splitlines():
        job_id, _, state = line.partition("|")
        state = (state.split() or [""])[0]
        if not SLURM_STATE.fullmatch(state):
            continue
        if (one := TASK_ID.match(job_id.strip())) and one.group(1) == array_id:
            states[int(one.group(2))] = state
        elif (rest := PENDING_TASKS.match(job_id.strip())) and rest.group(1) == array_id:
            for task in _task_ranges(rest.group(2).split("%")[0]):
                states.setdefault(task, state)
    return states


def sweep_outcome(ended: Collection[str]) -> str:
    """How a sweep ended, from the states its tasks ended in (Slurm's, or the study's PRUNED): CANCELLED when any
    task was cancelled (the sweep did not run to its end), COMPLETED when any ran to its end (a pruned trial's task
    ends COMPLETED too), else FAILED. The one rule for the sweep's page, the API and its e-mail."""
    if "CANCELLED" in ended:
        return "CANCELLED"
    return "COMPLETED" if {"COMPLETED", "PRUNED"} & set(ended) else "FAILED"


def _task_ranges(text: str) -> list[int]:
    tasks: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            low, high = int(first), int(last or first)
            tasks.extend(range(low, min(high, low + MAX_TRIALS) + 1))
    return tasks


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value) else None


def _moment(value: Any) -> float | None:
    """A time the study gave (seconds since the epoch), or None: absent (an older programkit.sweep), or nonsense."""
    seconds = _finite(value)
    return seconds if seconds is not None and 0 < seconds < 2**33 else None


def read_status(text: str, plan: SweepPlan) -> dict[int, dict[str, Any]]:
    """The study's trials by task, from `python -m programkit.sweep_cli status` (the user's process, over the user's
    file: every field is checked, anything else left out)."""
    data = inputs.finite_json(text, MAX_STATUS_BYTES, SweepStatusError)
    if not isinstance(data, dict) or not isinstance(data.get("trials"), list):
        raise SweepStatusError("not a sweep's status")
    found: dict[int, dict[str, Any]] = {}
    for trial in data["trials"][:MAX_TRIALS * 2]:
        if not isinstance(trial, dict):
            continue
        number, task, state = trial.get("number"), trial.get("task"), trial.get("state")
        if not all(type(x) is int and 0 <= x < 100_000 for x in (number, task)) or state not in STUDY_STATES:
            continue
        if task >= plan.trials or task in found:
            continue
        params = trial.get("params") if isinstance(trial.get("params"), dict) else {}
        params = {name: value for name, value in params.items() if name in plan.names and (
            type(value) in (int, float, bool) or (isinstance(value, str) and len(value) <= inputs.MAX_NAME))}
        epochs_raw = trial.get("epochs") if isinstance(trial.get("epochs"), dict) else {}
        epochs = {int(step): _finite(value) for step, value in epochs_raw.items()
                  if isinstance(step, str) and step.isascii() and step.isdigit() and len(step) <= 6}
        found[task] = {"number": number, "state": state, "params": params, "value": _finite(trial.get("value")),
                       "epochs": epochs, "started": _moment(trial.get("started")), "ended": _moment(trial.get("ended"))}
    return found


def sweep_view(plan: SweepPlan, trials: dict[int, dict[str, Any]], tasks: dict[int, str],
               problem: str = "") -> SweepView:
    """One row per task: the study's word where it has finished the trial, Slurm's while the task is queued,
    running, or ended without the study hearing of it (cancelled, its node lost and not run again)."""
    rows = []
    for task in range(plan.trials):
        trial, slurm_state = trials.get(task), tasks.get(task, "")
        if trial is None:
            rows.append(TrialRow(task, None, slurm_state or "PENDING", {}, None, None, 0, None))
            continue
        epochs = trial["epochs"]
        values = [value for value in epochs.values() if value is not None]
        last_epoch = max(epochs, default=0)
        state = {"COMPLETE": "COMPLETED", "PRUNED": "PRUNED", "FAIL": "FAILED"}.get(trial["state"])
        if state is None:  # running in the study: what Slurm says of its task
            state = "RUNNING" if slurm_state in RUNNING_STATES or not slurm_state else slurm_state
        rows.append(TrialRow(task, trial["number"], state, trial["params"], trial["value"],
                             max(values) if values else None, last_epoch,
                             last_epoch if trial["state"] == "PRUNED" else None,
                             trial.get("started"), trial.get("ended")))
    return SweepView(plan, tuple(rows), problem)
