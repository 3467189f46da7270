"""The server options form: one model, one validator, one renderer, shared by the Slurm and Kubernetes spawners.

Pure functions: what the scheduler says the user may ask for (`JobLimits`, its `limits()`: the pools, the
quota, GPU profiles) and what the user sent go in, a validated `ServerOptions` (or an `OptionsError` naming the
field and what is allowed) comes out. Nothing here talks to a scheduler, so every rule is unit-tested without one,
and any scheduler's limits make a form (the GPU rule is JobLimits.server_gpus). The form and the REST API go
through the same `parse_server_options`, so no value reaches a batch script or a pod manifest unchecked.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from portal import inputs
from portal.inputs import WALL_TIME_HTML_PATTERN, InputError, format_minutes, minutes_of
from portal.records.limits import JobLimits, Pool

FIELDS = ("partition", "gpus", "cpus", "memory_gb", "runtime")
WHOLE = "options"  # what an error about the request as a whole names (a key that is no field name, a non-mapping)

__all__ = ["FIELDS", "OptionsError", "ServerOptions", "default_options",
           "describe_minutes", "form_options", "format_minutes", "minutes_of", "parse_server_options",
           "render_form"]


class OptionsError(InputError):
    """A server option is not allowed. `field` names it; the message says what is allowed."""


@dataclass(frozen=True)
class ServerOptions:
    """A validated request for one JupyterLab server."""

    partition: str
    gpus: int = 0
    cpus: int = 2
    memory_gb: int = 4
    runtime: str = "08:00:00"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe_minutes(minutes: int | None) -> str:
    """A wall-time limit as people say it: "7 days", "1 hour", "90 minutes"."""
    if minutes is None:
        return "no time limit"
    for unit, size in (("day", 1440), ("hour", 60), ("minute", 1)):
        if minutes % size == 0:
            count = minutes // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{minutes} minutes"


def _gpu_note(limits: JobLimits, partition: Pool) -> str:
    quota = limits.quota
    if quota.left < partition.free_gpus_per_node:
        return f" ({quota.held()}: {quota.holders_text()})" if quota.in_use else quota.note()
    return f" ({partition.free_gpus_per_node} free on a node of partition {partition.name} now)"


def _partition(raw: Mapping[str, Any], limits: JobLimits) -> Pool:
    if not limits.pools:
        raise OptionsError("partition", "the cluster reports no partitions that are up")
    names = tuple(p.name for p in limits.pools)
    name = raw.get("partition", limits.default_pool.name)
    name = inputs.text(name, "partition", inputs.MAX_NAME, f"allowed: {', '.join(names)}").strip()
    return limits.pool(inputs.choice(name, "partition", names, "a partition of this cluster"))


@inputs.refused_as(OptionsError)
def parse_server_options(raw: Mapping[str, Any], limits: JobLimits) -> ServerOptions:
    """Validate API input, or a form's through `form_options`, against what the cluster offers and the user may
    use. A value is one plain value: a list is refused, never unwrapped."""
    raw = inputs.fields_of(raw, FIELDS, WHOLE)
    partition = _partition(raw, limits)

    def given(name: str, low: int, high: int, otherwise: int, why: str = "") -> int:
        if name not in raw:
            return min(otherwise, high)
        return inputs.whole_number(raw[name], name, low, high, why)

    defaults = ServerOptions(partition=partition.name)
    gpus = given("gpus", 0, limits.server_gpus(partition), 0, _gpu_note(limits, partition))
    counts = limits.gpu_counts(partition)
    if counts is not None:
        inputs.choice(gpus, "gpus", counts, "a GPU profile", _gpu_note(limits, partition))
    cpus = given("cpus", 1, partition.cpus_per_node, defaults.cpus)
    memory_gb = given("memory_gb", 1, max(1, partition.memory_mb_per_node // 1024), defaults.memory_gb)
    longest = partition.max_minutes
    default_runtime = defaults.runtime if longest is None or minutes_of(defaults.runtime) <= longest else (
        format_minutes(longest))  # lowered to the partition's limit, as the other defaults are to its nodes
    budget = limits.budget
    if budget is not None and gpus and budget.fits_minutes(gpus) < minutes_of(default_runtime):
        default_runtime = format_minutes(max(1, budget.fits_minutes(gpus)))  # lowered to what the budget leaves
    runtime = raw.get("runtime", default_runtime)
    runtime = inputs.wall_time(runtime, "runtime", partition.max_minutes, f" (partition {partition.name}'s limit)")
    refused = budget.refusal(1, gpus, minutes_of(runtime), what="server") if budget is not None and gpus else ""
    if refused:  # the weekly GPU-hours budget (docs/gpus.md): a server's GPUs count for its whole wall time
        raise OptionsError("runtime", refused)
    return ServerOptions(partition=partition.name, gpus=gpus, cpus=cpus, memory_gb=memory_gb, runtime=runtime)


@inputs.refused_as(OptionsError)
def form_options(formdata: Mapping[str, Any], limits: JobLimits) -> ServerOptions:
    """The spawn form's data (each field a list of strings, as the hub passes it) validated as API input is."""
    return parse_server_options(inputs.form_values(formdata, FIELDS, WHOLE), limits)


def default_options(limits: JobLimits) -> ServerOptions:
    """What the form shows first: the default partition, one GPU if the user may have one (and their weekly
    GPU-hours leave a minute of it; else none)."""
    partition = limits.default_pool
    counts = limits.gpu_counts(partition) or (0, *range(1, limits.server_gpus(partition) + 1))
    try:
        return parse_server_options({"gpus": min(counts, key=lambda n: abs(n - 1))}, limits)
    except OptionsError as err:
        if err.field != "runtime" or 0 not in counts:
            raise
        return parse_server_options({"gpus": 0}, limits)


def _gpu_input(limits: JobLimits, partition: Pool, chosen: int) -> str:
    max_gpus = limits.server_gpus(partition)
    counts = limits.gpu_counts(partition)
    if counts is None:
        return (f'<input id="ds-gpus" name="gpus" type="number" min="0" max="{max_gpus}" '
                f'value="{min(chosen, max_gpus)}" class="form-control">')
    options = "".join(f'<option value="{n}"{" selected" if n == chosen else ""}>{n}</option>' for n in counts)
    return f'<select id="ds-gpus" name="gpus" class="form-select form-control">{options}</select>'


def render_form(limits: JobLimits, chosen: ServerOptions | None = None, pool_label: str = "Partition") -> str:
    """The HTML inside JupyterHub's spawn form (the hub adds the <form> and the submit button)."""
    chosen = chosen or default_options(limits)
    esc = html.escape
    options = "".join(
        f'<option value="{esc(p.name)}"{" selected" if p.name == chosen.partition else ""}>'
        f"{esc(p.name)}: {p.gpus_per_node} GPUs, {p.cpus_per_node} CPUs, "
        f"{p.memory_mb_per_node // 1024} GB per node, up to {describe_minutes(p.max_minutes)}</option>"
        for p in limits.pools
    )
    partition = limits.pool(chosen.partition) or limits.default_pool
    max_gpus = limits.server_gpus(partition)
    quota = limits.quota
    in_use = f", {quota.in_use} in use ({esc(quota.holders_text())})" if quota.in_use else ""
    budget_help, budget_note = "", ""
    if limits.budget is not None:  # a server's GPUs count for its whole wall time against the week's GPU-hours
        budget_help = ' aria-describedby="ds-budget"'
        budget_note = (f'<small id="ds-budget" class="form-text text-muted">GPUs x wall time count against '
                       f"{esc(limits.budget.words())}.</small>")
    return f"""
<div class="form-group mb-3">
  <label for="ds-partition" class="form-label">{esc(pool_label)}</label>
  <select id="ds-partition" name="partition" class="form-select form-control">{options}</select>
</div>
<div class="form-group mb-3">
  <label for="ds-gpus" class="form-label">GPUs</label>
  {_gpu_input(limits, partition, chosen.gpus)}
  <small class="form-text text-muted">0 to {max_gpus}: your quota is {quota.limit}{in_use},
    {partition.free_gpus_per_node} free on a node now.</small>
</div>
<div class="form-group mb-3">
  <label for="ds-cpus" class="form-label">CPUs</label>
  <input id="ds-cpus" name="cpus" type="number" min="1" max="{partition.cpus_per_node}" value="{chosen.cpus}"
         class="form-control">
</div>
<div class="form-group mb-3">
  <label for="ds-memory" class="form-label">Memory (GB)</label>
  <input id="ds-memory" name="memory_gb" type="number" min="1" max="{partition.memory_mb_per_node // 1024}"
         value="{chosen.memory_gb}" class="form-control">
</div>
<div class="form-group mb-3">
  <label for="ds-runtime" class="form-label">Wall time (HH:MM:SS)</label>
  <input id="ds-runtime" name="runtime" type="text" value="{esc(chosen.runtime)}" class="form-control"
         pattern="{WALL_TIME_HTML_PATTERN}"{budget_help}>
  {budget_note}
</div>
"""
