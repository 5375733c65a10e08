"""The symmetric frames of k-in-a-row boards (``env.self_play.board_frames``, rlcore.envs.board_frames): tic-tac-toe's
8 rotations and reflections and connect four's mirror as permutations, a threat seen in every frame mapped back to
the real cell that blocks it, and a training game played through a frame: the learner sees the turned board and
its moves land where the frame says."""

from __future__ import annotations

import numpy as np
import pytest

from rlcore.envs.board_frames import board_frames
from rlcore.envs.opponents import one_step_lookahead
from rlcore.envs.turn_based import MASK_KEY, TurnBasedGame

pytest.importorskip("pettingzoo.classic.tictactoe_v3")
TICTACTOE = "pettingzoo:pettingzoo.classic.tictactoe_v3"


def test_tictactoe_has_the_eight_symmetries_of_the_square_identity_first() -> None:
    frames = board_frames((3, 3, 2))
    assert frames[0].actions.tolist() == list(range(9))
    assert len({f.actions.tobytes() for f in frames}) == 8
    for frame in frames:
        assert sorted(frame.actions.tolist()) == list(range(9))  # a permutation of the cells
        assert frame.actions[4] == 4  # the centre stays
        assert set(frame.actions[[0, 2, 6, 8]].tolist()) == {0, 2, 6, 8}  # corners go to corners
    # by hand: a quarter turn anticlockwise shows the real cell 2 (top right) at the top left
    assert frames[1].actions.tolist() == [2, 5, 8, 1, 4, 7, 0, 3, 6]
    assert frames[4].actions.tolist() == [2, 1, 0, 5, 4, 3, 8, 7, 6]  # the mirror image left to right


def test_connect_four_has_the_identity_and_the_mirror_only() -> None:
    frames = board_frames((6, 7, 2))
    assert [f.actions.tolist() for f in frames] == [list(range(7)), list(range(6, -1, -1))]
    planes = np.zeros((6, 7, 2), np.int8)
    planes[5, 0, 0] = 1  # a piece at the bottom of the leftmost column shows at the bottom of the rightmost
    shown = frames[1].observation({"observation": planes, MASK_KEY: np.ones(7, np.int8)})
    assert shown["observation"][5, 6, 0] == 1 and shown["observation"].sum() == 1


def test_a_threat_seen_in_every_frame_is_blocked_on_the_real_cell() -> None:
    # the other seat holds cells 0 and 1: the block is cell 2 on the real board, whatever the frame shows
    planes = np.zeros((3, 3, 2), np.int8)
    planes[0, 0, 1] = planes[0, 1, 1] = 1
    mask = np.ones(9, np.int8)
    mask[[0, 1]] = 0
    shown_threats = set()
    for frame in board_frames((3, 3, 2)):
        shown = frame.observation({"observation": planes, MASK_KEY: mask})
        assert shown["observation"].sum() == 2 and shown[MASK_KEY].sum() == 7
        block = one_step_lookahead(shown, np.random.default_rng(0))
        assert frame.real_action(block) == 2
        shown_threats.add(tuple(np.flatnonzero(shown["observation"][:, :, 1].reshape(9)).tolist()))
    assert len(shown_threats) == 8  # every edge line of the board, from both ends


def test_a_training_game_in_a_frame_shows_the_turned_board_and_plays_the_real_cell() -> None:
    game = TurnBasedGame(TICTACTOE, "rlcore.envs.opponents:random_legal")
    game.frames = board_frames((3, 3, 2))
    used = set()
    for seed in range(40):
        obs, info = game.reset(seed=seed)
        frame = game.frame
        assert frame is not None
        used.add(frame.actions.tobytes())
        real = game.game.observe(game.learner)
        assert np.array_equal(obs["observation"], frame.observation(real)["observation"])
        assert np.array_equal(obs[MASK_KEY], frame.observation(real)[MASK_KEY])
        move = int(np.flatnonzero(obs[MASK_KEY])[0])
        before = game.game.observe(game.learner)["observation"][:, :, 0].reshape(9).copy()
        game.step(move)
        after = game.game.observe(game.learner)["observation"][:, :, 0].reshape(9)
        assert np.flatnonzero(after & ~before.astype(bool)).tolist() == [frame.real_action(move)], info
    assert len(used) == 8
