"""The module table of docs/architecture.md (issue 27; in the README until issue 30) is generated from the
modules' own docstrings by ``docs/module_table.py``:
it fails here as soon as a module is added, moved or redescribed without re-running the script."""

from __future__ import annotations

import difflib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT

SCRIPT = PROJECT / "docs" / "module_table.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("module_table", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


module_table = _load_script()


def test_the_architecture_page_module_table_is_what_the_script_writes():
    readme = module_table.PAGE.read_text(encoding="utf-8")
    wanted = module_table.rewrite(readme, module_table.table())
    diff = "".join(
        difflib.unified_diff(readme.splitlines(True), wanted.splitlines(True), "docs/architecture.md", "generated", n=0)
    )
    assert readme == wanted, (
        f"docs/architecture.md's module table is out of date: run `python docs/module_table.py`\n{diff}"
    )


def test_every_rlcore_and_flows_module_has_a_row():
    rows = module_table.table()
    for package in ("rlcore", "flows"):
        for path in (PROJECT / package).rglob("*.py"):
            relative = path.relative_to(PROJECT)
            name = f"`{relative.parent.as_posix()}/`" if path.name == "__init__.py" else f"`{relative.as_posix()}`"
            assert f"| {name} |" in rows or f"| **{name}** |" in rows, f"{relative}: no row in the module table"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_check_exits_1_with_a_diff_when_the_table_differs_and_the_script_rewrites_it(tmp_path: Path):
    real = module_table.PAGE.read_text(encoding="utf-8")
    row = next(line for line in real.splitlines() if line.startswith("| `rlcore/registry.py` |"))
    stale = tmp_path / "architecture.md"
    stale.write_text(real.replace(row, "| `rlcore/registry.py` | every algorithm, listed once |"), encoding="utf-8")

    check = _run("--check", "--page", str(stale))
    assert check.returncode == 1, check.stderr
    assert "-| `rlcore/registry.py` | every algorithm, listed once |" in check.stdout
    assert f"+{row}" in check.stdout
    assert "run `python docs/module_table.py`" in check.stderr

    assert _run("--page", str(stale)).returncode == 0
    assert stale.read_text(encoding="utf-8") == module_table.rewrite(real, module_table.table())
    assert _run("--check", "--page", str(stale)).returncode == 0


def _tiny_project(root: Path, layers: list[str]) -> None:
    """rlcore/ with a folder ``low`` and a module ``top``, flows/ with one module, and the layers contract."""
    quoted = ", ".join(f'"{layer}"' for layer in layers)
    contract = f'[[tool.importlinter.contracts]]\ntype = "layers"\ncontainers = ["rlcore"]\nlayers = [{quoted}]\n'
    (root / "pyproject.toml").write_text(contract, encoding="utf-8")
    files = {
        "rlcore/__init__.py": '"""The library."""\n',
        "rlcore/top.py": '"""Top: uses :class:`low.a.Thing` (Smith et al., 2016). Then more. """\n',
        "rlcore/low/__init__.py": '"""The low folder: ``a`` and ``b``.\n\nMay import: nothing."""\n',
        "rlcore/low/a.py": '"""A thing | another\nthing, on two lines.\n\nDetails."""\n',
        "rlcore/low/b.py": '"""B."""\n',
        "flows/__init__.py": '"""Flows."""\n',
        "flows/run.py": '"""Run the flows."""\n',
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def test_the_table_follows_the_layers_and_takes_each_docstring_s_first_sentence(tmp_path: Path):
    _tiny_project(tmp_path, ["top", "low"])
    assert module_table.table(tmp_path).splitlines() == [
        "| module | holds |",
        "|---|---|",
        "| **`rlcore/`** | The library. |",
        "| `rlcore/top.py` | Top: uses `low.a.Thing` (Smith et al., 2016). |",
        "| **`rlcore/low/`** | The low folder: `a` and `b`. |",
        "| `rlcore/low/a.py` | A thing \\| another thing, on two lines. |",
        "| `rlcore/low/b.py` | B. |",
        "| **`flows/`** | Flows. |",
        "| `flows/run.py` | Run the flows. |",
    ]


def test_a_module_without_a_docstring_or_a_layer_is_refused(tmp_path: Path):
    _tiny_project(tmp_path, ["low"])
    with pytest.raises(module_table.TableError, match="top in no layer"):
        module_table.table(tmp_path)
    _tiny_project(tmp_path, ["top", "low"])
    (tmp_path / "rlcore" / "low" / "b.py").write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(module_table.TableError, match="rlcore/low/b.py: no module docstring"):
        module_table.table(tmp_path)
