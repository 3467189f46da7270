"""Print the pip requirements that setup.py declares (install_requires and the chosen extras), one per line.

The images install the project's dependencies in a layer of their own, built from setup.py alone, so that a
change to the project's code rebuilds only the last layer. `--replace NAME=REQUIREMENT` swaps one requirement
for another: a GPU image installs `tensorflow==2.15.1` where setup.py's [train] names `tensorflow-cpu`.

    python docker/requirements.py setup.py --extra train --replace tensorflow-cpu=tensorflow==2.15.1
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import sys
from pathlib import Path
from typing import Any

import setuptools

NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    """A project name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(setup_py: Path) -> dict[str, Any]:
    """The keyword arguments setup.py passes to setuptools.setup(), read by running it with setup() replaced."""
    captured: dict[str, Any] = {}
    real_setup = setuptools.setup
    setuptools.setup = lambda **kwargs: captured.update(kwargs)
    cwd = os.getcwd()
    try:
        os.chdir(setup_py.parent)  # setup.py globs its data files relative to its own directory
        runpy.run_path(str(setup_py), run_name="__main__")
    finally:
        os.chdir(cwd)
        setuptools.setup = real_setup
    return captured


def requirements(setup_py: Path, extras: list[str], replacements: dict[str, str]) -> list[str]:
    kwargs = declared(setup_py)
    unknown = [extra for extra in extras if extra not in kwargs.get("extras_require", {})]
    if unknown:
        known = ", ".join(sorted(kwargs.get("extras_require", {})))
        raise SystemExit(f"requirements.py: unknown extra {', '.join(unknown)}; setup.py has: {known}")
    found = list(kwargs.get("install_requires", []))
    for extra in extras:
        found += kwargs["extras_require"][extra]
    result = []
    for requirement in found:
        match = NAME.match(requirement)
        name = canonical(match.group(1)) if match else ""
        result.append(replacements.get(name, requirement))
    return list(dict.fromkeys(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("setup_py", type=Path, help="the project's setup.py")
    parser.add_argument("--extra", action="append", default=[], help="an extra of setup.py to include")
    parser.add_argument("--replace", action="append", default=[], metavar="NAME=REQUIREMENT",
                        help="install REQUIREMENT instead of what setup.py asks for NAME")
    args = parser.parse_args(argv)
    replacements = {}
    for item in args.replace:
        name, sep, requirement = item.partition("=")
        if not sep or not name or not requirement:
            parser.error(f"--replace must be NAME=REQUIREMENT, got {item!r}")
        replacements[canonical(name)] = requirement
    sys.stdout.write("".join(f"{line}\n" for line in requirements(args.setup_py, args.extra, replacements)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
