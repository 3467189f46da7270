"""docs/architecture.md's "add a training program" and "add a launcher" say every file to touch and every name a
declaration holds: each list is checked against the code that reads it (issue 64)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

PAGE = REPO / "docs" / "architecture.md"


def bullet(title: str) -> str:
    """The text of the page's bullet that starts **`title`**, up to the next bullet."""
    text = PAGE.read_text()
    start = text.index(f"- **{title}**")
    end = text.find("\n- **", start + 1)
    return " ".join(text[start:end].split())


def declared_names(module: Path) -> set[str]:
    """The upper-case names a loader reads from a declaration module (values.get("X"), _text(..., "X"))."""
    text = module.read_text()
    read = re.findall(r'values\.get\("([A-Z_]+)"', text) + re.findall(r'_text\(module_name, values, "([A-Z_]+)"', text)
    return set(read)


def named_paths(text: str) -> set[str]:
    return {path for path in re.findall(r"`([\w./<>-]+)`", text) if "/" in path and "<" not in path}


@pytest.mark.parametrize(("title", "loader"), [("A training program", "portal/records/programs.py"),
                                                ("A launcher", "portal/records/launchers.py")])
def test_each_extension_list_names_every_value_its_declaration_holds_and_files_that_exist(title, loader):
    text = bullet(title)
    names = declared_names(REPO / loader)
    assert names, f"{loader} reads no declared name"
    missing = sorted(name for name in names if f"`{name}`" not in text)
    assert not missing, f'"{title}" in docs/architecture.md does not name {missing}, which {loader} reads'
    gone = sorted(path for path in named_paths(text) if not (REPO / path.rstrip("/")).exists())
    assert not gone, f'"{title}" in docs/architecture.md names files that do not exist: {gone}'
    assert f"`{loader}`" in text or loader.removesuffix(".py").replace("/", ".") in text


def test_the_launcher_list_names_every_kind_of_job_script_the_schedulers_ask_for():
    kinds = set()
    for path in (REPO / "portal").rglob("*.py"):
        text = path.read_text()
        kinds |= set(re.findall(r'launch_template\(spec, "([\w.-]+)"\)', text))
        kinds |= set(re.findall(r'programs_with\("([\w.-]+)"\)', text))
        kinds |= set(re.findall(r'\.has\("([\w.-]+)"\)', text))
    assert {"sbatch", "local.sh", "k8s-trial.sh", "mpijob.sh"} <= kinds  # the walk sees them
    text = bullet("A launcher")
    missing = sorted(kind for kind in kinds if f"`{kind}`" not in text)
    assert not missing, f'"A launcher" in docs/architecture.md does not name the job scripts {missing}'
