"""Symmetric frames of a k-in-a-row board (``env.self_play.board_frames``): the rotations and reflections under which
a game's rules do not change, as permutations of its observation planes and its actions.

A training game played in a frame shows the learner the board rotated or reflected, and maps the learner's move back
to the real board; the opponent plays the real board. Drawn anew for every game, the frames show the learner the
positions its own line of play reaches in every orientation (a threat on the bottom row as often as on the top
one), which the game's symmetry makes equally good positions — the data augmentation of AlphaGo Zero (Silver et al.
2017, its 8 dihedral transformations of the Go board), done in the environment so every sample stays on-policy.

| game (observation shape) | actions | frames |
|---|---|---|
| tic-tac-toe (3, 3, 2) | a cell, ``row * 3 + column`` | the 8 rotations and reflections of the square |
| connect four (6, 7, 2) | a column a piece drops down | the identity and the left-right mirror |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlcore.envs.opponents import IN_A_ROW_GAMES

MASK_KEY = "action_mask"


@dataclass(frozen=True)
class BoardFrame:
    """One frame: ``cells`` (rows, columns) int, the real board's flat cell index shown at each position of the
    frame; ``actions`` (n,) int, the real action of each action of the frame."""

    cells: np.ndarray
    actions: np.ndarray

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        """``observation`` (a seat's ``{"observation": (rows, columns, 2), "action_mask": (n,)}``) seen in this
        frame: planes and mask permuted, the other keys as they are."""
        planes = np.asarray(observation["observation"])
        flat = planes.reshape(-1, planes.shape[-1])
        shown = {**observation, "observation": flat[self.cells.reshape(-1)].reshape(planes.shape)}
        shown[MASK_KEY] = np.asarray(observation[MASK_KEY])[self.actions]
        return shown

    def real_action(self, action: int) -> int:
        """The action on the real board of ``action`` chosen in this frame."""
        return int(self.actions[int(action)])


def board_frames(observation_shape: tuple[int, ...]) -> list[BoardFrame]:
    """The frames of the game whose seats' observations are ``observation_shape`` (:data:`IN_A_ROW_GAMES`), the
    identity first; ``ValueError`` (one line) for a game it does not know."""
    game = next((known for shape, known in IN_A_ROW_GAMES.items() if shape == tuple(observation_shape)), None)
    if game is None:
        known = ", ".join(str(shape) for shape in IN_A_ROW_GAMES)
        raise ValueError(f"board frames are known for observations of shape {known}, not {tuple(observation_shape)}")
    rows, columns = observation_shape[:2]
    index = np.arange(rows * columns).reshape(rows, columns)
    if game.drops:  # gravity fixes up and down: only the mirror keeps the rules
        return [BoardFrame(index, np.arange(columns)), BoardFrame(index[:, ::-1], np.arange(columns)[::-1].copy())]
    views = [np.rot90(index, k) for k in range(4)]
    views += [np.fliplr(view) for view in views]
    return [BoardFrame(view.copy(), view.reshape(-1).copy()) for view in views]
