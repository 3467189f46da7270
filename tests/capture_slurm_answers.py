"""Capture a Slurm release's real answers for the unit tests: `python -m tests.capture_slurm_answers`, as root,
with DSPORTAL_CONFIG naming a box that runs (`make up`, or `make up SLURM=24.11`; the test box's settings will do).

It submits, as alice, the jobs every reader must get right - one completed, one failed (exit 3), a 2-node GPU job
running, a job array of 4 one-GPU tasks 2 at a time, a held job asking GPUs per job, a job requeued while it ran, and
one whose name forges a line of squeue's text output - and writes what Slurm answers about them, for every
data_parser version the release has, to tests/unit/data/slurm-<release>/:

    squeue-<version>.json      squeue --json=<version>
    sacct-<version>.json       sacct --json=<version> -a -X --duplicates -S <the capture's start>
    scontrol-<what>-<version>.json   scontrol show job|node|partition --json=<version> (from 23.02; not in 22.05)
    scontrol-node.txt, scontrol-partition.txt   scontrol show node -d -o, scontrol show partition -o
    capture.json               the release, its versions, the job ids and what each job is

Slurm 22.05 knows one version and no `--json=<version>`: its files are named after the one it writes (v0.0.38).
Every job it submitted is cancelled at the end; nothing else of the box is touched.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from portal.config import load

DATA = Path(__file__).resolve().parent / "unit" / "data"
USER = "alice"
FORGED = "x\n900001|alice|RUNNING|1:00|1|gres:gpu:4|node1|y"  # a line of `squeue -o %i|%u|%T|...` in a name
JOBS = {  # name: (what it is, sbatch's arguments)
    "done": ("completed", ["--wrap", "true"]),
    "failed": ("failed, exit 3", ["--wrap", "exit 3"]),
    "gpujob": ("running on 2 nodes, 1 GPU on each", ["-N2", "--gres=gpu:1", "--wrap", "sleep 600"]),
    "arr": ("array of 4 one-GPU tasks, 2 at a time", ["--array=0-3%2", "--gres=gpu:1", "--wrap", "sleep 600"]),
    "perjob": ("held, 1 GPU per job", ["--hold", "--gpus=1", "--wrap", "true"]),
    "requeued": ("requeued while running", ["--wrap", "sleep 600"]),
    FORGED: ("a name that forges a line of squeue's text", ["--wrap", "sleep 600"]),
}


class Box:
    def __init__(self) -> None:
        self.cfg = load()
        self.env = {**os.environ, "SLURM_CONF": str(self.cfg.slurm_conf_path)}

    def run(self, *argv: str, user: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.cfg.slurm_bin_dir / argv[0]), *argv[1:]]
        if user:
            command = ["runuser", "-u", user, "--", "env", f"SLURM_CONF={self.env['SLURM_CONF']}", *command]
        result = subprocess.run(command, env=self.env, text=True, capture_output=True, timeout=60, cwd="/tmp")
        if check and result.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def state(self, job_id: str) -> str:
        answer = self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.split()
        return answer[0] if answer else "GONE"

    def wait(self, job_id: str, *states: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.state(job_id) not in states:
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job_id} is {self.state(job_id)}, not {'/'.join(states)}, after {timeout} s")
            time.sleep(1)


def release_of(box: Box) -> str:
    found = re.search(r"(\d+)\.(\d+)", box.run("scontrol", "version").stdout)
    if not found:
        raise SystemExit("scontrol version names no release")
    return f"{int(found[1]):02d}.{int(found[2]):02d}"


def data_parsers(box: Box) -> list[str]:
    """The versions `--json=list` names (23.02 on), newest first; [] for 22.05, which has no such option."""
    answer = box.run("squeue", "--json=list", check=False)
    found = sorted(set(re.findall(r"data_parser/(v\d+\.\d+\.\d+)", answer.stdout + answer.stderr)), reverse=True)
    return found


def main() -> int:
    if os.geteuid() != 0:
        raise SystemExit("run as root: it submits as alice and reads every job (sacct -a)")
    box = Box()
    release, versions = release_of(box), data_parsers(box)
    out = DATA / f"slurm-{release}"
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.now().replace(microsecond=0)
    print(f"Slurm {release}: data_parser {', '.join(versions) or 'one (no --json=list)'}; writing {out}")
    ids: dict[str, str] = {}
    try:
        for name, (what, args) in JOBS.items():
            submitted = box.run("sbatch", "--parsable", "-J", name, "-o", "/dev/null", "-D", "/tmp", *args, user=USER)
            ids[name] = submitted.stdout.strip().split(";")[0]
            print(f"  {ids[name]}: {what}")
        box.wait(ids["done"], "GONE", "COMPLETED")
        box.wait(ids["failed"], "GONE", "FAILED")
        box.wait(ids["gpujob"], "RUNNING")
        box.wait(ids["requeued"], "RUNNING")
        box.run("scontrol", "requeue", ids["requeued"])
        box.wait(ids["requeued"], "PENDING")
        time.sleep(2)  # the array's second task starts in the next scheduling pass
        captured = {"release": box.run("scontrol", "version").stdout.strip(), "data_parsers": versions,
                    "jobs": {ids[name]: what for name, (what, _) in JOBS.items()}}
        since = f"{started:%Y-%m-%dT%H:%M:%S}"
        for version in versions or [""]:
            json_flag = f"--json={version}" if version else "--json"
            answers = {"squeue": box.run("squeue", json_flag).stdout,
                       "sacct": box.run("sacct", json_flag, "-a", "-X", "--duplicates", "-S", since).stdout}
            if version:
                for what in ("job", "node", "partition"):
                    answers[f"scontrol-{what}"] = box.run("scontrol", "show", what, json_flag).stdout
            named = version or json.loads(answers["squeue"])["meta"]["plugin"]["type"].rpartition("/")[2]
            for command, text in answers.items():
                (out / f"{command}-{named}.json").write_text(text)
            captured.setdefault("files", []).extend(f"{command}-{named}.json" for command in answers)
        (out / "scontrol-node.txt").write_text(box.run("scontrol", "show", "node", "-d", "-o").stdout)
        (out / "scontrol-partition.txt").write_text(box.run("scontrol", "show", "partition", "-o").stdout)
        (out / "capture.json").write_text(json.dumps(captured, indent=2) + "\n")
    finally:
        if ids:
            box.run("scancel", *ids.values(), check=False)
    print(f"written: {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
