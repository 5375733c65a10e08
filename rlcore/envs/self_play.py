"""The ``env.self_play`` params section: training a two-player zero-sum game against the learning policy's own past
snapshots (ML-Agents' self-play settings), and what it is refused with.

A turn-based game (``env.opponent``, :mod:`rlcore.envs.turn_based`) with ``env.self_play`` trains against policies
instead of ``env.opponent``: every ``save_steps`` env steps a snapshot of the learning policy joins a pool of the
last ``window``; every ``swap_steps`` env steps the opponent of each training env copy is drawn anew, independently
of the other copies: one of the ``fixed_opponents`` (scripted players, each with its probability), else the latest
policy with probability ``play_against_latest_model_ratio``, else a snapshot drawn uniformly from the pool. The
learner keeps alternating seats by episode seed. ``env.opponent`` stays the fixed opponent that evaluation,
validation and test play against. ELO ratings (K ``elo_k``) of the learner and of each snapshot follow every
finished training game against a snapshot (:mod:`rlcore.evaluation.elo`); the pool, ratings and generators are in
every checkpoint (:mod:`rlcore.trainers.self_play`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlcore.common.strict_model import StrictModel
from rlcore.envs.turn_based import load_opponent

SELF_PLAY_ALGORITHMS = ("ppo", "a2c")
"""The algorithms that train with self-play: the on-policy loop pushes the snapshots into its own (in-process) envs."""


class SelfPlayConfig(StrictModel):
    """ML-Agents' ``self_play`` settings (``team_change`` has no counterpart: one policy learns both seats, which
    alternate by episode, so there is no team to hand learning over to)."""

    save_steps: int = Field(20_000, ge=1)
    """Env steps (learner moves over all training env copies) between snapshots of the learning policy."""
    swap_steps: int = Field(10_000, ge=1)
    """Env steps between draws of the training opponent (the latest policy or a snapshot of the pool)."""
    window: int = Field(10, ge=1)
    """Snapshots kept in the pool: the last ``window`` (older ones leave it, with their ratings)."""
    play_against_latest_model_ratio: float = Field(0.5, ge=0.0, le=1.0)
    """Probability that a draw picks the latest (learning) policy rather than a snapshot of the pool; 1: always
    the latest, 0: always a snapshot (the latest policy until the first snapshot exists)."""
    snapshot_actions: Literal["sample", "greedy"] = "sample"
    """How the opponent (a snapshot or the latest policy) chooses its move: ``sample`` from its masked action
    distribution with the env's opponent generator (ML-Agents' way: varied games), or ``greedy``, its most probable
    legal move (the strongest line it knows; on tic-tac-toe, seed 0, greedy snapshots drew a quarter of the games
    against the perfect player at best but then degraded, and beat the random player less often)."""
    initial_elo: float = Field(1200.0, ge=0.0, le=10_000.0)
    """The learner's ELO rating at the start; a snapshot starts at the learner's rating when it is taken."""
    elo_k: float = Field(16.0, gt=0.0, le=400.0)
    """ELO points a rated game moves at most (the K factor, not an ML-Agents setting): the learner gains
    ``elo_k (result - expected)`` and the snapshot it played loses as much. ML-Agents' ghost trainer moves ratings by
    ``result - expected``, i.e. K = 1; 16 (chess's K for strong players) makes a rating move visibly within a few
    thousand games. At most 400, the scale of the rating (400 points: 10 to 1 odds)."""
    fixed_opponents: dict[str, float] = Field(default_factory=dict)
    """Scripted players in the training mix besides the snapshots (not an ML-Agents setting): import path of a
    function ``(observation, rng) -> action`` (as ``env.opponent``) -> the probability that a training env copy's
    draw picks it, e.g. ``{rlcore.envs.opponents:one_step_lookahead: 0.25}``. The probabilities sum to at most 1;
    the rest of a draw is shared by the latest policy and the pool as ``play_against_latest_model_ratio`` says.
    Games against them are not ELO-rated (``train/self_play_fixed_score`` follows them). Each plays a test game at
    load, as ``env.opponent`` does, and an illegal move in training names it under this key. Empty: snapshots only."""

    opening_moves: int = Field(0, ge=0, le=64)
    """Exploring starts (not an ML-Agents setting): every training game opens with a uniformly random number, 0 to
    ``opening_moves``, of uniformly random legal moves by both seats before the learner's first move, so the learner
    practises positions its own line of play never reaches (a game an opening would end is drawn again). Evaluation,
    validation and test games start from the empty board. 0: every game from the start."""

    board_frames: bool = False
    """Every training game is played in a frame of the board drawn at random among its symmetries (tic-tac-toe's 8
    rotations and reflections, connect four's mirror; ``rlcore.envs.board_frames``): the learner sees the board
    turned and its move is turned back, so it meets the positions of its own line of play in every orientation (data
    augmentation as AlphaGo Zero's, on-policy). Evaluation, validation and test play the real board. Refused for a
    game whose symmetries are not known."""

    @field_validator("fixed_opponents")
    @classmethod
    def _fixed_opponents_import(cls, opponents: dict[str, float]) -> dict[str, float]:
        for path, probability in opponents.items():
            if not 0.0 < probability <= 1.0:
                raise ValueError(f"{path}: probability {probability}, expected a number in (0, 1]")
            load_opponent(path)
        total = sum(opponents.values())
        if total > 1.0 + 1e-9:
            raise ValueError(f"the probabilities sum to {total:g}, expected at most 1")
        return opponents


def check_self_play(algorithm: str, recurrent: bool) -> None:
    """``ValueError`` (one line, naming ``env.self_play``) for an algorithm other than PPO and A2C, or a recurrent
    policy (snapshots act move by move without a memory). The env section refuses the rest itself: self-play on a
    game that is not turn-based or not zero-sum (``rlcore.envs.game_checks.check_game``), or with async
    vectorization (the snapshots live in the trainer's process)."""
    if algorithm not in SELF_PLAY_ALGORITHMS:
        raise ValueError(
            f"env.self_play: {algorithm} cannot train with self-play; {' and '.join(SELF_PLAY_ALGORITHMS)} can "
            "(their on-policy loop steps the envs the snapshots play in)"
        )
    if recurrent:
        raise ValueError("env.self_play: the opponents' snapshots act without a memory; remove policy.memory")
