"""The client libraries the portal loads on first use, loaded whole before any thread imports from them
(portal.first_import). MLflow's client, the Kubernetes client (and `requests` under both) import themselves in
cycles; two threads that enter such a cycle from its two ends at once meet on Python's module locks, and one gets the
other's half-made module (ImportError), which stays half-made for the process: every spawn of the hub in a pod failed
so after two users' spawns made their MLflow accounts at once (2026-12-05). The cycle here is two modules of the
test's own, timed so that it happens every time without the lock."""

from __future__ import annotations

import ast
import builtins
import sys
import threading
from pathlib import Path

import pytest

from portal.first_import import loaded
from tests.conftest import REPO

LAZY = ("mlflow", "kubernetes", "tensorboard")  # the libraries the portal imports where it first uses them
# a.py waits for b.py's start (at most a second) before it imports b; b.py imports a before it names itself.
CYCLE = {"__init__.py": "",
         "a.py": "import builtins\nNAME = 'a'\nbuiltins.cycle_a_started.set()\nbuiltins.cycle_b_started.wait(1)\n"
                 "from cycle_pkg.b import NAME as B\n",
         "b.py": "import builtins\nbuiltins.cycle_b_started.set()\nfrom cycle_pkg.a import NAME as A\nNAME = 'b'\n"}


@pytest.fixture
def cycle(tmp_path, monkeypatch):
    (tmp_path / "cycle_pkg").mkdir()
    for name, text in CYCLE.items():
        (tmp_path / "cycle_pkg" / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    for event in ("cycle_a_started", "cycle_b_started"):
        monkeypatch.setattr(builtins, event, threading.Event(), raising=False)
    yield
    for name in [m for m in sys.modules if m.split(".")[0] == "cycle_pkg"]:
        del sys.modules[name]


def test_two_threads_entering_an_import_cycle_from_its_two_ends_both_get_it_whole(cycle):
    found, failed = {}, []

    def use(module: str, after: threading.Event | None) -> None:
        if after is not None:
            after.wait(5)
        try:
            loaded(module)
            found[module] = sys.modules[module].__dict__.get("A") or sys.modules[module].__dict__.get("B")
        except ImportError as err:
            failed.append(f"{module}: {err}")
    threads = [threading.Thread(target=use, args=("cycle_pkg.a", None)),
               threading.Thread(target=use, args=("cycle_pkg.b", builtins.cycle_a_started))]  # type: ignore[attr-defined]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert failed == [] and found == {"cycle_pkg.a": "b", "cycle_pkg.b": "a"}


def lazy_imports_without_loaded(path: Path) -> list[str]:
    """The function-level imports of LAZY libraries in `path` that no `loaded(...)` call comes before in their
    function."""
    missing = []
    for function in ast.walk(ast.parse(path.read_text())):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        seen_loaded = False
        for node in sorted((n for n in ast.walk(function) if hasattr(n, "lineno")), key=lambda n: n.lineno):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "loaded":
                seen_loaded = True
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if any(name.split(".")[0] in LAZY for name in names) and not seen_loaded:
                missing.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return missing


def test_every_import_of_a_lazily_loaded_library_in_the_portal_comes_after_loaded():
    # tensorboard_socket.py is TensorBoard's own process (its main thread, before any other), not the portal's.
    paths = [p for folder in ("portal", "spawners") for p in sorted((REPO / folder).rglob("*.py"))
             if p.name != "tensorboard_socket.py"]
    missing = [found for path in paths for found in lazy_imports_without_loaded(path)]
    assert missing == []
