"""The house's rules, kept by tests (issue 41): no product module over 400 lines, and no import cycle among the
product's modules, neither among the imports made at load nor when the imports inside functions count too (an import
put inside a function to dodge a cycle at load is the same cycle at run time). Imports for type checking and a
module's `if __name__ == "__main__":` block count too (issue 64): types shared both ways live below both, and a
command line that needs the module it runs is a module of its own (`portal/config/__main__.py`). An import of
`a.b.c` runs `a` and `a.b` first, so a package's `__init__` counts as imported too."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PRODUCT = ("portal", "programkit", "chexnet", "chexnet_torch", "spawners", "deploy", "bench")
PACKAGES = ("portal", "programkit", "chexnet", "chexnet_torch", "spawners")  # what imports what among them
PROGRAMS = ("chexnet", "chexnet_torch")  # the training programs' packages (portal.records.programs.REGISTERED)
MAX_LINES = 400
MAX_SPAWNER_LINES = 250


def modules(root: Path = REPO, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path], anywhere: bool = False) -> set[str]:
    """The known modules that importing `name` imports (its module-level statements, and the packages above
    each); with `anywhere`, those its functions and classes import when they run too."""
    def resolved(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def walk(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                found.update(filter(None, (resolved(alias.name) for alias in node.names)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    above = package
                    for _ in range(node.level - 1):
                        above = above.rpartition(".")[0]
                    base = f"{above}.{base}" if base else above
                for alias in node.names:
                    target = resolved(f"{base}.{alias.name}") if f"{base}.{alias.name}" in known else resolved(base)
                    if target:
                        found.add(target)
            elif isinstance(node, ast.If | ast.Try | ast.With):
                walk([*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                      *(s for handler in getattr(node, "handlers", []) for s in handler.body)])
            elif anywhere:
                walk([child for child in ast.walk(node) if isinstance(child, ast.stmt) and child is not node
                      and isinstance(child, ast.Import | ast.ImportFrom | ast.If | ast.Try | ast.With)])

    walk(ast.parse(path.read_text()).body)
    # The packages above each (run first), but not those above this module itself: they are running already.
    parents = {".".join(d.split(".")[:i]) for d in found for i in range(1, d.count(".") + 1)}
    implicit = {d for d in parents if name.startswith(f"{d}.")} - found
    return {d for d in found | parents if d in known and d != name} - implicit


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_product_module_is_over_400_lines():
    sizes = {path.relative_to(REPO).as_posix(): len(path.read_text().splitlines())
             for package in PRODUCT for path in (REPO / package).rglob("*.py")}
    sizes["jupyterhub_config.py"] = len((REPO / "jupyterhub_config.py").read_text().splitlines())
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"over {MAX_LINES} lines (split them by what they do): {over}"


def test_no_spawner_is_over_250_lines():
    """A spawner keeps only its extension points (issue 64): what it asks of its scheduler lives there."""
    sizes = {path.name: len(path.read_text().splitlines()) for path in (REPO / "spawners").glob("*.py")}
    over = {name: lines for name, lines in sizes.items() if lines > MAX_SPAWNER_LINES}
    assert not over, f"over {MAX_SPAWNER_LINES} lines: {over}"


def test_no_import_cycle_among_the_products_modules():
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert graph["portal.jobs"] and "portal.config" in graph["portal.jobs"]  # the walk sees imports
    assert not cycles(graph), f"import cycles: {cycles(graph)}"


def test_no_import_cycle_when_the_imports_inside_functions_count():
    known = modules()
    graph = {name: imports_of(name, path, known, anywhere=True) for name, path in known.items()}
    assert "programkit.tags" in graph["programkit.sweep"]  # imported inside TrialReporter's method: seen
    assert not cycles(graph), f"import cycles at run time: {cycles(graph)}"


def test_the_walk_finds_a_cycle_made_inside_a_function(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "__init__.py").write_text("")
    (tmp_path / "p" / "a.py").write_text("import p.b\n")
    (tmp_path / "p" / "b.py").write_text("class C:\n    def f(self):\n        if True:\n            from p import a\n"
                                         "if __name__ == '__main__':\n    import p.c\n")
    (tmp_path / "p" / "c.py").write_text("def g():\n    import p.b\n")
    known = modules(tmp_path, ("p",))
    at_load = {name: imports_of(name, path, known) for name, path in known.items()}
    anywhere = {name: imports_of(name, path, known, anywhere=True) for name, path in known.items()}
    assert at_load["p.b"] == {"p.c"} and cycles(at_load) == []  # the __main__ block counts
    assert anywhere["p.b"] == {"p.a", "p.c"} and anywhere["p.c"] == {"p.b"}
    assert cycles(anywhere) == [["p.a", "p.b", "p.c"]]


def test_the_walk_finds_a_cycle_through_a_package(tmp_path):
    (tmp_path / "p" / "q").mkdir(parents=True)
    (tmp_path / "p" / "__init__.py").write_text("from p.q.r import x\ny = 2\n")
    (tmp_path / "p" / "q" / "__init__.py").write_text("")
    (tmp_path / "p" / "q" / "r.py").write_text("import os\nfrom p import y\nx = 1\n")
    (tmp_path / "p" / "s.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.t\n")
    (tmp_path / "p" / "t.py").write_text("import p.s\nif __name__ == '__main__':\n    import p.q.r\n")
    (tmp_path / "p" / "q" / "u.py").write_text("from .. import s\n")
    known = modules(tmp_path, ("p",))
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert graph["p"] == {"p.q", "p.q.r"}  # importing p.q.r runs p.q first
    assert graph["p.q.r"] == {"p"}  # its own packages run already: only what it names
    # Type checking's imports and the __main__ block's count: p.s and p.t import each other.
    assert graph["p.s"] == {"p.t"} and graph["p.t"] == {"p.s", "p.q", "p.q.r"} and graph["p.q.u"] == {"p.s"}
    assert sorted(cycles(graph)) == [["p", "p.q.r"], ["p.s", "p.t"]]
    (tmp_path / "p" / "q" / "r.py").write_text("x = 1\n")
    graph["p.q.r"] = imports_of("p.q.r", tmp_path / "p" / "q" / "r.py", known)
    assert cycles(graph) == [["p.s", "p.t"]]


def test_the_architecture_page_names_every_package():
    page = (REPO / "docs" / "architecture.md").read_text()
    packages = sorted({path.parent.relative_to(REPO).as_posix() for root in PACKAGES
                       for path in (REPO / root).rglob("__init__.py")})
    packages += [p.relative_to(REPO).as_posix() for p in (REPO / "deploy").iterdir() if p.is_dir()]
    missing = [package for package in packages if f"`{package}/" not in page and f"`{package}`" not in page]
    assert not missing, f"docs/architecture.md does not say what these own: {missing}"


# Which may import which (docs/architecture.md, "The layers"): per module prefix, the prefixes it must not import,
# anywhere in the module (inside functions, type checking's and __main__ blocks too). The schedulers' subpackages know
# nothing of each other; the neutral scheduler layer knows neither (portal.scheduler names them as strings).
SETTINGS = ("portal.config", "portal.config_values", "portal.config_cli", "portal.config_checks",
            "portal.scheduler.kubernetes.settings", "portal.scheduler.slurm.settings", "portal.config_gpus",
            "portal.inputs",
            "portal.runas", "portal.directory", "portal.errors", "portal.registrations", "portal.renamed",
            "portal.mlflow_accounts", "portal.launchers")
ABOVE_RECORDS = ("portal.scheduler", "portal.service", "portal.jobs", "portal.notebook", "portal.jobmail",
                 "portal.accounts", "spawners")
NEUTRAL_SCHEDULER = ("portal.scheduler.__init__", "portal.scheduler.protocol", "portal.scheduler.registry",
                     "portal.scheduler.errors", "portal.scheduler.snapshot", "portal.scheduler.home",
                     "portal.scheduler.usage", "portal.scheduler.asker", "portal.scheduler.local")
FORBIDDEN = {
    # The program kit is below the programs and the hub; each program imports the kit, nothing of the hub side and
    # no other program; the hub side imports no program (portal.records.programs names their declarations as
    # strings: the one registration of each).
    "programkit": ("portal", "spawners", *PROGRAMS),
    **{program: ("portal", "spawners", *(other for other in PROGRAMS if other != program)) for program in PROGRAMS},
    "portal": PROGRAMS,
    **{name: ("portal.records", *ABOVE_RECORDS) for name in SETTINGS},
    "portal.records": ABOVE_RECORDS,
    "portal.scheduler.slurm": ("portal.scheduler.kubernetes", "portal.scheduler.local", "portal.service",
                               "portal.jobs", "portal.notebook", "spawners"),
    "portal.scheduler.kubernetes": ("portal.scheduler.slurm", "portal.scheduler.local", "portal.service",
                                    "portal.jobs", "portal.notebook", "spawners"),
    **{name: ("portal.scheduler.slurm", "portal.scheduler.kubernetes", "portal.service", "portal.jobs",
              "portal.notebook", "spawners") for name in NEUTRAL_SCHEDULER},
    "portal.jobs": ("portal.service", "spawners", "portal.notebook"),
    "portal.service": ("spawners", "portal.notebook"),
    "spawners": ("portal.service", "portal.notebook", *PROGRAMS),
}


def every_import(path: Path) -> set[str]:
    """The dotted names a module imports anywhere (functions, `if TYPE_CHECKING:` and `__main__` blocks too)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)
    visit(ast.parse(path.read_text()))
    return names


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(f"{prefix}.")


def settings_section(name: str, imported: str) -> bool:
    """Whether `imported` is a section of the settings that `name`, of the settings' layer, may take in: a
    scheduler's own section lives in its package (portal.scheduler.kubernetes.settings) and is of that layer."""
    return name in SETTINGS and any(_under(imported, section) for section in SETTINGS if section != name)


def test_each_layer_imports_only_from_below_and_no_scheduler_from_another():
    broken = []
    for name, path in modules().items():
        module = f"{name}.__init__" if path.name == "__init__.py" else name
        rules = [banned for prefix, banned in FORBIDDEN.items() if _under(module, prefix) or _under(name, prefix)]
        for imported in sorted(every_import(path)):
            for banned in (b for rule in rules for b in rule):
                if _under(imported, banned) and not _under(name, banned) and not settings_section(name, imported):
                    broken.append(f"{name} imports {imported} ({banned} is not below it)")
    assert not broken, "\n".join(broken)


# The tests' own layout (docs/testing.md, "How the tests are organised"): tests/unit mirrors the product, so the
# tests of portal/scheduler/slurm/json_answers.py are tests/unit/portal/scheduler/slurm/test_json_answers.py. Directly
# in tests/unit: the house's rules, and the tests of the suites' own support modules. What two test modules share
# is in a helpers module (tests/unit/helpers.py, tests/integration/helpers.py), a conftest.py or tests/*.py (such as
# tests/special_files.py): no module under tests/ imports a test module.
MIRRORED = (*PRODUCT, "docs")  # docs: its one script, docs/benchmarks_chart.py
UNIT_DATA = "data"  # tests/unit/data: Slurm's real answers (tests/slurm_answers.py reads them), NVML's
HOUSE_RULES = ("test_behaviours_list.py", "test_layers.py", "test_packaging.py", "test_suites_collect.py",
               "test_user_file_reads.py")
# of tests/answers.py, tests/children.py, tests/line_coverage.py, tests/listeners.py, tests/newcomer.py and
# tests/users_boxes.py
SUPPORT_TESTS = ("test_answers.py", "test_children.py", "test_line_coverage.py", "test_listeners.py",
                 "test_newcomer.py", "test_users_boxes.py")


def unmirrored(root: Path = REPO) -> list[str]:
    """What breaks the mirror: a directory under tests/unit that is no directory of the product's code (one that
    holds Python modules), one without an `__init__.py` (pytest's default import mode needs unique module names),
    or a test module directly in tests/unit that is no house rule."""
    unit = root / "tests" / "unit"
    broken = []
    for path in sorted(unit.rglob("*")):
        relative = path.relative_to(unit)
        if not path.is_dir() or "__pycache__" in relative.parts or relative.parts[0] in (UNIT_DATA, ".pytest_cache"):
            continue
        code = root / relative
        if relative.parts[0] not in MIRRORED or not code.is_dir() or not any(code.glob("*.py")):
            broken.append(f"tests/unit/{relative.as_posix()} mirrors no directory of the product's code")
        elif not (path / "__init__.py").exists():
            broken.append(f"tests/unit/{relative.as_posix()} has no __init__.py")
    broken += [f"tests/unit/{path.name} is no house rule: it goes beside the tests of its module's package"
               for path in sorted(unit.glob("test_*.py")) if path.name not in (*HOUSE_RULES, *SUPPORT_TESTS)]
    return broken


def imported_test_modules(path: Path) -> set[str]:
    """The test modules (`test_*`, named from tests/ or relatively) that a module imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if alias.name.split(".")[0] == "tests"]
        elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "tests"):
            base = "." * node.level + (node.module or "")
            names = [base, *(f"{base}.{alias.name}".replace("..", ".") for alias in node.names)]
        else:
            continue
        found.update(name for name in names if any(part.startswith("test_") for part in name.split(".")))
    return found


def test_unit_tests_mirror_the_products_packages():
    broken = unmirrored()
    assert not broken, "\n".join(broken)


def test_no_module_of_the_tests_imports_a_test_module():
    importers = {path.relative_to(REPO).as_posix(): sorted(names)
                 for path in sorted((REPO / "tests").rglob("*.py")) if (names := imported_test_modules(path))}
    assert not importers, f"shared helpers go in a helpers module, a conftest.py or tests/*.py: {importers}"
