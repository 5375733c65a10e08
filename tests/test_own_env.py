"""A user's own env in their own project folder (docs/own-project.md): ``env.id: reach_env:ReachEnv`` names a class in
a file beside params.yaml, importable by no one but the ``rlcore`` command run in that folder. The page's files and
commands are the test's own (so the page cannot rot): train, evaluate, select and export in-process through the
console script's entry point, then the page's ``run_onnx.py`` runs the exported model on the env with onnxruntime.
Also: ES's spawned worker processes build the env, and any process started later imports from the project folder;
``module:Name`` is an attribute before a registered id; per-episode ``env.parameters`` draw the constructor's keywords
of an own env."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml
from cli_support import run_in_process
from conftest import PROJECT, outputs, sets, tool_env

from rlcore.common.numbers import score
from rlcore.common.project import use_project_folder
from rlcore.envs.ids import env_spec
from rlcore.envs.vector import make_vector_env
from rlcore.evaluation.report import read_curve
from rlcore.params import validate_params
from rlcore.project.compare import compare_experiments

PAGE = (PROJECT / "docs" / "own-project.md").read_text()

TINY = [
    "train.max_steps=1024",
    "train.eval_every=512",
    "train.log_every=512",
    "train.eval_episodes=2",
    "train.progress_bar=off",
    "env.num_envs=4",
    "eval.episodes=2",
    "eval.test_episodes=2",
    "export.parity_observations=64",
    "export.torch_export=false",  # the ONNX file is the page's
]
"""The page's run at the smallest budget that still writes two checkpoints to choose from."""


def page_block(title: str) -> str:
    """The text of the page's code block titled ``title``."""
    found = re.search(rf'```\w+ title="{re.escape(title)}"\n(.*?)```', PAGE, re.DOTALL)
    assert found, f"docs/own-project.md has no code block titled {title}"
    return found.group(1)


def page_commands() -> list[list[str]]:
    """The ``rlcore`` commands of the page's bash blocks, comments dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", PAGE, re.DOTALL)
    lines = [line.partition("#")[0].split() for block in blocks for line in block.splitlines()]
    return [line[1:] for line in lines if line[:1] == ["rlcore"]]


def merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """``base`` with the keys of ``change`` put in, section by section."""
    out = dict(base)
    for key, value in change.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def own_project(folder: Path, budget: list[str]) -> Path:
    """The page's project: ``rlcore init`` (the page's first command, in process), the page's changes to its
    params.yaml (and ``budget``, ``key=value`` overrides, written into it: ``dvc repro`` takes no ``--set``), and
    reach_env.py beside it."""
    init = page_commands()[0]
    assert init == ["init", "reach"], init
    outcome = run_in_process(init, folder, limit=120)
    assert outcome.returncode == 0, outcome
    root = folder / "reach"
    params = merged(yaml.safe_load((root / "params.yaml").read_text()), yaml.safe_load(page_block("params.yaml")))
    for override in budget:
        key, value = override.split("=", 1)
        *sections, leaf = key.split(".")
        node = params
        for section in sections:
            node = node[section]
        node[leaf] = yaml.safe_load(value)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / "reach_env.py").write_text(page_block("reach_env.py"))
    (root / "run_onnx.py").write_text(page_block("run_onnx.py"))
    assert importlib.util.find_spec("reach_env") is None  # only the command run in root can import it
    return root


def runs_on_the_env(root: Path) -> None:
    """The page's ``run_onnx.py``: the exported model on the user's env, with onnxruntime and without rlcore."""
    shown = subprocess.run([sys.executable, "run_onnx.py"], cwd=root, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert re.fullmatch(r"return -?\d+\.\d\d\n", shown.stdout), shown.stdout


@pytest.mark.slow
def test_the_pages_own_env_trains_evaluates_selects_exports_and_runs_in_onnxruntime(tmp_path: Path) -> None:
    root = own_project(tmp_path, TINY)
    commands = page_commands()[1:-1]  # the last, compare, draws DVC experiments: the DVC test below runs it
    assert [command[0] for command in commands] == ["dvc-yaml", "train", "evaluate", "select", "export"]
    for command in commands:
        outcome = run_in_process(command, root, limit=300)
        assert outcome.returncode == 0, outcome
    assert "reach_env.py" in yaml.safe_load((root / "dvc.yaml").read_text())["stages"]["train"]["deps"]
    card = json.loads((outputs(root, "reach").export / "model_card.json").read_text())
    assert card["env"]["id"] == "reach_env:ReachEnv"
    assert card["parity"]["onnx_max_abs_diff"] <= 1e-5
    runs_on_the_env(root)


def dvc(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(Path(sys.executable).with_name("dvc")), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
        env=tool_env(),
    )
    assert result.returncode == 0, f"dvc {' '.join(args)}: {result.stdout}\n{result.stderr}"
    return result


def ran(result: subprocess.CompletedProcess[str]) -> set[str]:
    return set(re.findall(r"Running stage '([^']+)'", result.stdout))


@pytest.mark.slow
def test_a_new_project_with_its_own_env_runs_in_dvc_compares_experiments_and_reruns_only_what_changed(
    tmp_path: Path,
) -> None:
    """Issue 38's user, in a folder outside this repository: ``rlcore init``, the page's reach_env.py (a class, not
    registered) named by ``env.id``, ``dvc repro`` -> every stage up to date for ``dvc status``, an ONNX model
    onnxruntime runs on the env (the one ``dvc repro`` of a new project in the suite: tests/test_init.py checks the
    files ``rlcore init`` writes, tests/test_dvc_pipeline.py a registered env's pipeline); two ``dvc exp run
    -S algo.lr=...`` -> ``dvc exp show --json`` holds both experiments' test scores as numbers and ``rlcore compare``
    draws their curves together; an ``eval.episodes`` change re-runs evaluate, select and export and nothing else."""
    root = own_project(tmp_path, TINY)
    assert run_in_process(["dvc-yaml"], root).returncode == 0
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=tool_env())
    subprocess.run(["git", "commit", "-qm", "reach"], cwd=root, check=True, env=tool_env())
    assert ran(dvc(root, "repro")) == {"train", "evaluate", "select", "export"}
    assert "Data and pipelines are up to date" in dvc(root, "status").stdout
    runs_on_the_env(root)
    curve = root / "runs" / "reach" / "dvclive" / "plots" / "metrics" / "eval" / "mean_return.tsv"
    curves = {yaml.safe_load((root / "params.yaml").read_text())["algo"]["lr"]: read_curve(curve)}
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=tool_env())
    subprocess.run(["git", "commit", "-qm", "dvc.lock"], cwd=root, check=True, env=tool_env())
    for lr in ("0.0003", "0.003"):
        assert "train" in ran(dvc(root, "exp", "run", "-S", f"algo.lr={lr}"))
        curves[float(lr)] = read_curve(curve)  # the experiment's, in the workspace until the next one runs
    shown = json.loads(dvc(root, "exp", "show", "--json").stdout)
    scores, names = {}, {}
    for commit in shown:
        for experiment in commit.get("experiments") or []:
            data = experiment["revs"][0]["data"]
            lr = data["params"]["params.yaml"]["data"]["algo"]["lr"]
            scores[lr] = data["metrics"]["reports/reach/scores.json"]["data"]
            names[experiment["name"]] = lr
    assert set(scores) == {0.0003, 0.003}, scores
    for numbers in scores.values():
        assert all(isinstance(numbers[key], float) for key in ("test_mean_return", "test_ci95_low", "test_ci95_high"))
        assert numbers["test_ci95_low"] <= numbers["test_mean_return"] <= numbers["test_ci95_high"]
    compares_the_experiments_curves(root, shown[-1]["name"], names, curves)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["eval"]["episodes"] += 1
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert ran(dvc(root, "repro")) == {"evaluate", "select", "export"}


def compares_the_experiments_curves(
    root: Path, baseline: str, experiments: dict[str, float], curves: dict[float, tuple[list[int], list[float]]]
) -> None:
    """The page's ``rlcore compare``: the baseline's and both experiments' curves (the workspace is the last
    experiment) in one PNG, a row each naming the learning rate; then two experiments named, read through DVC
    (git and its cache) exactly as dvclive wrote them."""
    command = page_commands()[-1]
    assert command == ["compare"], command
    outcome = run_in_process(command, root, limit=120)
    assert outcome.returncode == 0, outcome
    assert (root / "reports" / "compare.png").read_bytes()[:4] == b"\x89PNG"
    rows = [line.split("|")[1:-1] for line in outcome.stdout.splitlines() if line.startswith("| ")][1:]
    lrs = {baseline: curves.keys() - set(experiments.values()), **{name: {lr} for name, lr in experiments.items()}}
    assert [row[0].strip() for row in rows] == list(lrs), outcome.stdout
    for name, params, final, best in rows:
        (lr,) = lrs[name.strip()]
        assert params.strip() == f"algo.lr={lr}"
        assert (final.strip(), best.strip()) == (score(curves[lr][1][-1]), score(max(curves[lr][1])))
    named = compare_experiments(root, list(experiments), root / "reports" / "two.png", "eval/mean_return")
    assert [(row.revision, row.changed) for row in named] == [(n, {"algo.lr": lr}) for n, lr in experiments.items()]
    assert [(row.env_steps, row.values) for row in named] == [curves[lr] for lr in experiments.values()]
    assert (root / "reports" / "two.png").is_file()


ES_TINY = [
    "name=es-reach",
    "env.id=reach_env:ReachEnv",
    "env.kwargs={max_episode_steps: 10}",
    "algo.runner=local",
    "algo.num_workers=2",
    "algo.population_size=4",
    "algo.pairs_per_task=1",
    "train.max_steps=200",
    "train.eval_every=100",
    "train.log_every=100",
    "train.eval_episodes=2",
    "train.target_return=null",
    "train.progress_bar=off",
]


@pytest.mark.slow
@pytest.mark.serial  # ES's workers are processes
def test_es_worker_processes_build_the_own_env_of_the_project_folder(tmp_path: Path) -> None:
    root = own_project(tmp_path, [])
    params = ["--params", str(PROJECT / "configs" / "es-cartpole.yaml")]
    outcome = run_in_process(["train", *params, *sets(ES_TINY)], root, limit=300)
    assert outcome.returncode == 0, outcome
    summary = json.loads((root / "runs" / "es-reach" / "train_summary.json").read_text())
    assert summary["env_steps"] >= 200


OWN = """
import gymnasium as gym
import numpy as np


class Reach(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, step_size=0.2):
        self.step_size = step_size

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), -self.step_size, False, False, {}


class Registered(Reach):
    pass


class Unregistered(Reach):
    pass


if "Reach" not in gym.registry:
    gym.register("Reach", entry_point=Registered, max_episode_steps=7)
if "Far-v3" not in gym.registry:
    gym.register("Far-v3", entry_point=Registered, max_episode_steps=9)
"""


@pytest.fixture
def own_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module ``own_rule_envs`` that both defines ``Reach`` and registers an id ``Reach`` (and ``Far-v3``)."""
    (tmp_path / "own_rule_envs.py").write_text(OWN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "own_rule_envs"
    sys.modules.pop("own_rule_envs", None)
    for env_id in ("Reach", "Far-v3"):
        gym.registry.pop(env_id, None)


def test_module_name_is_the_modules_attribute_before_an_id_the_module_registers(own_module: str) -> None:
    env = gym.make(env_spec(f"{own_module}:Reach"))
    assert type(env.unwrapped).__name__ == "Reach"
    assert env_spec(f"{own_module}:Reach").max_episode_steps is None
    registered = env_spec(f"{own_module}:Far-v3")  # never an attribute name: the registered id
    assert (registered.id, registered.max_episode_steps) == ("Far-v3", 9)


def test_env_parameters_of_an_own_env_redraw_its_constructor_keywords_every_episode(own_module: str) -> None:
    tree = yaml.safe_load((PROJECT / "params.yaml").read_text())
    tree["env"] = {
        "id": f"{own_module}:Unregistered",
        "kwargs": {"max_episode_steps": 5},
        "parameters": {"step_size": {"sampler": "uniform", "low": 0.1, "high": 0.9}},
    }
    params = validate_params(tree)
    env = make_vector_env(params.env, 1)
    rewards = []
    for episode in range(3):
        env.reset(seed=episode)
        rewards.append(float(env.step(np.zeros((1, 1), np.float32))[1][0]))
    env.close()
    assert len(set(rewards)) == 3 and all(-0.9 <= reward <= -0.1 for reward in rewards), rewards


def test_any_process_started_after_the_project_folder_is_used_imports_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Children that multiprocessing does not start (a Prefect process run, a Dask worker's nanny, a subprocess)
    see the project folder through PYTHONPATH, from any working directory."""
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "reach_env.py").write_text(page_block("reach_env.py"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    assert use_project_folder(tmp_path / "project") == (tmp_path / "project").resolve()
    use_project_folder(tmp_path / "project")  # once on each path, however often a flow calls it
    assert sys.path.count(str((tmp_path / "project").resolve())) == 1
    assert os.environ["PYTHONPATH"].split(os.pathsep).count(str((tmp_path / "project").resolve())) == 1
    child = [sys.executable, "-c", "import reach_env; print(reach_env.ReachEnv.__name__)"]
    shown = subprocess.run(child, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert shown.stdout == "ReachEnv\n", shown.stderr
