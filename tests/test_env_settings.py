"""Env settings as data (issue 15): samplers, how parameters reach the env, curricula, evaluation under settings."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import PROJECT, QUICK, outputs

from rlcore.common.files import read_json
from rlcore.envs.config import EnvConfig
from rlcore.envs.curriculum import Curriculum
from rlcore.envs.settings import Constant, Gaussian, MultiRangeUniform, Uniform, parse_sampler
from rlcore.envs.vector import make_vector_env, settings_for
from rlcore.evaluation.selection import scores_on_test, select_best, view_scores
from rlcore.params import load_params
from rlcore.stages import evaluate_stage, select_stage, train_stage

DRAWS = 20_000
"""Draws per sampler in the statistical test; with a fixed seed the test is deterministic, and the tolerances below
are 5 standard errors, so a correct sampler would fail them with another seed less than once in a million."""


def _draws(sampler: object, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([sampler.draw(rng) for _ in range(DRAWS)])  # type: ignore[attr-defined]


def test_each_sampler_draws_its_declared_mean_and_range():
    assert set(_draws(Constant(value=0.25))) == {0.25}
    low, high = 0.5, 2.0
    uniform = _draws(Uniform(low=low, high=high))
    assert low <= uniform.min() and uniform.max() < high
    assert abs(uniform.mean() - (low + high) / 2) < 5 * (high - low) / math.sqrt(12 * DRAWS)
    assert abs(uniform.std() - (high - low) / math.sqrt(12)) < 0.01
    gaussian = _draws(Gaussian(mean=10.0, std=1.0))
    assert abs(gaussian.mean() - 10.0) < 5 / math.sqrt(DRAWS)
    assert abs(gaussian.std() - 1.0) < 5 / math.sqrt(2 * DRAWS)
    intervals = [(0.05, 0.1), (0.2, 0.3)]  # widths 0.05 and 0.1: a third of the draws in the first
    multi = _draws(MultiRangeUniform(intervals=intervals))
    first = (multi >= 0.05) & (multi < 0.1)
    second = (multi >= 0.2) & (multi < 0.3)
    assert (first | second).all()
    assert abs(first.mean() - 1 / 3) < 5 * math.sqrt(2 / 9 / DRAWS)
    assert abs(multi[second].mean() - 0.25) < 0.002


def test_a_bare_number_is_a_constant_and_bad_samplers_are_refused_in_one_line():
    assert parse_sampler(0.5) == Constant(value=0.5)
    for bad, fragment in [
        ({"sampler": "uniform", "low": 2.0, "high": 1.0}, "low must be <= high"),
        ({"sampler": "gaussian", "mean": 1.0, "std": -1.0}, "std: input should be greater than or equal to 0"),
        ({"sampler": "triangular"}, "sampler: expected one of constant, uniform, gaussian, multirange_uniform"),
        ({"sampler": "multirange_uniform", "intervals": [[0.3, 0.2]]}, "interval 0 is [0.3, 0.2]"),
    ]:
        with pytest.raises(ValueError, match=None) as error:
            parse_sampler(bad)
        assert fragment in str(error.value) and "\n" not in str(error.value)


def _cartpole(parameters: dict[str, object]) -> tuple[np.ndarray, object]:
    env = EnvConfig(id="CartPole-v1", parameters=parameters)
    vector_env = make_vector_env(env, 1)
    obs, _ = vector_env.reset(seed=3)
    return obs[0], vector_env


def test_cartpole_pole_length_changes_the_dynamics_under_the_same_actions():
    """Same seed (same initial state), same actions: a pole of half-length 2.0 falls more slowly than one of 0.5,
    and one step matches CartPole's equations with the derived quantities recomputed from the new length."""
    trajectories = {}
    for length in (0.5, 2.0):
        obs, vector_env = _cartpole({"length": length})
        base = vector_env.envs[0].unwrapped  # type: ignore[attr-defined]
        assert base.length == length and base.polemass_length == pytest.approx(base.masspole * length)
        x, x_dot, theta, theta_dot = obs.astype(np.float64)
        # One step pushing right, by hand (gymnasium's CartPoleEnv.step, Euler integration).
        temp = (base.force_mag + base.polemass_length * theta_dot**2 * math.sin(theta)) / base.total_mass
        theta_acc = (base.gravity * math.sin(theta) - math.cos(theta) * temp) / (
            length * (4.0 / 3.0 - base.masspole * math.cos(theta) ** 2 / base.total_mass)
        )
        states = [obs]
        for _ in range(8):  # the short pole is still up after 8 pushes (|angle| < 0.21 rad): no reset
            next_obs, *_ = vector_env.step(np.ones(1, dtype=np.int64))  # type: ignore[attr-defined]
            states.append(next_obs[0])
        assert states[1][3] == pytest.approx(theta_dot + base.tau * theta_acc, rel=1e-5)
        trajectories[length] = np.array(states)
    np.testing.assert_array_equal(trajectories[0.5][0], trajectories[2.0][0])  # the same initial state
    # Angular velocity gained in 8 steps: about 4x less for the 4x longer pole (2.35 vs 0.57 rad/s).
    short, long = (abs(trajectories[length][-1][3] - trajectories[length][0][3]) for length in (0.5, 2.0))
    assert long < 0.3 * short


def test_masscart_keeps_total_mass_consistent():
    _, vector_env = _cartpole({"masscart": 3.0, "masspole": 0.2})
    base = vector_env.envs[0].unwrapped  # type: ignore[attr-defined]
    assert base.total_mass == pytest.approx(3.2) and base.polemass_length == pytest.approx(0.2 * base.length)


def test_a_constructor_parameter_rebuilds_the_env_at_episode_boundaries_reproducibly():
    """Pendulum-v1's g is a constructor keyword: each episode's sub-env is rebuilt with its own draw, at the
    autoreset, and the same seed gives the same observations and draws."""

    def run() -> tuple[list[float], np.ndarray]:
        env = EnvConfig(
            id="Pendulum-v1",
            kwargs={"max_episode_steps": 5},
            parameters={"g": {"sampler": "uniform", "low": 2, "high": 20}},
        )
        vector_env = make_vector_env(env, 2)
        vector_env.reset(seed=11)
        gs, observations = [], []
        for _ in range(17):  # three episodes of 5 steps (the 6th and 12th steps are autoresets) per sub-env
            obs, *_ = vector_env.step(np.zeros((2, 1), dtype=np.float32))
            observations.append(obs)
            gs += [sub_env.unwrapped.g for sub_env in vector_env.envs]  # type: ignore[attr-defined]
        return sorted(set(gs)), np.array(observations)

    gs, observations = run()
    assert len(gs) == 6 and all(2 <= g < 20 for g in gs)  # 2 sub-envs x 3 episodes, each its own g
    again_gs, again = run()
    assert again_gs == gs
    np.testing.assert_array_equal(again, observations)


def test_draws_follow_the_reset_seed_so_a_resumed_run_draws_what_any_run_reset_there_draws():
    """Training envs are reset from ``seed + env_steps`` (rlcore.common.seeds); the draws of every later episode follow
    from that seed alone: the same reset seed, the same per-episode values; another seed, other values."""
    env = EnvConfig(
        id="CartPole-v1",
        kwargs={"max_episode_steps": 2},
        parameters={"length": {"sampler": "uniform", "low": 0.2, "high": 2.0}},
    )

    def lengths(seed: int) -> list[float]:
        vector_env = make_vector_env(env, 2)
        vector_env.reset(seed=seed)
        seen = [sub_env.unwrapped.length for sub_env in vector_env.envs]  # type: ignore[attr-defined]
        for _ in range(3 * 3):  # three more episodes each (2 steps and the autoreset step)
            vector_env.step(np.zeros(2, dtype=np.int64))
            seen += [sub_env.unwrapped.length for sub_env in vector_env.envs]  # type: ignore[attr-defined]
        return seen

    assert lengths(4096) == lengths(4096)
    assert lengths(4096) != lengths(4097)
    assert len(set(lengths(4096))) == 8  # 2 sub-envs x 4 episodes


def test_eval_settings_apply_on_top_of_the_env_defaults():
    params = load_params(
        PROJECT / "params.yaml",
        ["env.parameters={masscart: 2.0}", "eval.settings=[{name: long-pole, parameters: {length: 1.0}}]"],
    )
    vector_env = make_vector_env(params.env, 1, settings_for(params.env, params.eval.settings[0].parameters))
    vector_env.reset(seed=0)
    base = vector_env.envs[0].unwrapped  # type: ignore[attr-defined]
    assert (base.length, base.masscart) == (1.0, 1.0)  # not env.parameters' masscart


def test_a_curriculum_advances_on_its_smoothed_signal_after_its_minimum_length():
    env = EnvConfig(
        curriculum=[
            {
                "name": "easy",
                "parameters": {"length": 1.0},
                "until": {"measure": "eval_return", "threshold": 100, "min_lesson_steps": 3000, "smoothing": 0.5},
            },
            {"name": "middle", "until": {"measure": "progress", "threshold": 0.5}},
            {"name": "default", "parameters": {"length": 0.5}},
        ]
    )
    curriculum = Curriculum(env, max_steps=10_000)
    assert curriculum.parameters()["length"] == Constant(value=1.0)
    assert curriculum.observe(1000, 200.0) is None  # s = 200, but only 1000 of 3000 steps
    assert curriculum.observe(2000, 0.0) is None  # s = 0.5·200 + 0.5·0 = 100
    assert curriculum.observe(3000, 0.0) is None  # s = 50 < 100
    assert curriculum.observe(4000, 300.0) is not None  # s = 175 >= 100 after 4000 >= 3000 steps
    assert curriculum.lesson.name == "middle" and "length" not in curriculum.parameters()
    assert curriculum.observe(4500, 0.0) is None  # progress 0.45
    assert curriculum.observe(5000, 0.0) is not None  # progress 0.5
    assert curriculum.final and curriculum.observe(6000, 0.0) is None
    state = curriculum.state_dict()
    assert state["started"] == [
        {"lesson": "easy", "index": 0, "step": 0},
        {"lesson": "middle", "index": 1, "step": 4000},
        {"lesson": "default", "index": 2, "step": 5000},
    ]
    restored = Curriculum(env, max_steps=10_000)
    restored.load_state_dict(yaml.safe_load(yaml.safe_dump(state)))  # plain data, as checkpoints keep it
    assert restored.state_dict() == state


def test_selection_under_a_setting_or_the_mean_over_settings():
    candidates = [
        {
            "checkpoint": "a",
            "step": 1,
            "episodes": 5,
            "mean_return": 90.0,
            "settings": {"x": {"mean_return": 10.0}, "y": {"mean_return": 30.0}},
        },
        {
            "checkpoint": "b",
            "step": 2,
            "episodes": 5,
            "mean_return": 80.0,
            "settings": {"x": {"mean_return": 40.0}, "y": {"mean_return": 10.0}},
        },
    ]
    assert select_best(candidates, "mean_return")[0]["checkpoint"] == "a"
    assert select_best(candidates, "mean_return", "x")[0]["checkpoint"] == "b"
    assert select_best(candidates, "mean_return", "y")[0]["checkpoint"] == "a"
    best, reason = select_best(candidates, "mean_return", "mean")  # a: 20, b: 25
    assert best["checkpoint"] == "b" and "mean over eval.settings" in reason
    assert view_scores(best, "mean") == {"mean_return": 25.0}


SETTINGS = (
    "eval.settings=[{name: long-pole, parameters: {length: 1.0}}, {name: heavy-cart, parameters: {masscart: 3.0}}]"
)


def test_eval_settings_produce_the_settings_block(tmp_path: Path):
    """A randomized run evaluated under two settings: evaluations.json scores every checkpoint under each,
    metrics.json has the test scores by setting, the report a table and a chart, selection follows select.setting."""
    params = load_params(
        PROJECT / "params.yaml",
        [
            *QUICK,
            "train.max_steps=2048",
            "train.progress_bar=off",
            "eval.test_episodes=6",
            "env.parameters={masscart: {sampler: uniform, low: 0.5, high: 2.0}}",
            SETTINGS,
            "select.setting=heavy-cart",
        ],
    )
    train_stage(params, tmp_path)
    evaluate_stage(params, tmp_path)
    select_stage(params, tmp_path)
    evaluations = read_json(outputs(tmp_path).evaluations)
    assert [s["name"] for s in evaluations["settings"]] == ["long-pole", "heavy-cart"]
    for candidate in evaluations["candidates"]:
        assert set(candidate["settings"]) == {"long-pole", "heavy-cart"}
        assert candidate["settings"]["heavy-cart"]["episodes"] == 3
    metrics = read_json(outputs(tmp_path).metrics)
    assert set(metrics["settings"]) == {"long-pole", "heavy-cart"}
    for scores in metrics["settings"].values():
        assert set(scores) == {"mean_return", "ci95_low", "ci95_high", "episodes"} and scores["episodes"] == 6
        assert scores["ci95_low"] <= scores["mean_return"] <= scores["ci95_high"]
    assert metrics["validation"]["setting"] == "heavy-cart"
    selection = read_json(outputs(tmp_path).selection)
    best = next(c for c in evaluations["candidates"] if c["checkpoint"] == selection["checkpoint"])
    assert metrics["validation"]["value"] == best["settings"]["heavy-cart"]["mean_return"]
    assert selection["settings"]["long-pole"]["parameters"] == {"length": 1.0}
    report = (outputs(tmp_path).report).read_text()
    assert "| heavy-cart | masscart: 3.0 |" in report and "![scores under eval.settings](settings.png)" in report
    assert (outputs(tmp_path).reports / "settings.png").stat().st_size > 1000


def test_the_stages_that_read_env_settings_list_them_in_dvc_yaml():
    """env.parameters and env.curriculum change training and the training distribution evaluated; eval.settings
    the evaluation: the stages list the whole sections, so a change re-runs exactly those stages."""
    stages = yaml.safe_load((PROJECT / "dvc.yaml").read_text())["stages"]
    for name in ("train", "evaluate", "select"):
        assert "env" in stages[name]["params"], name
    # Datasets are collected under env.parameters: offline.yaml's own env keys, the rest inherited from params.yaml.
    collect = [
        key
        for entry in stages["collect"]["params"]
        for key in ([entry] if isinstance(entry, str) else next(iter(entry.values())))
    ]
    assert {"env.parameters", "env.curriculum", "env.id"} <= set(collect), collect
    for name in ("evaluate", "select"):
        assert "eval" in stages[name]["params"], name
    assert "eval" not in stages["train"]["params"]  # eval.settings never re-run training


CURRICULUM = (
    "env.curriculum=[{name: short-pole, parameters: {length: 0.25}, until: {measure: eval_return, threshold: 150, "
    "min_lesson_steps: 4096, smoothing: 0.25}}, {name: default}]"
)


def test_a_ppo_curriculum_on_cartpole_advances_to_its_second_lesson_within_16384_env_steps(tmp_path: Path):
    """Seed 0, a budget of 16,384 env steps: the short pole (half-length 0.25) reaches a smoothed periodic return of
    150 and the default pole starts at 8,192 (measured). The target return (100) counts only in the last lesson:
    the short-pole evaluations above it (149 at 8,192) do not stop training."""
    params = load_params(
        PROJECT / "params.yaml",
        [
            "name=curriculum",
            "train.max_steps=16384",
            "train.eval_every=2048",
            "train.eval_episodes=5",
            "train.target_return=100",
            "train.progress_bar=off",
            CURRICULUM,
        ],
    )
    train_stage(params, tmp_path)
    summary = read_json(tmp_path / "runs" / "curriculum" / "train_summary.json")
    started = summary["curriculum"]["started"]
    assert [entry["lesson"] for entry in started] == ["short-pole", "default"]
    assert started[1]["step"] <= 16384
    lessons = {row["env_steps"]: row["lesson"] for row in summary["evaluations"]}
    assert all(lesson == "short-pole" for step, lesson in lessons.items() if step <= started[1]["step"])
    assert "target return" in summary["stop_reason"]
    assert summary["env_steps"] > started[1]["step"] and lessons[summary["env_steps"]] == "default"
    curve = tmp_path / "runs" / "curriculum" / "dvclive" / "plots" / "metrics" / "curriculum" / "lesson.tsv"
    rows = [line.split("\t") for line in curve.read_text().splitlines()[1:]]
    assert [float(value) for _, value in rows] == [0.0 if int(step) <= started[1]["step"] else 1.0 for step, _ in rows]


def test_off_policy_training_runs_under_parameters_and_a_curriculum(tmp_path: Path):
    params = load_params(
        PROJECT / "configs" / "dqn-cartpole.yaml",
        [
            "name=dqn-settings",
            "train.max_steps=1200",
            "train.eval_every=400",
            "train.eval_episodes=2",
            "train.progress_bar=off",
            "algo.learning_starts=200",
            "env.parameters={masscart: {sampler: uniform, low: 0.5, high: 2.0}}",
            "env.curriculum=[{name: a, parameters: {length: 1.0}, until: {measure: progress, threshold: 0.3}}, "
            "{name: b}]",
        ],
    )
    train_stage(params, tmp_path)
    summary = read_json(tmp_path / "runs" / "dqn-settings" / "train_summary.json")
    assert summary["curriculum"]["started"][1] == {"lesson": "b", "index": 1, "step": 400}


def test_offline_training_evaluates_under_the_parameters_and_refuses_a_curriculum(tmp_path: Path):
    from rlcore.common.errors import ConfigError
    from rlcore.stages import collect_stage

    base = [
        "collect.policy=random",
        "collect.steps=400",
        "train.max_steps=40",
        "train.eval_every=20",
        "train.eval_episodes=2",
        "train.progress_bar=off",
        "env.parameters={length: 1.0}",
    ]
    params = load_params(PROJECT / "offline.yaml", base)
    collect_stage(params, tmp_path)
    params.dataset.path = str(tmp_path / params.dataset.path)
    train_stage(params, tmp_path)
    assert (tmp_path / "runs" / "bc-cartpole" / "train_summary.json").is_file()
    with_lessons = load_params(PROJECT / "offline.yaml", [*base, "env.curriculum=[{name: only}]"])
    with pytest.raises(ConfigError, match=r"^env.curriculum: bc does not train on the trainer's own envs"):
        train_stage(with_lessons, tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_a_sweep_records_the_test_score_where_selection_read_the_validation_score():
    selection = {
        "test": {"mean_return": 100.0},
        "validation": {"setting": "mean", "mean_return": 7.0},
        "settings": {"x": {"test": {"mean_return": 30.0}}, "y": {"test": {"mean_return": 50.0}}},
    }
    assert scores_on_test(selection)["mean_return"] == 40.0
    assert scores_on_test({**selection, "validation": {"setting": "y"}})["mean_return"] == 50.0
    assert scores_on_test({**selection, "validation": {"setting": None}})["mean_return"] == 100.0
