"""Every benchmark's targets, from the results they saved (docs/results/*.json), as one Markdown table: the summary
at the top of docs/benchmarks.md.

    python -m bench.report [--results DIR]

A benchmark with no saved result is listed with the command that makes it; a target not met says where its run
measured the seconds going (its largest stages). It exits 0 either way (it reports, the benchmarks themselves fail
when a target is not met).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from bench.common import markdown_table
from bench.results import load, results_dir

# The benchmarks in the order docs/benchmarks.md presents them (`make bench` runs them in this order too).
BENCHMARKS = ("pipeline", "parity", "scaling", "spawn", "dashboard", "dashboard_kubernetes", "liveness", "nodes",
              "sweep", "kube", "programs", "gpu_torch")


def measured_text(value: float | None) -> str:
    """A figure as people read it: thousands separated, at most three significant decimals, 'none' for null."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "none"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def rows(directory: Path) -> list[list[str]]:
    """One row per target of every benchmark (or one per benchmark without targets or without a result)."""
    found = []
    for name in BENCHMARKS:
        try:
            record = load(name, directory)
        except (FileNotFoundError, ValueError) as err:
            found.append([name, "no result", "", "", str(err).split(": ", 1)[-1], ""])
            continue
        when = record["finished"][:10]
        if not record["targets"]:
            found.append([name, "no target (figures only)", "", "measured", when, ""])
        for target in record["targets"]:
            verdict = "met" if target["met"] else "**not met**"
            found.append([name, f"{target['name']} {target['target']}", measured_text(target["measured"]), verdict,
                          when, "" if target["met"] else target.get("where", "")])
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=None, help="the results dir (default: docs/results)")
    args = parser.parse_args(argv)
    # a "|" in a name would split a cell
    body = [[cell.replace("|", "\\|") for cell in row] for row in rows(args.results or results_dir())]
    print(markdown_table(["benchmark", "target", "measured", "", "run", "not met: where the seconds go"], body))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
