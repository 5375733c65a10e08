"""Two-player turn-based games (issue 29): a PettingZoo AEC game played from the learner's seat against a fixed
opponent (``rlcore.envs.turn_based``), win/draw/loss rates with Wilson intervals (``game_outcomes``), the exported
model playing only legal moves, and PPO learning tic-tac-toe against a random legal-move opponent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
import torch

from rlcore.common.errors import ConfigError
from rlcore.config.sections import PolicyConfig
from rlcore.envs.action_masks import mask_inputs
from rlcore.envs.config import EnvConfig
from rlcore.envs.game_checks import check_game, check_named_opponents
from rlcore.envs.opponents import perfect_tictactoe, random_legal, tictactoe_board, tictactoe_value
from rlcore.envs.turn_based import TurnBasedGame
from rlcore.envs.vector import describe_space, make_vector_env
from rlcore.evaluation.evaluator import Evaluator, game_outcomes
from rlcore.evaluation.export import ExportOptions, export_policy
from rlcore.nets.policies import ActorCritic
from rlcore.params import validate_params

PROJECT = Path(__file__).resolve().parents[1]
TICTACTOE = "pettingzoo:pettingzoo.classic.tictactoe_v3"
RANDOM = "rlcore.envs.opponents:random_legal"
PERFECT = "rlcore.envs.opponents:perfect_tictactoe"
FIRST_LEGAL = "test_turn_based:first_legal"
"""This module's scripted opponent (the tests folder is on the path when pytest runs)."""


def first_legal(observation: dict[str, Any], rng: np.random.Generator) -> int:
    """A scripted opponent: the legal move of lowest index."""
    return int(np.flatnonzero(observation["action_mask"])[0])


def play(env: TurnBasedGame, seed: int, moves: list[int]) -> list[tuple[float, bool]]:
    """Reset with ``seed`` and play ``moves``: each step's (reward, terminated)."""
    env.reset(seed=seed)
    return [(float(r), bool(t)) for r, t, *_ in (env.step(move)[1:3] for move in moves)]


# --- the adapter, on hand-checked games -------------------------------------------------------------------------


def test_a_game_the_learner_wins_moving_first() -> None:
    """Seed 0: the learner (X) moves first; the scripted opponent takes the lowest free cell. X 0, O 1, X 3, O 2,
    X 6: X holds the line 0-3-6 and gets +1 at its third move."""
    env = TurnBasedGame(TICTACTOE, FIRST_LEGAL)
    obs, info = env.reset(seed=0)
    assert info["seat"] == 0 and obs["action_mask"].tolist() == [1] * 9
    assert play(env, 0, [0, 3, 6]) == [(0.0, False), (0.0, False), (1.0, True)]
    assert env.game_returns == {"player_1": 1.0, "player_2": -1.0}


def test_a_game_the_learner_loses_moving_second() -> None:
    """Seed 1: the opponent (X) moves first, into cell 0. O 4, X 1, O 8, X 2: X holds 0-1-2; the learner gets -1
    at its second move, the opponent's win."""
    env = TurnBasedGame(TICTACTOE, FIRST_LEGAL)
    obs, info = env.reset(seed=1)
    mine, theirs = tictactoe_board(obs)
    assert info["seat"] == 1 and not mine.any() and np.flatnonzero(theirs).tolist() == [0]
    assert obs["action_mask"].tolist() == [0, 1, 1, 1, 1, 1, 1, 1, 1]
    assert play(env, 1, [4, 8]) == [(0.0, False), (-1.0, True)]
    assert env.game_returns == {"player_1": 1.0, "player_2": -1.0}


def test_a_drawn_game_and_the_masks_and_boards_along_it() -> None:
    """Seed 0: X 1, O 0, X 3, O 2, X 4, O 5, X 6, O 7, X 8 fills the board with no line: reward 0 and terminated at
    the learner's fifth move. Before each move the mask is exactly the free cells of the board the learner sees."""
    env = TurnBasedGame(TICTACTOE, FIRST_LEGAL)
    obs, _ = env.reset(seed=0)
    expected_opponent = [0, 2, 5, 7]
    for turn, move in enumerate([1, 3, 4, 6, 8]):
        mine, theirs = tictactoe_board(obs)
        assert obs["action_mask"].tolist() == (~(mine | theirs)).astype(int).tolist()
        assert np.flatnonzero(theirs).tolist() == expected_opponent[:turn]
        obs, reward, terminated, truncated, _ = env.step(move)
        assert (reward, terminated, truncated) == (0.0, turn == 4, False)
    assert env.game_returns == {"player_1": 0.0, "player_2": 0.0}


def test_seats_alternate_by_seed_and_on_unseeded_resets() -> None:
    env = TurnBasedGame(TICTACTOE, RANDOM)
    assert [env.reset(seed=seed)[1]["seat"] for seed in (0, 1, 2, 7, 10)] == [0, 1, 0, 1, 0]
    assert [env.reset()[1]["seat"] for _ in range(4)] == [1, 0, 1, 0]  # after seed 10's seat 0
    vector_env = make_vector_env(EnvConfig(id=TICTACTOE, opponent=RANDOM, action_mask="observation"), 4)
    obs, _ = vector_env.reset(seed=5)  # sub-env i: seed 5 + i, seats 1, 0, 1, 0: the opponent moved first in 0 and 2
    assert obs[:, :9].sum(axis=1).tolist() == [8, 9, 8, 9]  # the packed mask comes first (its key sorts first)
    vector_env.close()


def test_the_random_opponent_plays_only_legal_moves_and_the_same_seeds_the_same_games() -> None:
    """200 games of random legal moves against it: every opponent move is checked against its mask (an illegal one
    raises); the boards grow by one mark per seat per move; the same seeds replay the same games."""

    def games() -> list[list[int]]:
        env = TurnBasedGame(TICTACTOE, RANDOM)
        rng = np.random.default_rng(3)
        played = []
        for seed in range(200):
            obs, _ = env.reset(seed=seed)
            record, done = [], False
            while not done:
                mine, theirs = tictactoe_board(obs)
                assert theirs.sum() - mine.sum() == env.seat
                move = int(rng.choice(np.flatnonzero(obs["action_mask"])))
                obs, _, done, _, _ = env.step(move)
                record.append(move)
            played.append(record)
        return played

    first = games()
    assert first == games() and len({tuple(g) for g in first}) > 150
    rng = np.random.default_rng(0)
    for _ in range(500):
        mask = rng.random(9) < 0.5
        mask[rng.integers(9)] = True
        assert mask[random_legal({"action_mask": mask.astype(np.int8)}, rng)]


def test_connect_four_plays_the_same_way() -> None:
    """connect_four_v3 through the same adapter: the load check passes, and 20 random games end with -1, 0 or 1,
    the learner's mark count following its seat."""
    connect_four = "pettingzoo:pettingzoo.classic.connect_four_v3"
    check_game(connect_four, {}, [("env.opponent", RANDOM)])
    env = TurnBasedGame(connect_four, RANDOM)
    rng = np.random.default_rng(0)
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        assert np.asarray(obs["observation"])[:, :, 1].sum() == info["seat"] == seed % 2
        done, reward = False, 0.0
        while not done:
            obs, reward, done, _, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        assert reward in (-1.0, 0.0, 1.0) and sum(env.game_returns.values()) == 0.0


def always_zero(observation: dict[str, Any], rng: np.random.Generator) -> int:
    return 0


def test_an_opponent_that_plays_an_illegal_move_is_stopped_in_one_line() -> None:
    env = TurnBasedGame(TICTACTOE, "test_turn_based:always_zero")
    env.reset(seed=0)
    with pytest.raises(ConfigError, match=r"env.opponent: test_turn_based:always_zero played the illegal move 0"):
        env.step(0)
    with pytest.raises(ValueError, match="illegal move 0"):
        check_game(TICTACTOE, {}, [("env.opponent", "test_turn_based:always_zero")])


def test_eval_opponents_checks_name_each_opponents_key_and_leave_the_games_own_errors_under_theirs() -> None:
    """Each of eval.opponents is refused under ``eval.opponents.<name>`` (the game it plays names that key itself,
    nothing rewrites another key's message); what the game's constructor refuses stays ``env.kwargs``'s."""
    with pytest.raises(ValueError, match=r"^eval\.opponents\.zero: test_turn_based:always_zero played the illegal"):
        check_named_opponents(TICTACTOE, {}, RANDOM, {"random": RANDOM, "zero": "test_turn_based:always_zero"})
    with pytest.raises(ValueError, match=r"^env\.kwargs: pettingzoo:\S+ does not accept these arguments"):
        check_named_opponents(TICTACTOE, {"bogus": 1}, RANDOM, {"perfect": "rlcore.envs.opponents:perfect_tictactoe"})


# --- outcomes ------------------------------------------------------------------------------------------------------


def test_wilson_intervals_match_a_hand_computation() -> None:
    """8 wins of 10: p = 0.8, z = 1.96, centre (0.8 + 3.8415/20) / (1 + 3.8415/10) = 0.71674, half-width
    1.96 sqrt(0.016 + 3.8415/400) / 1.38415 = 0.22658: [0.4902, 0.9433]. 0 of 10: [0, 3.8415/13.8415] =
    [0, 0.2775]; 10 of 10: [0.7225, 1]."""
    returns = [1.0] * 8 + [0.0, -1.0]
    outcomes = game_outcomes(returns, [0, 1] * 5)
    assert outcomes["win_rate"] == 0.8 and outcomes["draw_rate"] == 0.1 and outcomes["loss_rate"] == 0.1
    np.testing.assert_allclose(outcomes["win_ci95"], [0.4902, 0.9433], rtol=0, atol=5e-5)
    np.testing.assert_allclose(game_outcomes([0.0] * 10, [0] * 10)["win_ci95"], [0.0, 0.2775], rtol=0, atol=5e-5)
    np.testing.assert_allclose(game_outcomes([1.0] * 10, [0] * 10)["win_ci95"], [0.7225, 1.0], rtol=0, atol=5e-5)
    assert outcomes["first"]["episodes"] == outcomes["second"]["episodes"] == 5
    first, second = outcomes["first"], outcomes["second"]  # first: 1 1 1 1 0; second: 1 1 1 1 -1
    assert (first["win_rate"], first["draw_rate"], first["loss_rate"], first["win_or_draw_rate"]) == (0.8, 0.2, 0, 1)
    assert (second["win_rate"], second["draw_rate"], second["loss_rate"]) == (0.8, 0.0, 0.2)
    assert game_outcomes([1.0], [0])["second"] == {"episodes": 0, **dict.fromkeys(_rate_keys(), None)}


def _rate_keys() -> list[str]:
    return [f"{name}_{what}" for name in ("win", "draw", "loss", "win_or_draw") for what in ("rate", "ci95")]


def test_evaluation_reports_outcomes_by_seat() -> None:
    """An untrained policy against the random opponent, 20 episodes: the outcomes are those of its returns, and the
    episodes alternate seats (seed 3 + k: seat (3 + k) % 2)."""
    env = EnvConfig(id=TICTACTOE, opponent=RANDOM, action_mask="observation")
    evaluator = Evaluator(env, episodes=20, seed=3, max_episode_steps=9, max_parallel_envs=8)
    torch.manual_seed(0)
    policy = ActorCritic(evaluator.env.single_observation_space, evaluator.env.single_action_space, PolicyConfig())
    result = evaluator.evaluate(policy)
    evaluator.close()
    seats = [(3 + k) % 2 for k in range(20)]
    assert result.outcomes == game_outcomes(result.returns, seats)
    assert result.scores()["outcomes"] == result.to_dict()["outcomes"] == result.outcomes
    assert set(result.returns) <= {-1.0, 0.0, 1.0} and result.outcomes["first"]["episodes"] == 10


# --- export --------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_exported_onnx_model_plays_only_legal_moves(tmp_path: Path) -> None:
    """A policy with sharp random logits (unmasked it picks occupied cells often), exported with its mask input,
    plays 200 games against the random opponent through onnxruntime: every move is legal."""
    env = EnvConfig(id=TICTACTOE, opponent=RANDOM, action_mask="observation")
    vector_env = make_vector_env(env, 1)
    space, actions = vector_env.single_observation_space, vector_env.single_action_space
    vector_env.close()
    torch.manual_seed(0)
    policy = ActorCritic(space, actions, PolicyConfig(hidden_sizes=[32])).eval()
    with torch.no_grad():
        policy.actor[-1].weight.mul_(300.0)
    meta = {
        "spaces": {"observation": describe_space(space), "action": describe_space(actions)},
        "params": {"env": env.model_dump(mode="json")},
    }
    export_policy(policy, meta, tmp_path, ExportOptions(True, False, 200, 1e-5, 1e-4, 18))
    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    inputs = mask_inputs(space)
    assert inputs is not None and [i.name for i in session.get_inputs()] == ["obs", "action_mask"]
    game = TurnBasedGame(TICTACTOE, RANDOM)
    occupied = 0
    for seed in range(200):
        obs, _ = game.reset(seed=seed)
        done = False
        while not done:
            mask = obs["action_mask"].astype(bool)
            (move,) = session.run(None, {"obs": obs["observation"][None], "action_mask": mask[None]})[0]
            assert mask[int(move)], (seed, obs, move)
            packed = np.concatenate([mask, obs["observation"].reshape(-1)]).astype(np.float32)  # the mask's key first
            unmasked = policy.actor(torch.as_tensor(packed[None]))
            occupied += int(not mask[int(unmasked.argmax())])
            obs, _, done, _, _ = game.step(int(move))
    assert occupied > 50  # the same policy without its mask would have played illegal moves


# --- learning ------------------------------------------------------------------------------------------------------


def test_the_minimax_player_is_perfect() -> None:
    """It never loses to random moves (100 games each seat) and draws against itself."""
    assert tictactoe_value(0, 0)[0] == 0
    env = TurnBasedGame(TICTACTOE, PERFECT)
    rng = np.random.default_rng(0)
    for seed in range(200):
        obs, _ = env.reset(seed=seed)
        done, reward = False, 0.0
        while not done:
            obs, reward, done, _, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        assert reward <= 0.0
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            obs, reward, done, _, _ = env.step(perfect_tictactoe(obs, rng))
        assert reward == 0.0


TINY_PPO = {
    "seed": 0,
    "name": "ttt",
    "env": {"id": TICTACTOE, "opponent": RANDOM, "action_mask": "observation", "num_envs": 16},
    "policy": {"hidden_sizes": [128, 128]},
    "algo": {"name": "ppo", "lr": 0.001, "n_steps": 64, "batch_size": 256, "n_epochs": 4, "ent_coef": 0.01},
    "train": {"max_steps": 40960, "eval_every": 40960, "log_every": 40960, "eval_episodes": 100, "progress_bar": False},
    "eval": {"max_episode_steps": 9, "max_parallel_envs": 50},
}


@pytest.mark.slow
def test_the_same_seed_trains_the_same_policy_against_the_same_opponent_moves(tmp_path: Path) -> None:
    """Two runs of 2,048 learner moves, seed 0: the same periodic scores and outcomes (the opponent's generator is
    seeded from the episodes' seeds)."""
    from rlcore.trainers import train

    tree = {
        **TINY_PPO,
        "train": {"max_steps": 2048, "eval_every": 1024, "log_every": 1024, "eval_episodes": 10, "progress_bar": False},
    }
    runs = [train(validate_params(tree), tmp_path / name)["evaluations"] for name in ("one", "two")]
    scores = [[{k: v for k, v in row.items() if k != "wall_seconds"} for row in run] for run in runs]
    assert scores[0] == scores[1] and len(scores[0]) == 2 and "mean_return" in scores[0][0]


@pytest.mark.slow
def test_ppo_learns_to_beat_the_random_opponent_quickly(tmp_path: Path) -> None:
    """Seed 0, 40,960 learner moves (50 s on the busy 2-core machine): the periodic evaluation (100 greedy games,
    seats alternating) scores a mean return of at least 0.5. Random moves against the random opponent score about 0:
    moving first they win 0.585 and lose 0.288 of games, moving second the reverse."""
    from rlcore.trainers import train

    summary = train(validate_params(TINY_PPO), tmp_path / "ttt")
    assert summary["evaluations"][-1]["mean_return"] >= 0.5, summary["evaluations"]
