"""The shape of the code (issues 10 and 27): the import contract holds, rlcore's top level stays small, and no
module outside tests/ grows past 500 lines without a stated reason.

The import rules (rlcore's layers point down only, no cycle in any package, rlcore never imports flows, Prefect,
DVC or Optuna, IMPALA's actors and ES/SVPG's workers independent) are declared once in pyproject.toml's
``[tool.importlinter]`` and checked here by the real tool, ``lint-imports`` (also run by ``make lint``). Every
import counts: at the top, inside functions, under ``if TYPE_CHECKING:`` (checked below on a copy of the project).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import PROJECT

TESTS = PROJECT / "tests"

LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")

MAX_TOP_LEVEL_MODULES = 8
"""rlcore/'s top level keeps the modules a reader starts from; everything else lives in a concept folder."""

MAX_LINES = 500
LONG_MODULES: dict[str, str] = {}
"""Modules outside tests/ allowed over :data:`MAX_LINES`, each with the reason it must be that long (path relative
to the project -> reason). Empty is the goal; an entry whose module is gone or back under the limit fails the test,
so the list only shrinks."""


def lint_imports(project: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on ``project`` (its pyproject.toml's contract, its own rlcore/ and flows/), no cache."""
    env = {**os.environ, "PYTHONPATH": str(project)}
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )


def broken_contracts(result: subprocess.CompletedProcess[str]) -> str:
    """The tool's report from its list of contracts on (its banner left out)."""
    output = result.stdout + result.stderr
    return output[output.find("Contracts") :] if "Contracts" in output else output


def test_the_import_contract_holds():
    result = lint_imports(PROJECT)
    assert "Contracts:" in result.stdout, f"lint-imports did not check any contract:\n{broken_contracts(result)}"
    assert result.returncode == 0, f"lint-imports found broken import rules:\n{broken_contracts(result)}"


def test_the_contract_counts_imports_inside_functions_and_under_type_checking(tmp_path):
    """The contract itself, on a copy of the project with three offending imports added to a leaf module: one
    inside a function (up the layers), one under ``TYPE_CHECKING`` (up the layers), one of Optuna inside a
    function (forbidden in rlcore)."""
    for name in ("rlcore", "flows"):
        shutil.copytree(PROJECT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT / "pyproject.toml", tmp_path / "pyproject.toml")
    leaf = tmp_path / "rlcore" / "common" / "files.py"
    leaf.write_text(
        leaf.read_text(encoding="utf-8")
        + "\n\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import rlcore.registry\n\n\n"
        "def _offending():\n    from rlcore.cli import main\n    import optuna\n\n    return main, optuna\n",
        encoding="utf-8",
    )
    result = lint_imports(tmp_path)
    report = broken_contracts(result)
    assert result.returncode == 1, report
    for arrow in (
        "rlcore.common.files -> rlcore.cli",
        "rlcore.common.files -> rlcore.registry",
        "rlcore.common.files -> optuna",
    ):
        assert arrow in report, f"{arrow} not reported:\n{report}"


def test_rlcore_top_level_has_at_most_8_modules():
    modules = sorted(path.name for path in (PROJECT / "rlcore").glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, (
        f"rlcore/ holds {len(modules)} modules at its top level (at most {MAX_TOP_LEVEL_MODULES}): {modules}; "
        "move the new ones into the folder of their concept"
    )


def _source_files() -> dict[str, int]:
    """Every .py file of the project outside tests/ (and hidden folders such as .venv) -> its line count."""
    counts = {}
    for folder, subfolders, files in os.walk(PROJECT):
        # pruned as the walk goes: .venv alone holds tens of thousands of files
        subfolders[:] = [name for name in subfolders if not name.startswith(".") and Path(folder, name) != TESTS]
        for name in files:
            if name.endswith(".py") and not name.startswith("."):
                path = Path(folder, name)
                counts[path.relative_to(PROJECT).as_posix()] = len(path.read_text(encoding="utf-8").splitlines())
    return dict(sorted(counts.items()))


def test_no_module_outside_tests_is_over_500_lines_without_a_reason():
    counts = _source_files()
    assert "rlcore/cli.py" in counts, "no modules found: is PROJECT right?"
    long = {path: lines for path, lines in counts.items() if lines > MAX_LINES and path not in LONG_MODULES}
    assert not long, f"over {MAX_LINES} lines (split by role, or list in LONG_MODULES with the reason): {long}"
    stale = [path for path in LONG_MODULES if counts.get(path, 0) <= MAX_LINES]
    assert not stale, f"remove from LONG_MODULES (gone, or no longer over {MAX_LINES} lines): {stale}"
