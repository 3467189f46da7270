"""Running a program as another user, isolated from what that user controls.

Root (the dashboard, the hub) runs small helpers as a user (`cat`, `squeue`, `python -m portal.metrics`) so the
kernel and Slurm check what the user may do. Such a process belongs to the user: they can read its environment
(/proc/PID/environ) and, for Python, decide what it imports. So each one gets
- a minimal environment: no secret of the caller's (the service's API token) and no PYTHON* variable;
- a fixed PATH of system directories;
- `/` as its working directory, never the user's home (Python puts the working directory on sys.path);
- for Python, `-I` (`PYTHON_ISOLATED`): no user site-packages, no PYTHON* variables, no script directory on sys.path.
Pure: argv and environments in, argv and environments out (unit-tested without another user).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

RUNUSER = "/usr/sbin/runuser"  # util-linux; sudo is not installed on these nodes
ENV = "/usr/bin/env"
ISOLATED_PATH = "/usr/local/bin:/usr/bin:/bin"
ISOLATED_CWD = "/"
LOCALE = "C.UTF-8"
PYTHON_ISOLATED = "-I"


def isolated_env(user: str, home: Path | str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a process run as `user`: who they are, a fixed PATH, and `extra` (SLURM_CONF)."""
    env = {"PATH": ISOLATED_PATH, "HOME": str(home), "USER": user, "LOGNAME": user, "LANG": LOCALE,
           "LC_ALL": LOCALE}
    for name, value in (extra or {}).items():
        if name.startswith("PYTHON") or name in ("LD_PRELOAD", "LD_LIBRARY_PATH"):
            raise ValueError(f"{name}: not passed to a process run as a user (it would change what it loads)")
        env[name] = value
    return env


def runuser_argv(user: str, home: Path | str, argv: Sequence[str],
                 extra: Mapping[str, str] | None = None) -> list[str]:
    """argv as `user` through runuser, with `env -i` so nothing but `isolated_env` reaches the program (runuser
    itself gets only `launcher_env()`, see there)."""
    assignments = [f"{k}={v}" for k, v in isolated_env(user, home, extra).items()]
    return [RUNUSER, "-u", user, "--", ENV, "-i", *assignments, *argv]


def launcher_env() -> dict[str, str]:
    """The environment of runuser itself: the caller's would pass through it (runuser keeps all but HOME, SHELL,
    USER and LOGNAME), and the user can read it while the process is theirs."""
    return {"PATH": ISOLATED_PATH, "LANG": LOCALE}


