"""The last step of `up`: a demo user can run what a job and a server run.

What users' processes import is the venv's non-editable copy of dsportal (deploy/local/install-package.sh), never
the checkout, which may be unreadable to them (root's mode-700 home). `up` ends by proving it as a demo user, from
her home with a clean environment, so that a box that says it is up can run a job and a server; and it refuses a
venv whose copy is not this checkout's (the box would run other code than the one in front of you).
"""

from __future__ import annotations

import json
import pwd
import subprocess
from pathlib import Path

from deploy.local.parts.layout import REPO, Layout
from deploy.source_hash import source_hash
from deploy.supervise import BoxError
from portal.records.programs import registry
from portal.runas import ISOLATED_CWD, PYTHON_ISOLATED, launcher_env, runuser_argv

CHECK_TIMEOUT_S = 120
# Run as the user: every file of the distribution readable, the entry points of a job
# (`python -m chexnet.train`) and of a server (the spawners' launchers) importable, the template notebooks found.
USER_CHECK = """
import importlib, json, os, sys
from importlib import metadata
dist = metadata.distribution("dsportal")
unreadable = [str(f.locate()) for f in dist.files or () if not os.access(f.locate(), os.R_OK)]
modules = {}
for name in ("chexnet.train", "chexnet.train_args", "spawners.singleuser", "portal.notebook", "portal.templates"):
    modules[name] = importlib.import_module(name).__file__
from portal.templates import templates_dir
print(json.dumps({"unreadable": unreadable[:5], "modules": modules, "templates": str(templates_dir())}))
"""


def installed_record(venv: Path) -> dict[str, object]:
    """What install-package.sh wrote beside the venv's copy: its fingerprint, commit and checkout."""
    path = venv / "share" / "dsportal" / "source.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        raise BoxError(f"the venv {venv} has no non-editable dsportal of this checkout ({path} is missing or "
                       f"unreadable): run `make install` (deploy/local/install.sh)") from None
    return record if isinstance(record, dict) else {}


def check_installed_copy(venv: Path) -> str:
    """BoxError unless the venv's copy of dsportal is this checkout's; its fingerprint otherwise."""
    record, here = installed_record(venv), source_hash(REPO)
    if record.get("source_hash") != here:
        raise BoxError(f"the venv's dsportal ({record.get('source_hash')}, installed from {record.get('checkout')}) "
                       f"is not this checkout's ({here}, {REPO}): run `make install` (deploy/local/install.sh), "
                       f"then `up` again")
    return here


def check_user_runs(venv: Path, user: str) -> dict[str, object]:
    """BoxError naming what `user` cannot read or import; what she imported (and from where) otherwise."""
    # As the dashboard runs a user's Python (portal.runas): a clean environment, `/` as the working directory and
    # -I, so nothing but the venv can supply the modules (a job's script has no checkout on its path either).
    argv = runuser_argv(user, pwd.getpwnam(user).pw_dir, [f"{venv}/bin/python", PYTHON_ISOLATED, "-c", USER_CHECK])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ISOLATED_CWD, env=launcher_env(),
                              timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BoxError(f"{user} could not import the portal's programs from {venv} "
                       f"within {CHECK_TIMEOUT_S} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BoxError(f"{user} cannot run what a job and a server run: {last}. Every job and server of every user "
                       f"would fail the same way; run `make install` and check that {venv} is readable by users")
    found = json.loads(done.stdout)
    outside = {name: path for name, path in found["modules"].items() if not path.startswith(f"{venv}/")}
    if found["unreadable"] or outside:
        raise BoxError(f"{user} cannot run the venv's copy of the portal: unreadable {found['unreadable']}, "
                       f"imported from outside {venv}: {outside}; run `make install`")
    return found


# Run as the user in a program's own environment (portal.records.programs: VENV): its training module imports.
PROGRAM_CHECK = """
import importlib, json, sys
print(json.dumps({"module": importlib.import_module(sys.argv[1]).__file__}))
"""


def check_program_runs(venv: Path, module: str, user: str) -> None:
    """BoxError unless `user` imports the program's `module` from its own environment `venv` (and that holds this
    checkout's copy)."""
    if not (venv / "bin" / "python").exists():
        raise BoxError(f"the training program {module} has no environment at {venv}: run `make install` "
                       f"(deploy/local/install.sh builds it)")
    check_installed_copy(venv)
    argv = runuser_argv(user, pwd.getpwnam(user).pw_dir,
                        [f"{venv}/bin/python", PYTHON_ISOLATED, "-c", PROGRAM_CHECK, module])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ISOLATED_CWD, env=launcher_env(),
                              timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BoxError(f"{user} could not import {module} from {venv} within {CHECK_TIMEOUT_S} s") from None
    last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    if done.returncode != 0 or not json.loads(done.stdout or "{}").get("module", "").startswith(f"{venv}/"):
        raise BoxError(f"{user} cannot run the training program {module} from {venv}: {last}; run `make install`")


def report_reach(lay: Layout, user: str) -> str:
    """The line `up` prints: the installed copy is this checkout's and `user` runs it, and every registered
    program that has an environment of its own."""
    fingerprint = check_installed_copy(lay.cfg.venv)
    check_user_runs(lay.cfg.venv, user)
    own = [(p.environment(lay.cfg.venv), p.module) for p in registry().programs if p.venv]
    for venv, module in own:
        check_program_runs(venv, module, user)
    others = "".join(f", {module} from {venv}" for venv, module in own)
    return (f"users' programs: {user} imports the training program and the server's launcher from "
            f"{lay.cfg.venv} (dsportal {fingerprint}, this checkout's){others}")
