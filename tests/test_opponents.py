"""The scripted opponents of rlcore.envs.opponents on hand-made positions of PettingZoo's own games: the move each
must take (win now, block the other seat's win, make or block a fork), checked again by the game's reward."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlcore.envs.opponents import fork_lookahead, one_step_lookahead, random_legal

connect_four_v3 = pytest.importorskip("pettingzoo.classic.connect_four_v3")
tictactoe_v3 = pytest.importorskip("pettingzoo.classic.tictactoe_v3")


def position(game: Any, moves: list[int]) -> tuple[Any, dict[str, Any]]:
    """``game``'s AEC env after ``moves`` (seats alternate, the first seat first), still running, and the observation
    of the seat to move."""
    env = game.env()
    env.reset(seed=0)
    for move in moves:
        env.step(move)
    observation, _, terminated, truncated, _ = env.last()
    assert not (terminated or truncated), "the position is not a running game"
    return env, observation


def mover_wins_with(env: Any, move: int) -> bool:
    """Whether the seat to move wins the game with ``move`` (the game's own reward says +1)."""
    seat = env.agent_selection
    env.step(move)
    return bool(env.rewards[seat] == 1)


def lookahead_moves(observation: dict[str, Any], draws: int = 20) -> set[int]:
    """The moves one_step_lookahead picks in ``draws`` calls with different generators."""
    return {one_step_lookahead(observation, np.random.default_rng(seed)) for seed in range(draws)}


# Connect four: actions are columns 0-6; pieces drop to the bottom (the observation's row 5).
CONNECT_FOUR_WINS = {
    # first seat: bottom row at columns 0-2, the second seat on top of them; column 3 completes four in a row
    "horizontal": ([0, 0, 1, 1, 2, 2], 3),
    # first seat: three in column 0; the second seat also threatens with three in column 1, winning comes first
    "vertical, before blocking": ([0, 1, 0, 1, 0, 1], 0),
    # first seat: (5,0), (4,1), (3,2); column 3 lands on (2,3); the second seat threatens the bottom row at column 4
    "diagonal": ([0, 1, 1, 2, 2, 3, 2, 3, 6, 3], 3),
}


@pytest.mark.parametrize("name", CONNECT_FOUR_WINS)
def test_one_step_lookahead_takes_the_winning_connect_four_move(name: str) -> None:
    moves, winning = CONNECT_FOUR_WINS[name]
    env, observation = position(connect_four_v3, moves)
    assert lookahead_moves(observation) == {winning}
    assert mover_wins_with(env, winning)


def test_one_step_lookahead_blocks_the_other_seats_connect_four_win() -> None:
    # the first seat holds the bottom row at columns 0-2 and wins at 3 next; the second seat (two in column 6) blocks
    moves = [0, 6, 1, 6, 2]
    env, observation = position(connect_four_v3, moves)
    assert lookahead_moves(observation) == {3}
    threatened, _ = position(connect_four_v3, [*moves, 5])
    assert mover_wins_with(threatened, 3), "column 3 was the first seat's win"


def test_one_step_lookahead_blocks_on_top_of_a_stack() -> None:
    # the second seat has three in column 4 (rows 5-3); the first seat must drop onto row 2 of that column
    moves = [0, 4, 1, 4, 6, 4]
    _, observation = position(connect_four_v3, moves)
    assert lookahead_moves(observation) == {4}
    threatened, _ = position(connect_four_v3, [*moves, 5])
    assert mover_wins_with(threatened, 4), "column 4 was the second seat's win"


def test_one_step_lookahead_skips_a_full_column_and_plays_every_legal_move_when_nothing_is_at_stake() -> None:
    # column 0 filled by alternating seats (no four); nothing wins or needs blocking
    _, observation = position(connect_four_v3, [0, 0, 0, 0, 0, 0])
    assert observation["action_mask"][0] == 0
    assert lookahead_moves(observation, draws=200) == {1, 2, 3, 4, 5, 6}


def test_one_step_lookahead_takes_the_winning_tictactoe_cell() -> None:
    # X at cells 0 and 1, O at 3 and 4: X completes the row at 2 (and does not block O's 5)
    env, observation = position(tictactoe_v3, [0, 3, 1, 4])
    assert lookahead_moves(observation) == {2}
    assert mover_wins_with(env, 2)


def test_one_step_lookahead_blocks_the_tictactoe_threat() -> None:
    # X at 0 and 1, O at 4: O must take 2
    _, observation = position(tictactoe_v3, [0, 4, 1])
    assert lookahead_moves(observation) == {2}
    threatened, _ = position(tictactoe_v3, [0, 4, 1, 8])
    assert mover_wins_with(threatened, 2), "cell 2 was X's win"


def test_fork_lookahead_makes_a_fork_that_wins_whatever_the_other_seat_blocks() -> None:
    # X at 0 and 5, O at 1 and 6: nothing to win or block; X at 4 threatens 8 (0-4-8) and 3 (3-4-5), X at 8
    # threatens 4 (0-4-8) and 2 (2-5-8): the forks. one_step_lookahead plays any free cell.
    moves = [0, 1, 5, 6]
    _, observation = position(tictactoe_v3, moves)
    assert {fork_lookahead(observation, np.random.default_rng(seed)) for seed in range(40)} == {4, 8}
    assert len(lookahead_moves(observation, draws=60)) > 2
    for block, win in ((8, 3), (3, 8)):  # whichever threat O blocks, X wins with the other
        env, _ = position(tictactoe_v3, [*moves, 4, block])
        assert mover_wins_with(env, win)


def test_fork_lookahead_wins_before_it_forks_and_takes_the_other_seats_fork_cell() -> None:
    # X at 0 and 8, O at 4, O to move: O has no fork of its own; X would fork at 2 or 6: O takes one of them
    _, observation = position(tictactoe_v3, [0, 4, 8])
    assert {fork_lookahead(observation, np.random.default_rng(seed)) for seed in range(40)} == {2, 6}
    # X at 0 and 1 (wins at 2) with a fork at 4 too: the win comes first
    env, observation = position(tictactoe_v3, [0, 3, 1, 6])
    assert {fork_lookahead(observation, np.random.default_rng(seed)) for seed in range(20)} == {2}
    assert mover_wins_with(env, 2)


def test_fork_lookahead_refuses_a_game_it_does_not_know() -> None:
    observation = {"observation": np.zeros((8, 8, 2), np.int8), "action_mask": np.ones(8, np.int8)}
    with pytest.raises(ValueError, match=r"fork_lookahead: observations of shape \(8, 8, 2\)"):
        fork_lookahead(observation, np.random.default_rng(0))


def test_one_step_lookahead_refuses_a_game_it_does_not_know() -> None:
    observation = {"observation": np.zeros((8, 8, 2)), "action_mask": np.ones(64)}
    with pytest.raises(ValueError, match=r"one_step_lookahead: observations of shape \(8, 8, 2\)"):
        one_step_lookahead(observation, np.random.default_rng(0))


def test_one_step_lookahead_beats_random_legal_at_connect_four() -> None:
    rng = np.random.default_rng(0)
    wins = 0
    for game in range(20):
        env = connect_four_v3.env()
        env.reset(seed=game)
        lookahead_seat = env.agents[game % 2]
        for agent in env.agent_iter():
            observation, reward, terminated, truncated, _ = env.last()
            if terminated or truncated:
                wins += agent == lookahead_seat and reward == 1
                env.step(None)
            else:
                player = one_step_lookahead if agent == lookahead_seat else random_legal
                env.step(player(observation, rng))
    assert wins >= 17, f"one_step_lookahead won {wins} of 20 games against random_legal"
