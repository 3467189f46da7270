"""The site's own registrations (portal.config_programs): the declaration modules a setting names, importable once
this process has the site's directory on its Python path (after the portal's own, which a site's package never
shadows)."""

from __future__ import annotations

import sys

from portal.config import load


def site_modules(setting: str) -> tuple[str, ...]:
    """The modules that `setting` (site_programs or site_launchers) names, with site_python_path on sys.path."""
    cfg = load()
    if cfg.site_python_path and cfg.site_python_path not in sys.path:
        sys.path.append(cfg.site_python_path)
    return tuple(getattr(cfg, setting))
