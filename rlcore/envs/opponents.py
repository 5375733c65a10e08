"""Fixed opponents for two-player turn-based games (``env.opponent``, ``rlcore.envs.turn_based``): functions
``(observation, rng) -> action`` of a seat's PettingZoo classic observation (a Dict with ``"action_mask"``)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np


def random_legal(observation: dict[str, Any], rng: np.random.Generator) -> int:
    """A uniformly random legal move: one of the actions where ``observation["action_mask"]`` (n,) is 1."""
    legal = np.flatnonzero(np.asarray(observation["action_mask"]))
    return int(legal[rng.integers(len(legal))])


TICTACTOE_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
"""Tic-tac-toe's winning lines over the action (cell) indices."""


def tictactoe_board(observation: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The seat's own marks and the other seat's in PettingZoo's ``tictactoe_v3`` observation (3, 3, 2), each (9,)
    bool by cell (action) index."""
    planes = np.asarray(observation["observation"])
    return planes[:, :, 0].reshape(9) > 0, planes[:, :, 1].reshape(9) > 0


@functools.cache
def tictactoe_value(own: int, other: int) -> tuple[int, tuple[int, ...]]:
    """The game value (+1 win, 0 draw, -1 loss) for the seat to move with marks ``own`` and ``other`` (bitmasks over
    the cells), and its optimal moves: plain minimax over the whole game tree (5,478 positions, cached)."""
    free = [cell for cell in range(9) if not (own | other) >> cell & 1]
    best, moves = -2, []
    for cell in free:
        mine = own | 1 << cell
        if any(all(mine >> c & 1 for c in line) for line in TICTACTOE_LINES):
            value = 1
        elif len(free) == 1:
            value = 0
        else:
            value = -tictactoe_value(other, mine)[0]
        if value > best:
            best, moves = value, [cell]
        elif value == best:
            moves.append(cell)
    return best, tuple(moves)


def perfect_tictactoe(observation: dict[str, Any], rng: np.random.Generator) -> int:
    """A perfect tic-tac-toe player (``tictactoe_v3``): one of the optimal moves, drawn at random so games vary. It
    never loses; against it a perfect learner draws every game."""
    mine, theirs = tictactoe_board(observation)
    bits = [int(sum(1 << int(cell) for cell in np.flatnonzero(marks))) for marks in (mine, theirs)]
    return int(rng.choice(tictactoe_value(*bits)[1]))
