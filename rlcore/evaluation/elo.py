"""ELO ratings of self-play (ML-Agents' expected score, with a K factor of our own: ``env.self_play.elo_k``) and
the report's ELO curve.

Two ratings ``r1``, ``r2``: the first side's expected score is ``10**(r1/400) / (10**(r1/400) + 10**(r2/400))``;
after a game with result ``s`` (1 win, 0.5 draw, 0 loss, the first side's) the first side gains ``K (s - expected)``
and the second loses as much. ML-Agents' ``GhostController.compute_elo_rating_changes`` computes the same change
with K = 1 (``result - e1``); rlcore's K is ``env.self_play.elo_k``, 16 by default (chess's K for strong players),
so a rating moves visibly within a few thousand games. Which games are rated is ``rlcore.trainers.self_play``'s.
"""

from __future__ import annotations

from pathlib import Path

from rlcore.evaluation.plots import new_figure


def expected_score(rating: float, other: float) -> float:
    """The expected score (win probability plus half the draw probability) of a side rated ``rating`` against one
    rated ``other``."""
    return 1.0 / (1.0 + 10.0 ** ((other - rating) / 400.0))


def rating_change(rating: float, other: float, result: float, k: float) -> float:
    """ELO points the side rated ``rating`` gains (negative: loses) by ``result`` (1, 0.5, 0) against ``other``, K
    ``k``; the other side changes by the opposite."""
    return k * (result - expected_score(rating, other))


def game_result(learner_return: float) -> float:
    """The learner's result of a zero-sum game from its return: 1 (positive: a win), 0.5 (zero: a draw), 0 (loss)."""
    return 1.0 if learner_return > 0 else 0.5 if learner_return == 0 else 0.0


def plot_elo_curve(steps: list[int], ratings: list[float], title: str, target: Path, k: float) -> None:
    """``target`` (a PNG): the learner's ELO rating (K ``k``) over training env steps (``steps``, ``ratings`` (T,)
    each)."""
    with new_figure(target) as (_, ax):
        ax.plot(steps, ratings, marker=".", label=f"learner vs its snapshots (ELO, K = {k:g}; ML-Agents' has K = 1)")
        ax.set_xlabel("env steps")
        ax.set_ylabel("ELO rating")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
