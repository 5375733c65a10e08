"""Every preset (each file in ``configs/``, ``params.yaml`` and ``offline.yaml``) goes through train -> evaluate ->
select -> export on a tiny budget, by the ``rlcore`` stage commands (run in process: ``cli_support``), so a preset
whose pipeline cannot finish fails the suite on the day it breaks (the DQN preset's export failed its parity check at
the shipped budget, and nothing ran it). Only the budget shrinks: training steps, evaluation episodes and their
length, replay warm-ups and buffers; every other key is the preset's own. An env whose extra is not installed skips
with what to install.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import Outcome, run_in_process
from conftest import PROJECT, outputs, preset_text, sets

from rlcore.common.files import read_json
from rlcore.envs.ids import check_env_id

CONFIGS = sorted(f"configs/{path.name}" for path in (PROJECT / "configs").glob("*.yaml"))
PRESETS = ["params.yaml", "offline.yaml", *CONFIGS]
STAGE_SECONDS = 300
"""A stage that runs longer than this hangs (each takes seconds)."""
ROLLOUT = 512
"""Env steps of the one PPO rollout a tiny run trains on (at most)."""


def _tree(preset: str) -> dict[str, Any]:
    return yaml.safe_load(preset_text(preset))


def tiny_budget(tree: dict[str, Any]) -> list[str]:
    """Overrides that shrink ``tree``'s run to seconds: one or two updates (a PPO rollout, a few hundred replay
    steps past a shortened warm-up), one periodic evaluation, two validation and two test episodes of at most 200
    steps, 200 parity observations."""
    algo = tree["algo"]
    name = algo["name"]
    envs = tree["env"].get("num_envs", 1)
    extra: list[str] = []
    if name == "ppo":
        steps = algo.get("n_steps", 128)
        if steps * envs > ROLLOUT:  # Pong's, Hopper's, MountainCar's rollouts: shorter, to a few hundred env steps
            steps = max(1, ROLLOUT // envs)
            extra = [f"algo.n_steps={steps}"]
        budget = steps * envs  # one rollout
    elif name in ("dqn", "sac"):
        budget = 600
        extra = ["algo.learning_starts=300", "algo.buffer_size=10000"]
    elif name in ("bc", "td3bc", "iql"):
        budget = 200  # gradient steps
    else:  # a2c, es, impala, svpg: a few updates, iterations or trajectories
        budget = 1024
    return [
        f"train.max_steps={budget}",
        f"train.eval_every={budget}",
        f"train.log_every={budget}",
        "train.eval_episodes=1",
        "train.target_return=null",
        "train.progress_bar=off",
        "eval.episodes=2",
        "eval.test_episodes=2",
        "eval.max_episode_steps=200",
        "export.parity_observations=200",
        *extra,
    ]


def stage(command: str, preset: str, root: Path, *overrides: str) -> Outcome:
    outcome = run_in_process([command, "--params", preset, *sets(list(overrides))], root, limit=STAGE_SECONDS)
    assert outcome.returncode == 0, outcome
    return outcome


def run_pipeline(preset: str, root: Path) -> dict[str, Any]:
    """train, evaluate, select, export of ``preset`` in ``root``; returns the model card."""
    overrides = tiny_budget(_tree(preset))
    for command in ("train", "evaluate", "select", "export"):
        stage(command, preset, root, *overrides)
    export = outputs(root, _tree(preset)["name"]).export
    assert (export / "policy.onnx").is_file() and (export / "policy.pt2").is_file()
    card = read_json(export / "model_card.json")
    assert card["params"]["name"] == _tree(preset)["name"]
    assert {"onnx_max_abs_diff", "onnx_max_rel_diff", "torch_export_max_abs_diff"} <= card["parity"].keys()
    return card


def new_project(root: Path, preset: str) -> Path:
    """An empty folder with the preset where the user has it (``configs/`` or the top level)."""
    (root / "configs").mkdir(parents=True)
    (root / preset).write_text(preset_text(preset))
    return root


def skip_without_extra(preset: str) -> None:
    env_id = _tree(preset)["env"]["id"]
    try:
        check_env_id(env_id)
    except ValueError as exc:  # "<id> needs `pip install ...`": an optional extra this install lacks
        pytest.skip(f"{preset}: {exc}")


@pytest.fixture(scope="module")
def made_project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """What `make run` leaves (dvc.yaml's two branches), on the tiny budget: params.yaml's pipeline, ``rlcore
    collect`` of offline.yaml rolling out its selected model, offline.yaml's pipeline (BC). The project and the two
    model cards. ``configs/ppo-from-bc-cartpole.yaml`` starts from the BC model and its dataset, beside params.yaml's
    run (``select.baseline_run``)."""
    root = new_project(tmp_path_factory.mktemp("made") / "project", "params.yaml")
    (root / "offline.yaml").write_text(preset_text("offline.yaml"))
    cards = {"params.yaml": run_pipeline("params.yaml", root)}
    stage("collect", "offline.yaml", root, "collect.steps=2000")
    cards["offline.yaml"] = run_pipeline("offline.yaml", root)
    return root, cards


@pytest.mark.slow
# Not ``serial``, ES's and IMPALA's presets included (their worker and actor processes): a tiny run asserts no
# learning and no timing, and their time-outs (120 s) leave room for a busy machine (both passed at a load of 13-16
# on 2 cores); their learning tests (tests/test_impala.py, tests/test_population.py) stay serial.
@pytest.mark.parametrize("preset", PRESETS)
def test_preset_pipeline_finishes_with_an_export(preset: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    skip_without_extra(preset)
    tree = _tree(preset)
    if preset in ("params.yaml", "offline.yaml"):
        _, cards = request.getfixturevalue("made_project")
        assert cards[preset]["algorithm"] == tree["algo"]["name"]
        return
    if tree["train"].get("init_from") is not None:  # the warm start: in a copy of what `make run` made
        made, _ = request.getfixturevalue("made_project")
        root = shutil.copytree(made, tmp_path / "project")
        shutil.copytree(PROJECT / "configs", root / "configs", dirs_exist_ok=True)
    else:
        root = new_project(tmp_path / "project", preset)
    card = run_pipeline(preset, root)
    assert card["algorithm"] == tree["algo"]["name"]


def test_every_preset_file_is_in_the_pipeline_test() -> None:
    """A new preset cannot escape: every params file in configs/ (and the two pipelines' params) is a case."""
    on_disk = {path.relative_to(PROJECT).as_posix() for path in (PROJECT / "configs").rglob("*") if path.is_file()}
    assert len(on_disk) >= 18 and on_disk <= set(PRESETS)  # a .yml, or a preset in a subfolder, is a case too
    assert {"params.yaml", "offline.yaml"} <= set(PRESETS)
    for preset in PRESETS:  # each shrinks to a budget the tiny run can finish
        assert any(item.startswith("train.max_steps=") for item in tiny_budget(_tree(preset))), preset
