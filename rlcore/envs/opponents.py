"""Fixed opponents for two-player turn-based games (``env.opponent``, ``rlcore.envs.turn_based``): functions
``(observation, rng) -> action`` of a seat's PettingZoo classic observation (a Dict with ``"action_mask"``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
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


@dataclass(frozen=True)
class InARowGame:
    """A k-in-a-row game on the two planes of a PettingZoo classic observation (rows, columns, 2): how many marks in
    a row win, and whether an action names a column a piece drops down (connect four) or a cell (tic-tac-toe)."""

    in_a_row: int
    drops: bool


IN_A_ROW_GAMES = {(3, 3, 2): InARowGame(3, drops=False), (6, 7, 2): InARowGame(4, drops=True)}
"""The games :func:`one_step_lookahead` knows, by observation shape: ``tictactoe_v3`` and ``connect_four_v3``."""


def _landing(occupied: np.ndarray, action: int, game: InARowGame) -> tuple[int, int]:
    """The (row, column) a mark played as ``action`` lands on, given ``occupied`` (rows, columns) bool."""
    if not game.drops:
        return divmod(action, occupied.shape[1])
    return int(np.flatnonzero(~occupied[:, action])[-1]), action  # row 0 is the top: the lowest free cell


def _completes_line(marks: np.ndarray, row: int, column: int, in_a_row: int) -> bool:
    """Whether a mark at (``row``, ``column``) added to ``marks`` (rows, columns) bool makes ``in_a_row`` in a line
    (horizontal, vertical or diagonal) through it."""
    rows, columns = marks.shape
    for step_row, step_column in ((0, 1), (1, 0), (1, 1), (1, -1)):
        count = 1
        for sign in (1, -1):
            r, c = row + sign * step_row, column + sign * step_column
            while 0 <= r < rows and 0 <= c < columns and marks[r, c]:
                count += 1
                r, c = r + sign * step_row, c + sign * step_column
        if count >= in_a_row:
            return True
    return False


def _game_planes(observation: dict[str, Any], who: str) -> tuple[np.ndarray, InARowGame, np.ndarray]:
    """The observation's planes (rows, columns, 2) bool, its game and its legal actions; ``ValueError`` naming ``who``
    for a game of another shape (:data:`IN_A_ROW_GAMES`)."""
    planes = np.asarray(observation["observation"]) > 0
    game = IN_A_ROW_GAMES.get(planes.shape)
    if game is None:
        known = ", ".join(str(shape) for shape in IN_A_ROW_GAMES)
        raise ValueError(f"{who}: observations of shape {planes.shape}, expected one of {known}")
    return planes, game, np.flatnonzero(np.asarray(observation["action_mask"]))


def _winning_moves(marks: np.ndarray, occupied: np.ndarray, game: InARowGame) -> list[int]:
    """The actions that complete a line for the seat with ``marks`` (rows, columns) bool on the board ``occupied``."""
    return [
        action
        for action in range(occupied.shape[1] if game.drops else occupied.size)
        if _is_free(occupied, action, game) and _completes_line(marks, *_landing(occupied, action, game), game.in_a_row)
    ]


def _is_free(occupied: np.ndarray, action: int, game: InARowGame) -> bool:
    return not occupied[0, action] if game.drops else not occupied.reshape(-1)[action]


def _forks(marks: np.ndarray, occupied: np.ndarray, legal: np.ndarray, game: InARowGame) -> list[int]:
    """The legal actions after which the seat with ``marks`` could win in two or more ways on its next move (a fork:
    the other seat blocks one at most)."""
    forks = []
    for action in legal:
        row, column = _landing(occupied, int(action), game)
        mine, taken = marks.copy(), occupied.copy()
        mine[row, column] = taken[row, column] = True
        if len(_winning_moves(mine, taken, game)) >= 2:
            forks.append(int(action))
    return forks


def one_step_lookahead(observation: dict[str, Any], rng: np.random.Generator) -> int:
    """Connect four's (``connect_four_v3``) and tic-tac-toe's (``tictactoe_v3``) one-step-lookahead player: a legal
    move that wins now if there is one, else one that takes the cell where the other seat would win with its next
    move (a block), else a uniformly random legal move; ties drawn from ``rng``. It sees one move ahead only: it
    cannot stop two threats at once, nor avoid a move that lets the other seat win on top of it (connect four).

    ``observation``: the seat's ``{"observation": (rows, columns, 2) own marks then the other seat's,
    "action_mask": (n,)}``; ``ValueError`` for a game of another shape (:data:`IN_A_ROW_GAMES`)."""
    planes, game, legal = _game_planes(observation, "one_step_lookahead")
    move = _win_or_block(planes, legal, game, rng)
    return int(legal[rng.integers(len(legal))]) if move is None else move


def _win_or_block(planes: np.ndarray, legal: np.ndarray, game: InARowGame, rng: np.random.Generator) -> int | None:
    """A legal move that wins now, else one that blocks the other seat's win now (ties drawn from ``rng``); None
    when there is neither. ``planes``: (rows, columns, 2) bool, the mover's marks then the other seat's."""
    occupied = planes[:, :, 0] | planes[:, :, 1]
    for seat in (0, 1):  # its own win first, then the other seat's (to block it)
        lines = [
            int(action)
            for action in legal
            if _completes_line(planes[:, :, seat], *_landing(occupied, int(action), game), game.in_a_row)
        ]
        if lines:
            return int(rng.choice(lines))
    return None


def fork_lookahead(observation: dict[str, Any], rng: np.random.Generator) -> int:
    """:func:`one_step_lookahead` that also plays forks: a move that wins now, else a block, else a move after which
    it has two or more winning moves (a fork), else a move that takes the cell where the other seat would make a
    fork, else a uniformly random legal move; ties drawn from ``rng``. Newell and Simon's tic-tac-toe rules 1-4
    without their positional ones (centre, corners), so it punishes a reply that allows a fork and still opens at
    random. ``ValueError`` for a game it does not know, as :func:`one_step_lookahead`."""
    planes, game, legal = _game_planes(observation, "fork_lookahead")
    move = _win_or_block(planes, legal, game, rng)
    if move is not None:
        return move
    occupied = planes[:, :, 0] | planes[:, :, 1]
    for seat in (0, 1):
        forks = _forks(planes[:, :, seat], occupied, legal, game)
        if forks:
            return int(rng.choice(forks))
    return int(legal[rng.integers(len(legal))])
