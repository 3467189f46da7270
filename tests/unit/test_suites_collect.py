"""The suites collect on a new machine: no test module looks up a user or group when it is imported.

pytest imports every test module before any fixture runs, and on a new machine the boxes make their users (alice,
bob) only then: a module that looked one up at import failed collection on a new machine (2026-12-05,
tests/integration/test_untrusted.py), though it passed on every machine that had run the boxes before.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LOOKUPS = {"getpwnam", "getpwuid", "getpwall", "getgrnam", "getgrgid", "getgrall", "getuser", "expanduser"}


def import_time_lookups(source: str) -> list[tuple[int, str]]:
    """(line, call) of each account lookup that runs when the module is imported: at module or class level,
    in a default argument or in a decorator; a function's body runs later."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for part in (*node.decorator_list, *node.args.defaults, *node.args.kw_defaults):
                if part is not None:
                    visit(part)
            return
        if isinstance(node, ast.Lambda):
            return
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func).rsplit(".", 1)[-1]
            if name in LOOKUPS:
                found.append((node.lineno, ast.unparse(node.func)))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def test_the_check_finds_lookups_at_import_and_leaves_those_in_functions():
    source = ("import pwd\nHOME = pwd.getpwnam('bob').pw_dir\n"
              "class C:\n    uid = pwd.getpwnam('alice').pw_uid\n"
              "def f(home=pwd.getpwnam('carol')):\n    return pwd.getpwnam('dave')\n"
              "g = lambda: pwd.getpwnam('erin')\n")
    assert [line for line, _ in import_time_lookups(source)] == [2, 4, 5]


def test_no_test_module_looks_up_an_account_when_imported():
    found = {f"{path.relative_to(TESTS.parent)}:{line}": call for path in sorted(TESTS.rglob("*.py"))
             for line, call in import_time_lookups(path.read_text())}
    assert not found, f"looked up at import, before the boxes make their users (move it into a fixture): {found}"
