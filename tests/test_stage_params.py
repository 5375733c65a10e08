"""The params each stage reads, declared once (issue 27): every ``dvc.yaml`` stage lists the keys of
``rlcore.stages.STAGE_PARAMS`` for it, and that table covers every params key the stage's code reads.

A key missing from a stage's ``params`` leaves its outputs stale when the key changes: the select stage read
``train.target_return`` (the baseline comparison's threshold) while dvc.yaml did not list it. The code's reads are
found statically: ``params.<section>.<key>`` attribute chains in the stage's module and in the modules of
``rlcore/stages/`` it imports, read with :mod:`ast` (nothing is run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml
from cli_support import assert_refused, run_in_process

from rlcore.config.inheritance import has_key, read_params_tree
from rlcore.config.sections import Params
from rlcore.stages import STAGE_PARAMS

PROJECT = Path(__file__).resolve().parents[1]
PACKAGE = PROJECT / "rlcore" / "stages"
PIPELINES = [PROJECT / "dvc.yaml", *sorted((PROJECT / "pipelines").rglob("dvc.yaml"))]
"""The pipelines whose stages are rlcore stages (``sweeps/dvc.yaml`` runs a study: its own test below)."""

WHOLE_TREE = {"train": {"train", "is_offline", "batched_trainer"}}
"""Functions outside the package a stage hands the whole params tree to: the trainer, which reads every section
the train stage lists (the static reading below cannot follow it there)."""


def covers(table: tuple[str, ...] | list[str], key: str) -> bool:
    """A table entry covers ``key`` when it is the key or one of its sections (``eval`` covers ``eval.seed``)."""
    return any(key == entry or key.startswith(entry + ".") for entry in table)


# --- dvc.yaml against the table -----------------------------------------------------------------------------


def declared_stages(dvc_file: Path) -> list[tuple[str, str, Path, list[str]]]:
    """(stage name, rlcore stage its command runs, the params file it reads, the params keys dvc.yaml lists: of a
    file with a ``base``, those of both files)."""
    found = []
    for name, stage in yaml.safe_load(dvc_file.read_text())["stages"].items():
        wdir = (dvc_file.parent / stage.get("wdir", ".")).resolve()
        command = stage["cmd"].split()
        assert command[:1] == ["rlcore"], f"{dvc_file}: {name}: not an rlcore stage: {stage['cmd']}"
        params_file = command[command.index("--params") + 1] if "--params" in command else "params.yaml"
        base = yaml.safe_load((wdir / params_file).read_text()).get("base")
        keys: list[str] = []
        for entry in stage.get("params", []):
            if isinstance(entry, str):  # DVC's default params file
                entry = {"params.yaml": [entry]}
            for file, listed in entry.items():
                assert file in (params_file, base), f"{dvc_file}: {name}: lists keys of {file}, it reads {params_file}"
                keys += listed
        found.append((name, command[1], wdir / params_file, keys))
    return found


@pytest.mark.parametrize("dvc_file", PIPELINES, ids=lambda path: str(path.relative_to(PROJECT)))
def test_every_dvc_stage_lists_the_params_of_the_table(dvc_file: Path) -> None:
    """Each stage's ``params`` are the table's keys for its command, those its params file has: DVC refuses a
    key the file lacks, which then runs on its default, part of the code."""
    problems = []
    for name, stage, params_file, keys in declared_stages(dvc_file):
        assert stage in STAGE_PARAMS, f"{dvc_file}: {name}: `rlcore {stage}` has no row in STAGE_PARAMS"
        tree = read_params_tree(params_file)  # with a base file's keys (offline.yaml's base: params.yaml)
        expected = [key for key in STAGE_PARAMS[stage] if has_key(tree, key)]
        # A section may be listed as its keys (some from each file): covered when every listed key is in it.
        missing = [key for key in expected if key not in keys and not any(k.startswith(key + ".") for k in keys)]
        extra = [key for key in keys if not covers(expected, key)]
        if missing or extra:
            problems.append(f"{name} ({stage}): missing {missing}, not in the table {extra}")
    assert not problems, f"{dvc_file.relative_to(PROJECT)}: " + "; ".join(problems)


def test_this_repository_s_dvc_yaml_is_the_generator_s_output() -> None:
    """This repository's dvc.yaml and every ``rlcore init`` project's come from one function, so the two stay one
    design: regenerate with ``rlcore dvc-yaml`` after changing it (or the params files' keys)."""
    from rlcore.project.pipeline_file import pipeline_yaml

    assert (PROJECT / "dvc.yaml").read_text() == pipeline_yaml(PROJECT)


def test_the_warm_start_pipeline_is_the_generator_s_output() -> None:
    """pipelines/warmstart/dvc.yaml is the preset's run as a pipeline of its own, generated like dvc.yaml
    (``rlcore dvc-yaml --params configs/ppo-from-bc-cartpole.yaml --pipeline pipelines/warmstart``): its train depends
    on the offline branch's model (train.init_from) and dataset (the BC loss), its select on the baseline run."""
    from rlcore.project.pipeline_file import sub_pipeline_yaml

    text = sub_pipeline_yaml(PROJECT, "configs/ppo-from-bc-cartpole.yaml", "pipelines/warmstart")
    assert (PROJECT / "pipelines" / "warmstart" / "dvc.yaml").read_text() == text
    stages = yaml.safe_load(text)["stages"]
    assert stages["train_warmstart"]["deps"] == ["models/bc-cartpole/policy.pt", "data/dataset.parquet"]
    assert "runs/ppo-cartpole" in stages["select_warmstart"]["deps"]
    assert {stage["wdir"] for stage in stages.values()} == {"../.."}


def test_dvc_yaml_check_names_the_pipeline_that_differs(tmp_path: Path) -> None:
    for name in ("params.yaml", "offline.yaml", "dvc.yaml", "configs/ppo-from-bc-cartpole.yaml"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text((PROJECT / name).read_text())
    args = ["dvc-yaml", "--params", "configs/ppo-from-bc-cartpole.yaml", "--pipeline", "pipelines/warmstart"]
    assert_refused(run_in_process([*args, "--check"], tmp_path), "pipelines/warmstart/dvc.yaml: not what", args[0])
    assert run_in_process(args, tmp_path).returncode == 0
    assert run_in_process([*args, "--check"], tmp_path).returncode == 0
    assert_refused(run_in_process(args[:1] + args[3:], tmp_path), "--pipeline: give it with --params")


def test_the_sweep_stage_lists_what_its_trials_read() -> None:
    """A trial trains, evaluates and selects (``flows/sweep/trial.py``) with the study's params file."""
    (name, command, params_file, keys), *others = declared_stages(PROJECT / "sweeps" / "dvc.yaml")
    assert (command, others) == ("sweep", [])
    tree = yaml.safe_load(params_file.read_text())
    read = {key for stage in ("train", "evaluate", "select") for key in STAGE_PARAMS[stage] if has_key(tree, key)}
    assert "sweep" in keys
    assert [key for key in sorted(read) if not covers(keys, key)] == []


# --- the table against the code -----------------------------------------------------------------------------


def stage_modules(stage: str) -> list[Path]:
    """The stage's module and the package's modules it imports, transitively (the evaluators, the shared checks)."""
    modules, queue = [], [PACKAGE / f"{stage}.py"]
    while queue:
        path = queue.pop()
        if path in modules:
            continue
        modules.append(path)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rlcore.stages."):
                queue.append(PACKAGE / f"{node.module.removeprefix('rlcore.stages.')}.py")
    return modules


def params_reads(path: Path) -> set[str]:
    """Every ``params.a.b`` chain of the module, as ``a.b`` (whole chains only; methods such as ``model_copy``
    are not keys)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    reads = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue
        parts: list[str] = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            parts.insert(0, base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id == "params" and parts[0] in Params.model_fields:
            reads.add(".".join(parts))
    return reads


def whole_tree_calls(path: Path) -> set[str]:
    """Names of the functions the module passes ``params`` to whole."""
    called = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            arguments = [*node.args, *(keyword.value for keyword in node.keywords)]
            if any(isinstance(arg, ast.Name) and arg.id == "params" for arg in arguments):
                func = node.func
                called.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ast.unparse(func)))
    return called


def package_functions() -> set[str]:
    return {
        node.name
        for path in PACKAGE.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef)
    }


@pytest.mark.parametrize("stage", sorted(STAGE_PARAMS))
def test_the_table_covers_every_params_key_the_stage_reads(stage: str) -> None:
    modules = stage_modules(stage)
    reads = set().union(*(params_reads(path) for path in modules))
    assert reads, f"{stage}: no params read found in {modules}"
    assert sorted(key for key in reads if not covers(STAGE_PARAMS[stage], key)) == []
    # The reads above are all: params goes whole only to the package's own functions (read above too).
    outside = set().union(*(whole_tree_calls(path) for path in modules)) - package_functions()
    assert sorted(outside - WHOLE_TREE.get(stage, set())) == []


def test_the_static_reading_finds_the_select_stage_s_threshold() -> None:
    """The reading sees through the package's own modules: select's test scoring reads ``eval`` in the evaluators,
    its baseline comparison ``train.target_return``."""
    reads = set().union(*(params_reads(path) for path in stage_modules("select")))
    assert {"train.target_return", "eval", "eval.test_episodes", "env.id", "select.baseline_run"} <= reads
    assert not covers(STAGE_PARAMS["evaluate"], "train.target_return")


def test_the_flow_s_select_task_is_keyed_on_the_baseline_threshold(tmp_path: Path) -> None:
    """``rlcore pipeline`` caches each task on the table's keys: a new ``train.target_return`` re-runs select (its
    report's baseline comparison) and not evaluate."""
    from flows.caching import StageInputs

    (tmp_path / "params.yaml").write_text((PROJECT / "params.yaml").read_text())

    def key(stage: str, target_return: int) -> str:
        inputs = {
            "root": tmp_path,
            "params_path": tmp_path / "params.yaml",
            "overrides": [f"train.target_return={target_return}"],
        }
        return StageInputs(stage=stage).base_key(inputs)

    assert key("select", 400) != key("select", 500)
    assert key("evaluate", 400) == key("evaluate", 500)
