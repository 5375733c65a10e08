"""The import graph of rlcore/ and flows/ (issue 10): no import cycle; rlcore never imports the orchestration layer.

Every ``import`` statement in every module counts, wherever it is: at the top, inside functions, under
``if TYPE_CHECKING:``. Import edges are read from the source with :mod:`ast`; nothing is imported.

An import is an edge to each project module it names:

- ``import a.b.c`` and ``from a.b.c import name`` (``name`` not a submodule): an edge to ``a.b.c``;
- ``from a.b import c`` where ``a/b/c.py`` exists: an edge to the module ``a.b.c``;
- importing ``a.b.c`` also executes the ``__init__`` of its packages ``a`` and ``a.b``: an edge to a package is
  added when its ``__init__.py`` imports project modules of its own (one that does not cannot close a cycle),
  and not from modules inside that package, whose ``__init__`` has always run (started) before they do.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
PACKAGES = ("rlcore", "flows")
FORBIDDEN_IN_RLCORE = ("flows", "prefect", "dvc", "optuna")
"""Top-level packages rlcore must not import: the orchestration layer (``dvclive`` is allowed: the trainer logs)."""


@dataclass(frozen=True)
class Import:
    """One imported module, as written: the absolute dotted name, the names taken from it, where."""

    module: str
    names: tuple[str, ...]
    line: int


def module_files() -> dict[str, Path]:
    """Dotted name -> file of every module of the project's packages (``pkg.sub`` for ``pkg/sub/__init__.py``)."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((PROJECT / package).rglob("*.py")):
            parts = path.relative_to(PROJECT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imports_of(module: str, path: Path) -> list[Import]:
    """Every import statement anywhere in the file, relative ones resolved to absolute module names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # Relative to the package: the module itself for an __init__, its parent otherwise.
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append(Import(target, tuple(alias.name for alias in node.names), node.lineno))
    return sorted(found, key=lambda imp: imp.line)


def _top(name: str) -> str:
    return name.split(".")[0]


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported project module: line of the first such import}."""
    files = module_files()
    raw = {module: imports_of(module, path) for module, path in files.items()}
    packages = {module for module, path in files.items() if path.name == "__init__.py"}
    # A package's __init__ takes part in cycles only if it imports project modules itself.
    importing_packages = {pkg for pkg in packages if any(_top(imp.module) in PACKAGES for imp in raw[pkg])}

    graph: dict[str, dict[str, int]] = {module: {} for module in files}
    for module, imports in raw.items():
        # The packages whose __init__ has started before this module runs: its ancestors, and itself for a package.
        parts = module.split(".")
        started = {".".join(parts[:i]) for i in range(1, len(parts) + (module in packages))}

        def add(target: str, line: int, explicit: bool, module: str = module, started: set[str] = started) -> None:
            implicit_ok = target in importing_packages and target not in started
            if target in files and target != module and (explicit or implicit_ok):
                graph[module].setdefault(target, line)
            names = target.split(".")
            for i in range(1, len(names)):
                package = ".".join(names[:i])
                if package in importing_packages and package not in started:
                    graph[module].setdefault(package, line)

        for imp in imports:
            if _top(imp.module) not in PACKAGES:
                continue
            submodules = [f"{imp.module}.{name}" for name in imp.names if f"{imp.module}.{name}" in files]
            # ``import a.b`` or ``from a.b import name`` uses a.b itself; ``from a.b import c`` (a submodule) only
            # runs a.b's __init__ on the way, which matters unless it has already started.
            explicit = not imp.names or len(submodules) < len(imp.names)
            add(imp.module, imp.line, explicit)
            for submodule in submodules:
                add(submodule, imp.line, True)
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle per strongly connected component that has one (Tarjan, then a shortest cycle inside it)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0

    def visit(root: str) -> None:
        nonlocal counter
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)

    cycles = []
    for component in sorted(components):
        members = set(component)
        start = component[0]
        # Breadth-first search from start back to start, inside the component: a shortest cycle through it.
        previous: dict[str, str] = {}
        frontier = [start]
        found = None
        while frontier and found is None:
            following = []
            for node in frontier:
                for child in sorted(graph[node]):
                    if child == start:
                        found = node
                        break
                    if child in members and child not in previous:
                        previous[child] = node
                        following.append(child)
                if found is not None:
                    break
            frontier = following
        path = [start]
        node = found
        while node is not None and node != start:
            path.append(node)
            node = previous[node]
        cycles.append([start, *reversed(path[1:]), start])
    return cycles


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    """``a -> b -> a`` and, under it, the import line that makes each edge."""
    files = module_files()
    edges = [
        f"    {source} -> {target}  ({files[source].relative_to(PROJECT)}:{graph[source][target]})"
        for source, target in zip(cycle, cycle[1:], strict=False)
    ]
    return " -> ".join(cycle) + "\n" + "\n".join(edges)


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert len(graph) > 10 and any(graph.values()), "no modules or no imports found: is PROJECT right?"
    cycles = find_cycles(graph)
    assert not cycles, f"{len(cycles)} import cycle(s):\n" + "\n".join(describe(cycle, graph) for cycle in cycles)


def test_rlcore_does_not_import_the_orchestration_layer():
    offences = []
    for module, path in module_files().items():
        if _top(module) != "rlcore":
            continue
        for imp in imports_of(module, path):
            if _top(imp.module) in FORBIDDEN_IN_RLCORE:
                offences.append(f"{path.relative_to(PROJECT)}:{imp.line}: imports {imp.module}")
    assert not offences, "rlcore must not import flows, prefect, dvc or optuna:\n" + "\n".join(offences)


def test_the_graph_reader_resolves_relative_imports_and_submodules(tmp_path):
    """The reader itself: relative imports, ``from package import submodule``, imports inside functions."""
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from ..config import Params\n"
        "if TYPE_CHECKING:\n"
        "    import rlcore.algos.base\n"
        "def f():\n"
        "    from flows.sweep import plan\n"
    )
    path = tmp_path / "mod.py"
    path.write_text(source)
    found = [(imp.module, imp.names) for imp in imports_of("rlcore.trainers.mod", path)]
    assert found[2:] == [
        ("rlcore.trainers", ("sibling",)),
        ("rlcore.config", ("Params",)),
        ("rlcore.algos.base", ()),
        ("flows.sweep", ("plan",)),
    ]
    cycle = find_cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {}})
    assert cycle == [["a", "b", "c", "a"]]
