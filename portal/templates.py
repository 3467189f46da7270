"""The template notebooks: where this installation keeps them, and their copy into a user's ~/notebooks.

    python -m portal.notebook install-templates [--source DIR] [--dest DIR]   # what a server runs as it starts

The copy never touches a file that exists, and a template copied once is not copied again after the user deletes it.
The dashboard's template list reads `templates_dir()` (portal.service.app).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

# Where the template notebooks are: installed with the package (setup.py's data_files), or a source tree's.
TEMPLATE_DIRS = (Path(sys.prefix) / "share" / "dsportal" / "notebooks",
                 Path(__file__).resolve().parent.parent / "notebooks")
USER_NOTEBOOKS = "~/notebooks"
INSTALLED_LIST = ".dsportal-templates"  # names copied once: a template the user deleted is not brought back


def templates_dir() -> Path:
    """The template notebooks of this installation: the installed copy, else the source tree's."""
    for candidate in TEMPLATE_DIRS:
        if any(candidate.glob("*.ipynb")):
            return candidate
    raise FileNotFoundError(f"no template notebooks in {' or '.join(map(str, TEMPLATE_DIRS))}; reinstall dsportal")


def install_templates(source: str | Path | None = None, dest: str | Path = USER_NOTEBOOKS) -> list[str]:
    """Copy each template notebook the user has not had yet into `dest`; returns the names copied.

    A file that exists is never touched (it may be the user's edited copy), and a template copied once is not
    copied again after the user deletes it: the names are kept in `dest/.dsportal-templates`."""
    source, dest = Path(source) if source else templates_dir(), Path(dest).expanduser()
    if not source.is_dir():
        raise FileNotFoundError(f"no template directory at {source}")
    dest.mkdir(parents=True, exist_ok=True)
    record = dest / INSTALLED_LIST
    installed = set(record.read_text().split()) if record.is_file() else set()
    copied = []
    for template in sorted(source.glob("*.ipynb")):
        target = dest / template.name
        if template.name in installed or target.exists():
            installed.add(template.name)
            continue
        try:
            with template.open("rb") as src, target.open("xb") as out:  # "x": never replaces a file
                shutil.copyfileobj(src, out)
        except FileExistsError:
            pass  # created meanwhile (the user, or a second server starting): theirs wins
        else:
            copied.append(template.name)
        installed.add(template.name)
    listed = "".join(f"{name}\n" for name in sorted(installed))
    if not record.is_file() or record.read_text() != listed:  # a server's start changes nothing it need not
        record.write_text(listed)
    return copied
