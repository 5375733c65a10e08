"""Non-finite values from the env (issue 26, item 3), in every family that steps envs: on-policy (PPO, A2C),
off-policy (DQN, SAC), actor-learner (IMPALA's actor processes), population (ES's worker processes, SVPG) and offline
collection. Each stops in one ``error:`` line naming the env and the step, exit status 2, no traceback, before
anything is trained on or written: no checkpoint, no summary, no dataset (the run folder keeps only its lock and an
empty metrics file)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from cli_support import run_in_process
from conftest import PROJECT, preset_text, sets

TESTS = PROJECT / "tests"

BUDGET = ["train.max_steps=4096", "train.eval_every=1024", "train.eval_episodes=2", "train.progress_bar=off"]
CASES = [
    # (id, params file, command, overrides, fragments of the error line)
    ("ppo", "params.yaml", "train", ["NaNObservation"], ("CartPole-v1 (sub-env 0, reset at env step 0)",)),
    ("a2c", "configs/a2c-cartpole.yaml", "train", ["InfReward"], ("CartPole-v1 (sub-env 0, env step 0)", "[inf]")),
    ("dqn", "configs/dqn-cartpole.yaml", "train", ["NaNReward"], ("CartPole-v1 (sub-env 0, env step 0)", "[nan]")),
    ("sac", "configs/sac-pendulum.yaml", "train", ["NaNObservationAfter"], ("Pendulum-v1 (sub-env 0, env step 2)",)),
    pytest.param(  # actor processes (algo.runner: local; one is enough to go through a process, and costs half)
        (
            "impala",
            "configs/impala-cartpole.yaml",
            "train",
            ["NaNObservationAfter", "algo.num_actors=1"],
            ("of actor ", "env step 16"),
        ),
        marks=pytest.mark.serial,
    ),
    pytest.param(  # worker processes (algo.runner: local; one, as for IMPALA)
        (
            "es",
            "configs/es-cartpole.yaml",
            "train",
            ["NaNReward", "algo.num_workers=1"],
            ("rollout worker", "CartPole-v1 (sub-env 0"),
        ),
        marks=pytest.mark.serial,
    ),
    ("svpg", "configs/svpg-cartpole.yaml", "train", ["NaNObservationAfter"], ("CartPole-v1 (sub-env 0, env step",)),
    ("collect", "offline.yaml", "collect", ["NaNReward", "collect.policy=random"], ("CartPole-v1 (sub-env 0",)),
]


def _id(case: object) -> str:
    return str(case.values[0][0] if hasattr(case, "values") else case[0])  # type: ignore[index]


def _hashes(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


@pytest.mark.parametrize("case", CASES, ids=[_id(case) for case in CASES])
def test_a_non_finite_value_from_the_env_stops_every_family_in_one_line(
    tmp_path: Path, case: tuple[str, str, str, list[str], tuple[str, ...]]
) -> None:
    _, params_file, command, overrides, fragments = case
    (tmp_path / "params.yaml").write_text(preset_text(params_file))  # offline.yaml with what it inherits
    shutil.copy(TESTS / "nonfinite_wrappers.py", tmp_path / "nonfinite_wrappers.py")
    wrapper, *rest = overrides
    given = [f"env.wrappers=[{{wrapper: nonfinite_wrappers.{wrapper}}}]", *rest]
    if command == "train":
        given += BUDGET
    before = _hashes(tmp_path)
    # In this process: tests/ is on sys.path, so the parent and its spawned actor or worker processes import the
    # wrappers from there.
    result = run_in_process(["-q", command, *sets(given)], tmp_path, limit=300)
    assert result.returncode == 2, f"exit status {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in ("the env returned a non-finite", *fragments):
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    after = _hashes(tmp_path)
    assert {name: digest for name, digest in after.items() if not name.startswith("runs/")} == before
    assert not [name for name in after if name.endswith((".pt", ".npz", "train_summary.json"))], sorted(after)
