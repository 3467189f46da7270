"""The site's own training programs and launchers (docs/admin-guide.md, "A site's own training program"), a part of
every PortalConfig: the declaration module of each, registered after the portal's (portal.records.programs,
portal.records.launchers), and the directory their packages are imported from.

A site writes its program as a package of its own, with the program kit (programkit) alone, and registers it in one
line of its settings:

    site_programs: [ourprogram.program]
    site_python_path: /opt/site-programs      # holds ourprogram/, readable by every user

The hub, the dashboard and every job import it from there (on Slurm and the local runner the jobs' PYTHONPATH names
it). A Kubernetes job runs in the training image: its pods mount the claim k8s_site_programs_claim at
site_python_path (portal.scheduler.kubernetes.manifests.site_programs_volume), or the site installs its packages in
the image.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from portal.config_values import ConfigError, setting

MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", re.ASCII)


@dataclass(frozen=True)
class ProgramSettings:
    """The site's own training programs and launchers (docs/admin-guide.md)"""

    site_programs: tuple[str, ...] = setting(
        (), "The site's own training programs: each one's declaration module (as portal.records.programs describes "
            "it), registered after the portal's chexnet and chexnet-torch, in this order. The hub, the dashboard and "
            "the users' jobs import it from site_python_path or the venvs.")
    site_launchers: tuple[str, ...] = setting(
        (), "The site's own launchers: each one's declaration module (as portal.records.launchers describes it), "
            "registered after the portal's horovod and torchrun.")
    site_python_path: str = setting(
        "", "A directory holding the packages of site_programs and site_launchers, readable by every user: after "
            "the portal's own on the hub's and the dashboard's Python path, and on every job's PYTHONPATH. Empty: "
            "none (the site's packages are installed in the venvs).")

    def check_section(self) -> None:
        """ConfigError naming the first of these settings whose value is not allowed, and what is (PortalConfig's
        checks call each section's: portal.config_checks)."""
        for name in ("site_programs", "site_launchers"):
            for module in getattr(self, name):
                if not MODULE_NAME.fullmatch(module):
                    raise ConfigError(f"{name} has {module[:60]!r}; allowed: Python module names, such as "
                                      "ourprogram.program")
        path = self.site_python_path
        if path and (not PurePosixPath(path).is_absolute() or any(c in path for c in ":\r\n\0")):
            raise ConfigError(f"site_python_path is {path[:60]!r}; allowed: an absolute directory without ':', or "
                              "empty")
