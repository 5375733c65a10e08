"""Env parameters that the settings in effect do not draw are at a fresh env's values (issue 25, finding 1).

A curriculum lesson's parameters must not outlive it: after a lesson switch the training and periodic-evaluation
envs have the physics of an env freshly built for the new lesson, as a resumed run (which builds its envs afresh)
has. Checked through real lesson switches in real PPO runs (CartPole: an attribute, Pendulum: a constructor
keyword), uninterrupted and resumed, and on ``EnvParameters`` directly (an adapter's parameters too).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from conftest import PROJECT

from rlcore.common.checkpoints import list_checkpoints
from rlcore.common.files import read_json
from rlcore.common.seeds import periodic_seeds
from rlcore.envs.config import EnvConfig
from rlcore.envs.parameters import EnvParameters
from rlcore.envs.settings import Constant
from rlcore.envs.vector import make_vector_env, settings_for, use_settings
from rlcore.params import load_params
from rlcore.trainers import train

Physics = dict[str, float]


def physics(env: gym.Env) -> Physics:
    """Every public numeric scalar attribute of the base env (its parameters and what it derives from them)."""
    return {
        name: float(value)
        for name, value in vars(env.unwrapped).items()
        if not name.startswith("_")
        and isinstance(value, int | float | np.integer | np.floating)
        and not isinstance(value, bool)
    }


class RecordPhysics(gym.Wrapper):
    """For ``env.wrappers``: after every reset, records (this wrapper, the reset seed, the base env's physics),
    in call order across every env of the process."""

    records: ClassVar[list[tuple[int, int | None, Physics]]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        result = self.env.reset(seed=seed, options=options)
        RecordPhysics.records.append((id(self), seed, physics(self.env)))
        return result


def fresh_physics(env: EnvConfig, parameters: dict[str, Any]) -> Physics:
    """The physics of an env freshly built under ``parameters`` (constants), after its first reset."""
    vector_env = make_vector_env(env, 1, settings_for(env, {k: Constant(value=v) for k, v in parameters.items()}))
    try:
        vector_env.reset(seed=0)
        return physics(vector_env.envs[0])  # type: ignore[attr-defined]
    finally:
        vector_env.close()


EVAL_EVERY = 256
ROLES = ("training", "evaluation")
RUNS = {
    # lesson 0's attribute (the pole's half-length) is not drawn by lesson 1: back to 0.5 (polemass_length 0.05)
    "cartpole": ("CartPole-v1", {"length": 0.25}, {"masscart": 1.0}, {"length": 0.5, "polemass_length": 0.05}),
    # lesson 0's constructor keyword (gravity) is not drawn by lesson 1: back to 10
    "pendulum": ("Pendulum-v1", {"g": 3.0}, {}, {"g": 10.0}),
}


@pytest.mark.parametrize("case", list(RUNS))
def test_after_a_lesson_switch_the_training_and_evaluation_envs_are_fresh_envs_of_the_new_lesson(
    tmp_path: Path, case: str
):
    """PPO, 2 training envs, a periodic evaluation every 256 env steps; lesson 0 ends on progress 0.5 (at step
    512 of 1024). Every reset of every env is recorded: up to the switch each has lesson 0's fresh physics, after
    it lesson 1's (training envs from their first reset after the switch, evaluation envs from the next
    evaluation). A run resumed from the checkpoint at the switch has lesson 1's physics throughout."""
    env_id, first, second, expected = RUNS[case]
    params = load_params(
        PROJECT / "params.yaml",
        [
            "name=lessons",
            f"env.id={env_id}",
            "env.num_envs=2",
            "env.wrappers=[{wrapper: 'test_curriculum_reset:RecordPhysics'}]",
            f"env.curriculum=[{{name: first, parameters: {first}, until: {{measure: progress, threshold: 0.5}}}}, "
            f"{{name: second, parameters: {second}}}]",
            "algo.n_steps=64",
            "algo.batch_size=64",
            "algo.n_epochs=1",
            f"train.max_steps={4 * EVAL_EVERY}",
            f"train.eval_every={EVAL_EVERY}",
            "train.eval_episodes=2",
            "train.target_return=null",
            "train.progress_bar=off",
        ],
    )
    lesson_physics = [fresh_physics(params.env, first), fresh_physics(params.env, second)]
    assert {name: lesson_physics[1][name] for name in expected} == pytest.approx(expected, rel=1e-12)
    assert lesson_physics[0] != lesson_physics[1]
    evaluation_seeds = periodic_seeds(params.seed, params.train.eval_episodes)

    RecordPhysics.records.clear()
    summary = train(params, tmp_path / "whole")
    switch = summary["curriculum"]["started"][1]["step"]
    assert switch == 2 * EVAL_EVERY
    lessons = under_lessons(RecordPhysics.records, evaluation_seeds, switched_after_evaluation=1)
    seen_lessons = {role: {lesson for kind, lesson, _ in lessons if kind == role} for role in ROLES}
    assert seen_lessons == {"training": {0, 1}, "evaluation": {0, 1}}  # resets of both kinds on both sides
    for role, lesson, seen in lessons:
        assert seen == lesson_physics[lesson], f"{role} env under lesson {lesson}"

    # Resume from the checkpoint written at the switch (in lesson 1): its envs are built afresh.
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "whole", resumed)
    (resumed / "train_summary.json").unlink()
    for step, path in list_checkpoints(resumed / "checkpoints"):
        if step > switch:
            path.unlink()
    RecordPhysics.records.clear()
    summary = train(params, resumed)
    assert summary["env_steps"] == 4 * EVAL_EVERY
    assert read_json(resumed / "train_summary.json")["curriculum"]["started"][1]["step"] == switch
    roles = {role for role, _, _ in roles_of(RecordPhysics.records, evaluation_seeds)}
    assert roles == {"training", "evaluation"}
    for _, _, seen in RecordPhysics.records:
        assert seen == lesson_physics[1]


def roles_of(records: list[tuple[int, int | None, Physics]], evaluation_seeds: range) -> list[tuple[str, int, int]]:
    """(role, position, wrapper) of each record: a wrapper whose seeded resets use the periodic evaluation's seeds
    is an evaluation env's, any other a training env's."""
    evaluation = {wrapper for wrapper, seed, _ in records if seed is not None and seed in evaluation_seeds}
    return [("evaluation" if w in evaluation else "training", i, w) for i, (w, _, _) in enumerate(records)]


def under_lessons(
    records: list[tuple[int, int | None, Physics]], evaluation_seeds: range, switched_after_evaluation: int
) -> list[tuple[str, int, Physics]]:
    """(role, the lesson the reset must be under, the physics seen) per record. Evaluation ``k`` starts at the
    reset of its first env with the first periodic seed; the lesson switches right after evaluation
    ``switched_after_evaluation``: training envs take it at their next reset, evaluation envs at the next
    evaluation."""
    starts = [i for i, (_, seed, _) in enumerate(records) if seed == evaluation_seeds.start]
    switch_start, next_start = starts[switched_after_evaluation], starts[switched_after_evaluation + 1]
    lessons = []
    for role, i, _ in roles_of(records, evaluation_seeds):
        after = i > switch_start if role == "training" else i >= next_start
        lessons.append((role, int(after), records[i][2]))
    return lessons


# --- EnvParameters on its own ---------------------------------------------------------------------------------


def adapt_cartpole(env: Any, values: dict[str, Any]) -> None:
    """A ``env.parameters_adapter`` for the test: ``pole`` sets the pole's half-length."""
    if "pole" in values:
        env.length = float(values["pole"])
        env.polemass_length = env.masspole * env.length


@pytest.mark.parametrize(
    ("env_id", "adapter", "first", "second"),
    [
        ("CartPole-v1", None, {"length": 0.25, "masspole": 0.3}, {"masscart": 2.0}),
        ("Pendulum-v1", None, {"g": 3.0, "m": 2.0}, {"m": 1.5}),
        ("CartPole-v1", "test_curriculum_reset:adapt_cartpole", {"pole": 0.25}, {}),
    ],
    ids=["attributes", "constructor", "adapter"],
)
def test_switching_settings_leaves_no_parameter_of_the_earlier_ones(
    env_id: str, adapter: str | None, first: dict[str, float], second: dict[str, float]
):
    """One vector env under ``first``, then under ``second``: after its next reset every sub-env has the physics
    of an env built under ``second`` only (a back-and-forth too)."""
    env = EnvConfig(id=env_id, vectorization="sync", parameters_adapter=adapter)

    def settings(values: dict[str, float]) -> EnvParameters:
        return EnvParameters(env_id, {}, {name: Constant(value=v) for name, v in values.items()}, adapter)

    def built_under(values: dict[str, float]) -> list[Physics]:
        vector_env = make_vector_env(env, 2, settings(values))
        vector_env.reset(seed=3)
        try:
            return [physics(sub) for sub in vector_env.envs]  # type: ignore[attr-defined]
        finally:
            vector_env.close()

    vector_env = make_vector_env(env, 2, settings(first))
    try:
        vector_env.reset(seed=3)
        under_first = [physics(sub) for sub in vector_env.envs]  # type: ignore[attr-defined]
        assert under_first == built_under(first) and under_first != built_under(second)
        use_settings(vector_env, settings(second))
        vector_env.reset(seed=3)
        assert [physics(sub) for sub in vector_env.envs] == built_under(second)  # type: ignore[attr-defined]
        use_settings(vector_env, settings(first))
        vector_env.reset(seed=3)
        assert [physics(sub) for sub in vector_env.envs] == under_first  # type: ignore[attr-defined]
    finally:
        vector_env.close()
