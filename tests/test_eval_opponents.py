"""``eval.opponents`` (issue 29): the select stage plays the selected model of a two-player game against each named
fixed opponent on the test episodes, beside ``env.opponent``, and reports win/draw/loss rates with 95% intervals by
seat (``reports/metrics.json``'s ``outcomes_by_opponent``, ``selection.json``'s ``opponents``, a table in the
report). Real tic-tac-toe games, a briefly trained (near random) PPO policy."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import outputs

from rlcore.common.errors import ConfigError
from rlcore.common.files import read_json
from rlcore.params import validate_params
from rlcore.stages import evaluate_stage, select_stage, train_stage

TICTACTOE = "pettingzoo:pettingzoo.classic.tictactoe_v3"
RANDOM = "rlcore.envs.opponents:random_legal"
PERFECT = "rlcore.envs.opponents:perfect_tictactoe"
LOOKAHEAD = "rlcore.envs.opponents:one_step_lookahead"
TEST_EPISODES = 40
OPPONENTS = {"perfect": PERFECT, "lookahead": LOOKAHEAD, "random": RANDOM}
"""``random`` is ``env.opponent`` too: on the same test episodes it must give ``outcomes`` exactly."""


def illegal_when_moving_first(observation: dict[str, Any], rng: np.random.Generator) -> int:
    """A scripted opponent: an out-of-range move (9) when it opens the game, else the legal move of lowest index.
    The load check plays one game with the learner first, so only the test episodes (half of them the opponent's
    opening) meet the illegal move."""
    if not np.asarray(observation["observation"]).any():
        return 9
    return int(np.flatnonzero(observation["action_mask"])[0])


def tree(opponents: dict[str, str], **train: Any) -> dict[str, Any]:
    """256 learner moves of PPO (one checkpoint) on tic-tac-toe against the random legal-move opponent."""
    return {
        "seed": 0,
        "name": "ttt",
        "env": {"id": TICTACTOE, "opponent": RANDOM, "action_mask": "observation", "num_envs": 8},
        "algo": {"name": "ppo", "n_steps": 16, "batch_size": 64, "n_epochs": 1},
        "train": {
            "max_steps": 256,
            "eval_every": 256,
            "log_every": 256,
            "eval_episodes": 4,
            "progress_bar": False,
            **train,
        },
        "eval": {
            "episodes": 10,
            "test_episodes": TEST_EPISODES,
            "max_episode_steps": 9,
            "max_parallel_envs": 20,
            "opponents": opponents,
        },
    }


def pipeline(root: Path, opponents: dict[str, str], **train: Any) -> dict[str, Any]:
    """Train, evaluate and select; ``reports/metrics.json``."""
    params = validate_params(tree(opponents, **train))
    train_stage(params, root)
    evaluate_stage(params, root)
    select_stage(params, root)
    return read_json(outputs(root).metrics)


def assert_rates_of(outcomes: dict[str, Any], episodes: int) -> None:
    """``episodes`` games, half in each seat; win, draw and loss rates sum to 1 overall and in each seat."""
    assert outcomes["episodes"] == episodes
    assert outcomes["first"]["episodes"] == outcomes["second"]["episodes"] == episodes // 2
    for of in (outcomes, outcomes["first"], outcomes["second"]):
        assert math.isclose(of["win_rate"] + of["draw_rate"] + of["loss_rate"], 1.0)
        for name in ("win", "draw", "loss", "win_or_draw"):
            low, high = of[f"{name}_ci95"]
            assert 0.0 <= low <= of[f"{name}_rate"] <= high <= 1.0


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("opponents")
    pipeline(root, OPPONENTS)
    return root


def test_the_selected_model_plays_every_named_opponent_on_the_test_episodes(run: Path) -> None:
    metrics = read_json(outputs(run).metrics)
    by_opponent = metrics["outcomes_by_opponent"]
    assert list(by_opponent) == list(OPPONENTS)
    for outcomes in by_opponent.values():
        assert_rates_of(outcomes, TEST_EPISODES)


def test_the_perfect_player_never_loses_and_beats_a_near_random_policy(run: Path) -> None:
    """The learner never wins against the minimax player, in either seat; a policy of 256 moves' training loses most
    games (against random_legal it wins most of them)."""
    metrics = read_json(outputs(run).metrics)
    perfect = metrics["outcomes_by_opponent"]["perfect"]
    assert perfect["win_rate"] == perfect["first"]["win_rate"] == perfect["second"]["win_rate"] == 0.0
    assert perfect["loss_rate"] > 0.5
    assert metrics["outcomes"]["win_rate"] > 0.5


def test_env_opponent_stays_the_opponent_of_outcomes_on_the_same_test_episodes(run: Path) -> None:
    """Named again under eval.opponents, env.opponent gives ``outcomes`` game for game: the same test seeds."""
    metrics = read_json(outputs(run).metrics)
    assert metrics["outcomes_by_opponent"]["random"] == metrics["outcomes"]
    assert metrics["outcomes_by_opponent"]["perfect"] != metrics["outcomes"]
    selection = read_json(outputs(run).selection)
    assert {name: entry["opponent"] for name, entry in selection["opponents"].items()} == OPPONENTS
    assert selection["opponents"]["perfect"]["test"]["outcomes"] == metrics["outcomes_by_opponent"]["perfect"]


def test_the_report_has_a_row_per_opponent_with_its_rates_by_seat(run: Path) -> None:
    report = (outputs(run).report).read_text()
    metrics = read_json(outputs(run).metrics)
    for name, path in OPPONENTS.items():
        (row,) = [line for line in report.splitlines() if line.startswith(f"| {name} | `{path}` |")]
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        outcomes = metrics["outcomes_by_opponent"][name]
        for cell, of in zip(cells[2:], (outcomes, outcomes["first"], outcomes["second"]), strict=True):
            low, high = of["loss_ci95"]
            assert f"loss {of['loss_rate']:.2f} [{low:.2f}, {high:.2f}]" in cell
            assert f"({of['episodes']} episodes)" in cell


def test_without_eval_opponents_metrics_and_params_have_no_opponents(tmp_path: Path) -> None:
    metrics = pipeline(tmp_path, {})
    assert "outcomes_by_opponent" not in metrics and "outcomes" in metrics
    assert "opponents" not in read_json(outputs(tmp_path).selection)
    assert "opponents" not in validate_params(tree({})).to_dict()["eval"]
    assert "against each of `eval.opponents`" not in (outputs(tmp_path).report).read_text()


@pytest.mark.slow
def test_with_train_seeds_the_exported_seed_plays_the_named_opponents(tmp_path: Path) -> None:
    metrics = pipeline(tmp_path, {"perfect": PERFECT}, seeds=[0, 1])
    assert list(metrics["outcomes_by_opponent"]) == ["perfect"]
    assert_rates_of(metrics["outcomes_by_opponent"]["perfect"], TEST_EPISODES)
    assert metrics["outcomes_by_opponent"]["perfect"]["win_rate"] == 0.0


def test_an_opponent_that_plays_an_illegal_move_in_a_test_episode_stops_the_select_stage_naming_it(
    tmp_path: Path,
) -> None:
    """It passes the load check (learner first), then opens a test game with an out-of-range move: one line naming
    ``eval.opponents.<name>``, and no metrics written."""
    params = validate_params(tree({"sneaky": "test_eval_opponents:illegal_when_moving_first"}))
    train_stage(params, tmp_path)
    evaluate_stage(params, tmp_path)
    with pytest.raises(ConfigError, match=r"^eval\.opponents\.sneaky: test_eval_opponents:\S+ played the illegal"):
        select_stage(params, tmp_path)
    assert not (outputs(tmp_path).metrics).exists()
    assert not (outputs(tmp_path).best).exists()
