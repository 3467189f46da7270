"""The product's line coverage (portal/, spawners/, chexnet/, chexnet_torch/) over the unit tests, the suites and
every Python process of the portal's venv that they start: the hub and the dashboard (started by a box, by the hub,
by a test), the users' servers and their jobs on the Slurm box's nodes, the helpers run as a user. `make coverage`
runs it (docs/testing.md, "Coverage"):

    python -m tests.line_coverage on       # every Python process of the venv measures itself from now on
    ... the tests ...
    python -m tests.line_coverage off      # no process starts measuring any more
    python -m tests.line_coverage report   # combine every process's data; the total, per package, to a summary file

How: a .pth file in the venv's site-packages starts coverage.py in each interpreter while the switch file exists
(coverage's own `patch = subprocess` follows only processes that inherit its environment: the hub's services, runuser
and Slurm's jobs do not). Each process writes its own data file into a directory every user may write (its owner's
file, mode 1777 like /tmp), saved at exit and on SIGTERM. What is not measured, by design: the PyTorch program's
ranks (their own venv, without coverage.py: chexnet_torch is measured where the unit tests and the portal's venv
import it), what runs inside the Kubernetes box's pods (the images' own Python), and processes killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(os.environ.get("DSPORTAL_COVERAGE_DIR", "/var/tmp/dsportal-coverage"))
DATA = ROOT / "data"
SWITCH = ROOT / "on"
RC = ROOT / "coveragerc"
SUMMARY = ROOT / "summary.json"
PACKAGES = ("portal", "spawners", "chexnet", "chexnet_torch")
REPO = Path(__file__).resolve().parents[1]
PTH = "dsportal-coverage.pth"


def pth_line(root: Path) -> str:
    """One line, run by `site` at every interpreter's start: measure while the switch exists, never fail a process.
    The directory is read at each start (DSPORTAL_COVERAGE_DIR, else `root`), so that a process given another one
    (tests/unit/test_line_coverage.py's, while `make coverage` has the venv's switch on) measures into it alone."""
    return ("import os; exec('try:\\n import coverage\\n coverage.process_startup()\\nexcept Exception:\\n pass') "
            f"if os.path.exists(os.path.join(d := os.environ.get('DSPORTAL_COVERAGE_DIR', {str(root)!r}), "
            f"{SWITCH.name!r})) and os.environ.setdefault('COVERAGE_PROCESS_START', os.path.join(d, {RC.name!r})) "
            "else None\n")


PTH_LINE = pth_line(ROOT)


def rc_text() -> str:
    """coverage.py's settings for every measured process, and how the checkout's and the venv's copies combine."""
    paths = "".join(f"{name} =\n    {REPO / name}/\n    */site-packages/{name}/\n" for name in PACKAGES)
    return (f"[run]\nsource_pkgs = {', '.join(PACKAGES)}\nparallel = true\nsigterm = true\n"
            f"data_file = {DATA / '.coverage'}\n"
            f"omit =\n    */tests/*\n\n[paths]\n{paths}\n[report]\nprecision = 1\nskip_empty = true\n")


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def on() -> None:
    shutil.rmtree(ROOT, ignore_errors=True)
    DATA.mkdir(parents=True)
    os.chmod(ROOT, 0o755)
    os.chmod(DATA, 0o1777)
    RC.write_text(rc_text())
    (site_packages() / PTH).write_text(PTH_LINE)
    SWITCH.touch()
    print(f"coverage: on; every process of {sys.prefix} measures itself into {DATA}")


def off() -> None:
    SWITCH.unlink(missing_ok=True)
    (site_packages() / PTH).unlink(missing_ok=True)
    print("coverage: off")


def coverage(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coverage", *argv, f"--rcfile={RC}"], capture_output=True,
                          text=True, cwd=REPO)


def report() -> int:
    files = [p for p in DATA.glob(".coverage.*")]
    print(f"coverage: combining {len(files)} processes' data")
    combined = coverage("combine", "--keep", f"--data-file={DATA / '.coverage'}")
    if combined.returncode != 0:
        print(combined.stdout, combined.stderr, file=sys.stderr)
        return 1
    answer = coverage("json", f"--data-file={DATA / '.coverage'}", "-o", str(ROOT / "coverage.json"))
    if answer.returncode != 0:
        print(answer.stdout, answer.stderr, file=sys.stderr)
        return 1
    found = json.loads((ROOT / "coverage.json").read_text())
    per_package: dict[str, list[int]] = {name: [0, 0] for name in PACKAGES}
    for path, data in found["files"].items():
        package = path.split("/", 1)[0]
        if package in per_package:
            per_package[package][0] += data["summary"]["covered_lines"]
            per_package[package][1] += data["summary"]["num_statements"]
    totals = found["totals"]
    summary = {"processes": len(files), "percent": round(totals["percent_covered"], 1),
               "covered_lines": totals["covered_lines"], "statements": totals["num_statements"],
               "packages": {name: {"covered_lines": c, "statements": n, "percent": round(100 * c / n, 1) if n else 0}
                            for name, (c, n) in per_package.items()}}
    SUMMARY.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"coverage: {summary['percent']} % of {summary['statements']} statements "
          f"({summary['covered_lines']} run), from {len(files)} processes; by package:")
    for name, figures in summary["packages"].items():
        print(f"  {name:14} {figures['percent']:5.1f} % of {figures['statements']}")
    print(f"coverage: the summary is {SUMMARY}; the report by file: "
          f"{sys.executable} -m coverage report --rcfile={RC} --data-file={DATA / '.coverage'}")
    return 0


def main(argv: list[str]) -> int:
    commands = {"on": on, "off": off, "report": report}
    if len(argv) != 1 or argv[0] not in commands:
        print("usage: python -m tests.line_coverage on|off|report", file=sys.stderr)
        return 2
    return commands[argv[0]]() or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
