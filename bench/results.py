"""Benchmark results as JSON: every benchmark saves what it printed, so that docs/benchmarks.md and the chart
(docs/benchmarks_chart.py) are drawn from files a command wrote, not from numbers typed in by hand.

    save("pipeline", command="python -m bench.pipeline ...", targets=[Target(...)], data={...})

writes `<results dir>/pipeline.json`; the results dir is docs/results in this checkout, or $DSPORTAL_BENCH_RESULTS.
One file per benchmark, overwritten by its next run; `load` reads it back. A record:

    {"schema": 1, "benchmark": "spawn", "finished": "2026-11-23T05:00:00Z" (UTC), "machine": {"cores", "host"},
     "commit": `git describe --always --dirty` of the checkout (null outside git), "command": what reproduces it,
     "met": every target met (true for a benchmark without targets),
     "targets": [{"name", "measured", "target", "met", "where"}, ...], "data": {the benchmark's own figures}}
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "docs" / "results"
SCHEMA = 1
# A benchmark's name becomes a file name: the module's own name, nothing that could leave the results dir.
NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


@dataclass(frozen=True)
class Target:
    """One target of a benchmark: what was measured against what was asked, and whether it was met."""

    name: str  # what is measured, e.g. "p99 of api/jobs (ms)"
    measured: float
    target: str  # the target as people read it, e.g. "<= 250"
    met: bool
    where: str = ""  # a target not met: where the measured seconds go (the largest stages), as its run printed it


def results_dir() -> Path:
    return Path(os.environ.get("DSPORTAL_BENCH_RESULTS") or RESULTS_DIR)


def checked_name(benchmark: str) -> str:
    if not NAME.fullmatch(benchmark):
        raise ValueError(f"benchmark name {benchmark[:40]!r}: allowed: a lower-case module name ([a-z][a-z0-9_]*, "
                         "at most 40 characters), e.g. 'spawn'")
    return benchmark


def commit() -> str | None:
    """The checkout's commit (`-dirty` when files differ from it): which code measured; None outside git."""
    try:
        found = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=12"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if found.returncode != 0:
        return None
    return found.stdout.strip() or None


def save(benchmark: str, *, command: str, targets: list[Target], data: dict[str, Any]) -> Path:
    """Write `<results dir>/<benchmark>.json` (atomically: a reader never sees half a file) and return its path.
    Values must be JSON's: numbers (NaN and infinity become null), strings, booleans, None, lists and dicts;
    numpy scalars are taken as their Python value; anything else is refused naming where it is in `data`."""
    checked_name(benchmark)
    out = results_dir()
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "schema": SCHEMA,
        "benchmark": benchmark,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cores": len(os.sched_getaffinity(0)), "host": platform.node()},
        "commit": commit(),
        "command": command,
        "met": all(t.met for t in targets),
        "targets": [asdict(t) for t in targets],
        "data": data,
    }
    path = out / f"{benchmark}.json"
    partial = path.with_suffix(".json.partial")
    text = json.dumps(_plain(record, ""), indent=1, sort_keys=False) + "\n"  # refused before anything is written
    partial.write_text(text)
    partial.replace(path)
    return path


def load(benchmark: str, directory: Path | None = None) -> dict[str, Any]:
    """The last saved result of `benchmark`; a clear error naming the command when there is none."""
    path = (directory or results_dir()) / f"{checked_name(benchmark)}.json"
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no result yet; run python -m bench.{benchmark} (or make bench)") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err}); run python -m bench.{benchmark} again") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: a {type(record).__name__}, not a result; run python -m bench.{benchmark} again")
    if record.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {record.get('schema')!r}, this code reads {SCHEMA}; run the benchmark again")
    return record


def _plain(value: Any, where: str) -> Any:
    """JSON's values only. JSON has no NaN or infinity: they are written as null (a run that measured nothing)."""
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        value = value.item()  # numpy's float32, int64, bool_: json refuses them, their values are plain
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise TypeError(f"result{where}: a {type(value).__name__} is not JSON; allowed: numbers, strings, booleans, "
                    "None, lists and dicts of them")
