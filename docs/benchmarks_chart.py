"""Draw docs/benchmarks.png from the benchmarks' saved results (docs/results/<name>.json, bench.results.save).

    python docs/benchmarks_chart.py [--results DIR] [--out PATH]

Nothing here is typed in: every bar, line and title is computed from a result file. A panel whose file is
missing or unreadable says which command makes it, the others are still drawn, and the script exits 0; it prints
which panel came from which file and when that run finished. What each panel reads from the record's "data":

    pipeline   rows: [{"name", "median", "min", "max"} (images/s), optional "limit" (the name of the row that is
               its decode limit) and "ratio" (median / the limit's median)]; optional "unit", "cores"
    spawn      ratio, target_ratio, runs_per_spawner, totals.<portal|stock>.median,
               segments.<portal|stock>.<submit|queue|job_launch|server_start|hub_ready|first_page> (medians, s)
    dashboard  requests: [{"request", "p50_ms", "p99_ms"}] or {"<request>": {"p50_ms", "p99_ms"}}; optional users,
               submitters, seconds, target_p99_ms, errors (else the sum of the requests' "errors")
    liveness   measures: [{"name", "runs", "median", "min", "max", "target_s", "statistic"}]
    scaling    rows: [{"name", "median", "min", "max"}], efficiency: {"<workers>": fraction}, model, image_size
    nodes      rows: [{"name", "median", "min", "max"}], two_nodes_over_one
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # `bench` is a package of this checkout, not of the installed distribution
from bench.results import load, results_dir  # noqa: E402

OUT = Path(__file__).with_name("benchmarks.png")
PANELS = ("pipeline", "spawn", "dashboard", "liveness", "scaling", "nodes")
# The spawn's six segments, grouped as the chart shows them: the three that differ between the spawners, and
# the rest (each well under 0.1 s) together.
SPAWN_GROUPS = {"queue": ("queue",), "server start": ("server_start",), "hub ready": ("hub_ready",),
                "other": ("submit", "job_launch", "first_page")}
LIMIT_GREY = "#999"
MEASURED = "#2a7"


@dataclass(frozen=True)
class Outcome:
    """What became of one panel: drawn from `source` (finished at `finished`), or why not (`note`)."""

    panel: str
    source: Path
    drawn: bool
    note: str
    finished: str | None = None
    command: str | None = None


def number(value: Any) -> float:
    """A saved figure as a float: null (a run that measured nothing) is NaN, which matplotlib leaves undrawn."""
    return math.nan if value is None else float(value)


def min_max_errors(rows: list[dict]) -> list[list[float]]:
    """matplotlib's error bars (distances below and above the median) for rows' min..max; none where unmeasured."""
    def distance(a: float, b: float) -> float:
        return 0.0 if math.isnan(a) or math.isnan(b) else max(0.0, a - b)

    return [[distance(number(r["median"]), number(r["min"])) for r in rows],
            [distance(number(r["max"]), number(r["median"])) for r in rows]]


def spread_bars(ax, rows: list[dict], unit: str, grey: set[str] = frozenset()) -> None:
    """Horizontal bars of medians with their min..max as error bars; log scale when they span a factor 10."""
    medians = [number(r["median"]) for r in rows]
    colours = [LIMIT_GREY if r["name"] in grey else MEASURED for r in rows]
    ax.barh([r["name"] for r in rows], medians, xerr=min_max_errors(rows), color=colours, capsize=3)
    ax.invert_yaxis()  # the first row on top, as in the printed table
    finite = [m for m in medians if m > 0]
    if finite and max(finite) / min(finite) > 10:
        ax.set_xscale("log")
    ax.set_xlabel(f"{unit} (median; bars: min..max)")


def pipeline(ax, data: dict) -> str:
    rows, unit = data["rows"], data.get("unit", "images/s")
    limits = {r["limit"] for r in rows if r.get("limit") and r.get("limit") != r["name"]}
    spread_bars(ax, rows, unit, grey=limits)
    for index, row in enumerate(rows):
        if row.get("ratio") is not None and row["name"] not in limits:
            ax.annotate(f" {row['ratio']:.2f}x limit", (number(row["median"]), index), va="center", fontsize=8)
    fastest = max((r for r in rows if r["name"] not in limits), key=lambda r: number(r["median"]))
    ratio = f", {fastest['ratio']:.2f}x its limit" if fastest.get("ratio") is not None else ""
    cores = f", {data['cores']} cores" if "cores" in data else ""
    return f"Input pipeline{cores}: {fastest['name']} {number(fastest['median']):,.0f} {unit}{ratio}"


def spawn(ax, data: dict) -> str:
    sides = [name for name in ("portal", "stock") if name in data["segments"]]
    labels = {"portal": "ours", "stock": "stock batchspawner"}
    left = [0.0] * len(sides)
    for group, segments in SPAWN_GROUPS.items():
        widths = [sum(number(data["segments"][side][s]) for s in segments) for side in sides]
        widths = [0.0 if math.isnan(w) else w for w in widths]
        ax.barh([labels[s] for s in sides], widths, left=left, label=group)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    totals = [number(data["totals"][side]["median"]) for side in sides]
    ax.scatter(totals, [labels[s] for s in sides], marker="|", s=600, color="black", label="total (median)")
    runs = "/".join(str(data["runs_per_spawner"][s]) for s in sides)
    ax.set_xlabel(f"seconds, form submit -> JupyterLab (medians of N={runs})")
    ax.legend(loc="lower right", fontsize=8)
    if data.get("ratio") is None:
        return "Spawn through Slurm: no runs of both spawners"
    return f"Spawn through Slurm: ours {data['ratio']:.2f}x stock (target <= {data['target_ratio']:.2f})"


def dashboard(ax, data: dict) -> str:
    requests = data["requests"]
    if isinstance(requests, dict):  # {request: figures}, in the order they were printed
        requests = [{"request": name, **figures} for name, figures in requests.items()]
    errors = data["errors"] if "errors" in data else sum(r.get("errors", 0) for r in requests)
    x = range(len(requests))
    ax.bar([i - 0.2 for i in x], [number(r["p50_ms"]) for r in requests], width=0.4, label="p50")
    ax.bar([i + 0.2 for i in x], [number(r["p99_ms"]) for r in requests], width=0.4, label="p99")
    if data.get("target_p99_ms") is not None:
        ax.axhline(data["target_p99_ms"], color="red", linestyle="--",
                   label=f"p99 target, {data['target_p99_ms']:g} ms")
    ax.set_xticks(list(x), [r["request"] for r in requests])
    ax.set_ylabel("ms")
    ax.legend(fontsize=8)
    parts = [f"{data['users']:,} users" if "users" in data else None,
             f"{data['submitters']} submitting" if "submitters" in data else None,
             f"{data['seconds']:.0f} s" if "seconds" in data else None,
             f"{errors} errors"]
    return "Dashboard: " + ", ".join(p for p in parts if p)


def liveness(ax, data: dict) -> str:
    measures = data["measures"]
    names = [m["name"].replace(" -> ", " ->\n", 1) for m in measures]
    medians = [number(m["median"]) for m in measures]
    ax.bar(names, medians, yerr=min_max_errors(measures), capsize=4, color=MEASURED, label="median (bars: min..max)")
    ax.scatter(names, [m["target_s"] for m in measures], color="red", marker="_", s=2000,
               label="target (of the median or of every run)")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=8)
    runs = " and ".join(str(m["runs"]) for m in measures)
    # each measure against its target, on the statistic the target holds for (older results: every run, the max)
    worst = max(number(m[m.get("statistic", "max")]) / m["target_s"] for m in measures)
    return f"TensorBoard liveness (runs: {runs}): at {worst:.0%} of its target, the furthest"


def scaling(ax, data: dict) -> str:
    spread_bars(ax, data["rows"], data.get("unit", "images/s"))
    efficiency = ", ".join(f"{number(e):.0%} at {n}" for n, e in data["efficiency"].items())
    return f"Horovod, one machine, {data['model']} {data['image_size']} px: efficiency {efficiency} workers"


def nodes(ax, data: dict) -> str:
    spread_bars(ax, data["rows"], data.get("unit", "images/s"))
    ratio = data.get("two_nodes_over_one")
    what = f"{ratio:.2f}x the images/s of 1 node" if ratio is not None else "1 node vs 2 nodes"
    return f"2 workers on 2 nodes: {what} (CPU figures)"


DRAW: dict[str, Callable[[Any, dict], str]] = {"pipeline": pipeline, "spawn": spawn, "dashboard": dashboard,
                                               "liveness": liveness, "scaling": scaling, "nodes": nodes}


def empty(ax, panel: str, message: str) -> None:
    ax.clear()
    ax.set_axis_off()
    ax.set_title(panel)
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, fontsize=10, transform=ax.transAxes)


def targets_line(record: dict) -> str:
    """The panel's second title line: its targets met or not, and the day the run finished."""
    targets = record["targets"]
    met = sum(1 for t in targets if t["met"])
    verdict = f"targets met: {met} of {len(targets)}" if targets else "no target (measured figures)"
    return f"{verdict}; {record['finished'][:10]}"


def draw_panel(ax, panel: str, directory: Path) -> Outcome:
    source = directory / f"{panel}.json"
    try:
        record = load(panel, directory)
    except FileNotFoundError:
        empty(ax, panel, f"no result: run python -m bench.{panel}")
        return Outcome(panel, source, False, f"no result: run python -m bench.{panel}")
    except ValueError as err:
        empty(ax, panel, f"unreadable result: run python -m bench.{panel} again")
        return Outcome(panel, source, False, str(err))
    try:
        title = DRAW[panel](ax, record["data"])
    except (KeyError, TypeError, ValueError, IndexError) as err:  # a record of another shape than this panel reads
        empty(ax, panel, f"{source.name} lacks what this panel reads ({type(err).__name__}: {err});\n"
                         f"run python -m bench.{panel} again")
        return Outcome(panel, source, False, f"not drawn: {type(err).__name__}: {err}", record.get("finished"))
    ax.set_title(f"{title}\n{targets_line(record)}", fontsize=10)
    return Outcome(panel, source, True, "drawn", record["finished"], record["command"])


def draw(directory: Path) -> tuple[plt.Figure, list[Outcome]]:
    fig, axes = plt.subplots(3, 2, figsize=(14, 13))
    outcomes = [draw_panel(ax, panel, directory) for ax, panel in zip(axes.flat, PANELS, strict=True)]
    fig.tight_layout()
    return fig, outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=None, help="where the result files are (docs/results)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the picture to write (default {OUT})")
    args = parser.parse_args(argv)
    directory = args.results or results_dir()
    fig, outcomes = draw(directory)
    fig.savefig(args.out, dpi=90)
    plt.close(fig)
    for outcome in outcomes:
        if outcome.drawn:
            print(f"{outcome.panel:<10} {outcome.source} (finished {outcome.finished}): {outcome.command}")
        else:
            print(f"{outcome.panel:<10} {outcome.source}: {outcome.note}")
    drawn = sum(o.drawn for o in outcomes)
    print(f"{args.out}: {drawn} of {len(outcomes)} panels drawn from results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
