"""Where everything of the box lives under the state dir, and the small helpers every part uses."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from string import Template

from portal.config import PortalConfig

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
LOCALHOST = "127.0.0.1"  # the login host's own services (slapd, the proxy, MariaDB) listen here only


class BoxError(RuntimeError):
    """Something the box cannot do; the message says what failed and where to look."""


@dataclass(frozen=True)
class Layout:
    """Every path of the state dir, derived from the settings."""

    cfg: PortalConfig

    @property
    def root(self) -> Path:
        return self.cfg.state_dir

    @property
    def tls(self) -> Path:
        return self.root / "tls"

    @property
    def ldap(self) -> Path:
        return self.root / "ldap"

    @property
    def munge(self) -> Path:
        return self.root / "munge"

    @property
    def slurm(self) -> Path:
        return self.root / "slurm"

    @property
    def accounting(self) -> Path:
        return self.root / "accounting"

    @property
    def hub(self) -> Path:
        return self.root / "hub"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def munge_socket(self) -> Path:
        return self.munge / "munge.socket.2"

    @property
    def slurm_env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.cfg.slurm_conf_path)}

    def pid_file(self, service: str) -> Path:
        return self.run / f"{service}.pid"

    def log_file(self, service: str) -> Path:
        return self.log / f"{service}.log"

    def slurm_cmd(self, name: str) -> str:
        return str(self.cfg.slurm_bin_dir / name)


def run(cmd: list[str], what: str, **kwargs) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; on failure raise BoxError naming `what` and the command's output."""
    try:
        return subprocess.run(cmd, check=True, text=True, capture_output=True, **kwargs)
    except FileNotFoundError as err:
        raise BoxError(f"{what}: {cmd[0]} is not installed") from err
    except subprocess.CalledProcessError as err:
        output = (err.stderr or err.stdout or "").strip()
        raise BoxError(f"{what}: `{' '.join(cmd)}` exited {err.returncode}: {output}") from err


def make_dir(path: Path, mode: int = 0o755, owner: str | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    if owner:
        shutil.chown(path, owner, owner)
    return path


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a generated file; leave it (and its mtime) alone when the content is already right."""
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        tmp.touch(mode=mode)  # a file with a password is never readable by others, not even for a moment
        tmp.write_text(text)
        tmp.replace(path)
    os.chmod(path, mode)


def render(template: str, **values: object) -> str:
    return Template((TEMPLATES / template).read_text()).substitute({k: str(v) for k, v in values.items()})


def check_traversable(path: Path) -> None:
    """Job users and the munge user must reach files under the state dir: every ancestor needs o+x."""
    for parent in [path, *path.parents]:
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise BoxError(
                f"{parent} is mode {stat.S_IMODE(parent.stat().st_mode):o}: other users cannot reach "
                f"{path}; use a state dir whose parents are all world-searchable (o+x)"
            )
