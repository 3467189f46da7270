"""Where everything of the box lives under the state dir, and the small helpers every part uses."""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from string import Template

from deploy.supervise import BoxError, Place
from portal.config import PortalConfig

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
LOCALHOST = "127.0.0.1"  # the login host's own services (slapd, the proxy, MariaDB) listen here only


def _part(name: str) -> property:
    return property(lambda lay: lay.root / name, doc=f"STATE/{name}")


@dataclass(frozen=True)
class Layout(Place):
    """Every path of the state dir, derived from the settings."""

    cfg: PortalConfig

    script = "box.py"
    # The state dir's parts: STATE/tls, STATE/ldap, ... (see box.py's docstring for what each holds).
    tls, ldap, munge, slurm, accounting, hub, run, log = map(
        _part, ("tls", "ldap", "munge", "slurm", "accounting", "hub", "run", "log"))

    @property
    def root(self) -> Path:
        return self.cfg.state_dir

    @property
    def munge_socket(self) -> Path:
        return self.munge / "munge.socket.2"

    @property
    def slurm_env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.cfg.slurm_conf_path)}

    def slurm_cmd(self, name: str) -> str:
        return str(self.cfg.slurm_bin_dir / name)

    def slurm_daemon(self, name: str) -> str:
        """slurmctld, slurmd or slurmdbd of the same Slurm as the commands: the sbin beside `slurm_bin_dir`
        (/usr/sbin for Debian's packages, /opt/dsportal/slurm/<release>/sbin for a release `make slurm-build`
        built)."""
        return str(self.cfg.slurm_bin_dir.parent / "sbin" / name)


def make_dir(path: Path, mode: int = 0o755, owner: str | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    if owner:
        shutil.chown(path, owner, owner)
    return path


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
