"""The submit form (pure): what it posts read into a job spec (a sweep's fields into its `sweep`), the fields it
shows with their limits, the values it shows again, and its one-line sum of the request (which portal.js keeps in
step as the user types). Its handler is portal.service.pages.SubmitPageHandler."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from portal.inputs import MAX_PATH, InputError, decode_form, minutes_of, shown
from portal.records.budget import gpu_hours, hours_words
from portal.records.programs import COMMON_OPTIONS, LEGACY_OPTIONS, Program, ProgramField, registry
from portal.records.spec import (
    BOOLEAN_FIELDS,
    FIELDS,
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_IMAGE_SIZE,
    MIN_IMAGE_SIZE,
    WHOLE,
    JobLimits,
    JobSpec,
    JobSpecError,
    format_minutes,
    parse_job_spec,
)
from portal.records.sweep import parse_sweep

CHECKED = "on"  # what a browser sends for a checked checkbox without a value attribute


KIND = "kind"
KINDS = ("single", "sweep")
SWEEP_FORM = {"sweep_trials": ("trials",), "sweep_parallel": ("parallel",), "sweep_sampler": ("sampler",),
              "sweep_pruner": ("pruner",), "sweep_min_epochs": ("min_epochs",),
              "sweep_lr_low": ("space", "lr", "low"), "sweep_lr_high": ("space", "lr", "high"),
              "sweep_batch_size": ("space", "batch_size"), "sweep_image_size": ("space", "image_size"),
              "sweep_model": ("space", "model")}


def form_sweep(decoded: Mapping[str, list[str]]) -> dict[str, object]:
    """The "sweep" of a posted form whose kind is "sweep": its fields as the API takes them."""
    sweep: dict[str, object] = {}
    space: dict[str, object] = {}
    for name, where in SWEEP_FORM.items():
        text = (decoded.get(name) or [""])[0].strip()
        if not text:
            continue
        if where[0] != "space":
            sweep[where[0]] = text
        elif len(where) == 3:
            space.setdefault(where[1], {"log": True})[where[2]] = text  # type: ignore[index]
        else:
            space[where[1]] = [item.strip() for item in text.split(",") if item.strip()]
    if space:
        sweep["space"] = space
    return sweep


SWEEP_FORM_DEFAULTS = {"sweep_trials": "8", "sweep_parallel": "2", "sweep_lr_low": "1e-4", "sweep_lr_high": "1e-2",
                       "sweep_sampler": "tpe", "sweep_pruner": "median", "sweep_min_epochs": "2"}


def sweep_form_values(given: Mapping[str, object], limits: JobLimits | None = None) -> dict[str, str]:
    """What the form's sweep fields show: the "sweep" of what was posted (or of the job run again), else the
    defaults, with the trials at once that the user's quota and the cluster's nodes hold for `limits` (the API's
    default for a sweep of the default trial: portal.records.sweep.parse_sweep)."""
    sweep = given.get("sweep")
    if not isinstance(sweep, Mapping):
        return {**SWEEP_FORM_DEFAULTS, **({"sweep_parallel": str(default_parallel(limits))} if limits else {})}
    shown_values: dict[str, str] = {}
    for name, where in SWEEP_FORM.items():
        value: object = sweep
        for key in where:
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, Mapping) and "choices" in value:  # a recorded plan's list
            value = value["choices"]
        shown_values[name] = ", ".join(map(str, value)) if isinstance(value, list) else "" if value is None \
            else str(value)
    return shown_values


def default_parallel(limits: JobLimits) -> int:
    """The trials at once that a sweep leaving `parallel` out gets, for the default trial on these limits."""
    try:
        trial = parse_job_spec({}, replace(limits, max_jobs=None), user_can_read=lambda path: True, sweep=True)
        plan = parse_sweep({}, trial.epochs, limits, trial.gpus, lambda most: limits.runs_at_once(trial, most))
    except InputError:  # room for no trial at all: the plain default, which the submit refuses with the reason
        return int(SWEEP_FORM_DEFAULTS["sweep_parallel"])
    return plan.parallel


def sweep_form_field(field: str | None) -> str:
    """The form field of an error about the sweep ("sweep.space.lr.low" -> "sweep_lr_low"); "" for others."""
    if not field or not field.startswith("sweep"):
        return ""
    path = tuple(part.split("[")[0] for part in field.split(".")[1:])
    return next((name for name, where in SWEEP_FORM.items() if path[:len(where)] == where or
                 (len(where) == 2 and path[:2] == where)), "")


def form_spec(arguments: dict[str, list[bytes]]) -> dict[str, object]:
    """The JobSpec fields of a posted form: empty fields mean the default; checkboxes are present or not. With
    kind "sweep", its sweep fields too (`form_sweep`).

    Refused (InputError, naming the field): a field the form does not have, a value that is not UTF-8 or longer
    than a path may be, a field sent twice, and a post with no field at all (a browser sends every input of the
    form, empty or not: nothing at all is not a person submitting the form)."""
    own_fields = program_form_names()
    decoded = decode_form(arguments, (*FORM_FIELDS, *own_fields, KIND, *SWEEP_FORM), WHOLE, cap=MAX_PATH)
    if not decoded:
        raise InputError("template", f"no field was sent; allowed: the form's fields ({', '.join(FORM_FIELDS)})")
    for name, sent in decoded.items():
        if len(sent) > 1:
            raise InputError(name, f"sent {len(sent)} times; allowed: once")
    spec: dict[str, object] = {}
    for name in FORM_FIELDS:
        values = decoded.get(name)
        if name in BOOLEAN_FIELDS:
            spec[name] = checkbox(name, values)
            continue
        if values and values[0].strip():
            spec[name] = values[0].strip()
    # The chosen program's own fields (each program's are posted as "<program>.<field>"; the others' are left out).
    chosen = str(spec.get("template", registry().default.name))
    for posted, (program, field) in own_fields.items():
        if program.name != chosen:
            continue
        values = decoded.get(posted)
        if field.kind == "bool":
            spec[field.name] = checkbox(field.name, values)
        elif values and values[0].strip():
            spec[field.name] = values[0].strip()
    kind = (decoded.get(KIND) or ["single"])[0]
    if kind not in KINDS:
        raise InputError(KIND, f"{shown(kind)} is not a kind of job; allowed: {', '.join(KINDS)}")
    if kind == "sweep":
        spec["sweep"] = form_sweep(decoded)
    return spec


# The form's own inputs: JobSpec's fields but those a program declares (fp16, xla: chexnet's), posted per program.
FORM_FIELDS = tuple(name for name in FIELDS if name not in LEGACY_OPTIONS)


def program_form_names() -> dict[str, tuple[Program, ProgramField]]:
    """Each registered program's own fields (its model aside: one select for all) as the form posts them:
    "<program>.<field>" (two programs may both have a field of one name)."""
    return {f"{p.name}.{f.name}": (p, f) for p in registry().programs for f in p.fields if f.name not in COMMON_OPTIONS}


def checkbox(name: str, values: list[str] | None) -> bool:
    """A checkbox of a posted form (sent at most once): ticked when sent, as browsers send it; unticked, absent."""
    if values and values[0] != CHECKED:
        raise InputError(name, f"{shown(values[0])} is not a checkbox's value; allowed: {CHECKED} or absent")
    return bool(values)


@dataclass(frozen=True)
class FormField:
    """One field of the submit form: its input type ("number", "text" or "select", with its choices) and, beside
    it, its unit and what is allowed."""

    name: str
    kind: str
    hint: str
    choices: tuple[str, ...] = ()


def form_fields(limits: JobLimits) -> list[FormField]:
    """The submit form's fields, from the user's limits now."""
    wall = "" if limits.max_minutes is None else f", at most {format_minutes(limits.max_minutes)}"
    launcher = f"; the job's launcher takes {limits.launcher.words()} on one node" if limits.launcher else ""
    programs = registry()
    models = tuple(dict.fromkeys(m for p in programs.programs for m in p.models))
    return [
        FormField("template", "select", "the training program: each is explained below the form's fields" + (
                  f"; not on this scheduler yet: {', '.join(n for n in programs.names if n not in limits.programs)}"
                  if limits.programs and set(programs.names) - set(limits.programs) else ""),
                  limits.programs or programs.names),
        FormField("model", "select", "DenseNet-121 is CheXNet's", models),
        FormField("nodes", "number", f"1-{limits.nodes}"),
        FormField("gpus_per_node", "number", f"0-{limits.max_gpus_per_node} (one worker process per GPU)"),
        FormField("cpus_per_task", "number", f"per worker; {limits.cpus_per_node} CPUs per node{launcher}"),
        FormField("memory_gb", "number", f"GB per node, 1-{limits.memory_gb_per_node}"),
        FormField("time_limit", "text", f"HH:MM:SS{wall}"),
        FormField("epochs", "number", f"1-{MAX_EPOCHS}"),
        FormField("batch_size", "number", f"images per GPU per step, 1-{MAX_BATCH_SIZE}"),
        FormField("image_size", "number", f"pixels, square, {MIN_IMAGE_SIZE}-{MAX_IMAGE_SIZE}"),
        FormField("data_dir", "text", f"a directory you can read; the site's data set: {limits.default_data_dir}"),
    ]


def form_values(limits: JobLimits, given: Mapping[str, object]) -> dict[str, object]:
    """What the form shows: `given` (a job's settings for "run again", or what was posted) over the values that a
    submit leaving the field out uses (parse_job_spec's defaults for these limits, the same as the API's)."""
    open_limits = replace(limits, max_jobs=None)
    # The fields left out take what fits beside those given (2 nodes: fewer CPUs each, where a launcher is placed)
    placed = {name: given[name] for name in ("nodes", "gpus_per_node", "cpus_per_task") if given.get(name)}
    try:
        defaults = parse_job_spec(placed, open_limits, user_can_read=lambda path: True).to_dict()
    except JobSpecError:  # those given cannot be placed (the submit says why) or the limits have room for nothing
        try:
            defaults = parse_job_spec({}, open_limits, user_can_read=lambda path: True).to_dict()
        except JobSpecError:  # limits with room for no job at all (no usable node): the plain defaults, shown
            defaults = {**JobSpec().to_dict(), "data_dir": limits.default_data_dir}
    return {**defaults, **{name: value for name, value in given.items() if value not in ("", None)}}


def request_summary(values: Mapping[str, object], limits: JobLimits, trials: int | None = None) -> str:
    """One line that sums the request up: "2 nodes x 1 GPU, 8 CPUs and 32 GB in all, at most 4 h, so at most 8
    GPU-hours; 2 of your 4 GPUs (1 in use now)"; a sweep of `trials` costs each trial's most ("at most 4 h a trial,
    so at most 32 GPU-hours for 4 trials"). Empty while a field it needs is not a value (the form shows that field's
    error). The GPU-hours are nodes x GPUs x the time limit (a started minute counts whole) x trials, to the hundredth,
    rounded half up (portal.js says it in the same words as the fields change)."""
    try:
        nodes, gpus, cpus, memory = (int(str(values[name])) for name in (
            "nodes", "gpus_per_node", "cpus_per_task", "memory_gb"))
        minutes = minutes_of(str(values["time_limit"]))
    except (KeyError, ValueError, AttributeError):
        return ""
    sweep, runs = trials is not None, 1 if trials is None else trials
    for_trials = f" for {runs} trial{'s' if runs != 1 else ''}" if sweep else ""
    cost = f", so at most {gpu_hours(nodes * gpus * minutes * runs)} GPU-hours{for_trials}" if gpus > 0 else ""
    in_use = f" ({limits.quota.in_use} in use now)" if limits.quota.in_use else ""
    budget = f"; {limits.budget.words()}" if limits.budget is not None else ""
    return (f"{nodes} node{'s' if nodes != 1 else ''} x {gpus} GPU{'s' if gpus != 1 else ''}, "
            f"{nodes * max(1, gpus) * cpus} CPUs and {nodes * memory} GB in all, at most {hours_words(minutes)}"
            f"{' a trial' if sweep else ''}{cost}; {nodes * gpus} of your {limits.quota.limit} GPUs{in_use}{budget}")


def form_summary(values: Mapping[str, object], limits: JobLimits, kind: str, sweep_values: Mapping[str, str]) -> str:
    """request_summary of the form as shown: a sweep's with its trials (empty while that field is not a number)."""
    if kind != "sweep":
        return request_summary(values, limits)
    trials = sweep_values.get("sweep_trials", "").strip()
    return request_summary(values, limits, int(trials)) if trials.isdigit() else ""
