"""The behaviours list in docs/testing.md ("What each test proves") names real tests: every `tests/<file>.py::<name>`
it cites is a test function (or a class's method) in that file, and every test function of the suites (the tests
that need a box, a browser, an image or a training program) is cited at least once. A test renamed, moved or
removed without its row fails here; so does a new suite test that no row names."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIST = REPO / "docs" / "testing.md"
SECTION = "## What each test proves: the behaviours list"
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::([\w:]+)`")
SUITES = ("integration", "kubernetes", "browser", "notebooks", "images", "slurm_versions", "programs", "users")
LEVELS = {"unit", "contract", "program", "no box", "Slurm box", "Kubernetes box", "both boxes", "browser", "notebook",
          "image", "Slurm release"}


def the_list() -> str:
    text = LIST.read_text()
    assert SECTION in text, f"docs/testing.md has no section {SECTION!r}"
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


@cache
def defined_tests(path: Path) -> frozenset[str]:
    """Every test function of a module, and every test method of its test classes, as `name` or `Class::name`
    (a module is read once, however many rows cite it)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef):
            found |= {f"{node.name}::{item.name}" for item in node.body
                      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test")}
    return frozenset(found)


def test_every_cited_test_exists():
    cited = REFERENCE.findall(the_list())
    assert len(cited) > 100, f"only {len(cited)} tests cited"
    missing = [f"{path}::{name}" for path, name in cited
               if not (REPO / path).is_file() or name not in defined_tests(REPO / path)]
    assert not missing, f"the behaviours list cites tests that do not exist: {missing}"


def test_every_suite_test_is_cited():
    cited = {f"{path}::{name}" for path, name in REFERENCE.findall(the_list())}
    suite_tests = {f"{path.relative_to(REPO)}::{name}" for suite in SUITES
                   for path in sorted((REPO / "tests" / suite).rglob("test_*.py")) for name in defined_tests(path)}
    assert suite_tests, "no suite tests found"
    uncited = sorted(suite_tests - cited)
    assert not uncited, f"suite tests that no row of the behaviours list names: {uncited}"


def test_every_row_has_a_behaviour_a_test_and_a_known_level():
    rows = [line for line in the_list().splitlines() if line.startswith("| ") and not line.startswith("| behaviour")
            and not set(line) <= set("|- ")]
    assert rows
    bad = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0] or not REFERENCE.search(cells[1]) or cells[2] not in LEVELS:
            bad.append(row)
    assert not bad, f"rows without a behaviour, a cited test and one of the levels {sorted(LEVELS)}: {bad[:5]}"
