"""Return reduction (``eval.return_reduction``): one score per episode from the returns of a multi-agent episode's
agents, as Tianshou's ``multi_agent_return_reduction``: their mean, sum, min or max, or one agent's return (or one
group's: the mean over its agents, ``policy.groups``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from rlcore.common.errors import did_you_mean

RETURN_REDUCTIONS = ("mean", "sum", "min", "max")
"""The reductions over all agents; any other ``eval.return_reduction`` names one agent."""


def reduce_returns(
    returns: np.ndarray,
    agents: Sequence[str],
    reduction: str,
    groups: Mapping[str, Sequence[int]] | None = None,
    acted: np.ndarray | None = None,
) -> np.ndarray:
    """``returns`` (E, A): episode ``e``'s return of agent ``agents[a]`` -> (E,) one score per episode: the
    ``reduction`` (:data:`RETURN_REDUCTIONS`) over the agents that acted in the episode, the column of the agent it
    names, or the mean of the columns of the group it names (``groups``: group name -> its agents' indices) over its
    agents that acted. ``acted`` (E, A) bool: which agents acted in each episode (an agent absent from an episode
    has return 0 and is left out of the reductions; an episode in which none of them acted scores 0); None: all."""
    returns = np.asarray(returns, dtype=np.float64)
    if returns.ndim != 2 or returns.shape[1] != len(agents):
        raise ValueError(f"expected returns of shape (episodes, {len(agents)}), got {returns.shape}")
    took_part = np.ones(returns.shape, dtype=bool) if acted is None else np.asarray(acted, dtype=bool)
    if groups and reduction in groups and reduction not in agents:
        return mean_of_acting(returns[:, list(groups[reduction])], took_part[:, list(groups[reduction])])
    anyone = took_part.any(axis=1)
    if reduction == "mean":
        return mean_of_acting(returns, took_part)
    if reduction == "sum":
        return np.where(took_part, returns, 0.0).sum(axis=1)
    if reduction == "min":
        return np.where(anyone, np.where(took_part, returns, np.inf).min(axis=1), 0.0)
    if reduction == "max":
        return np.where(anyone, np.where(took_part, returns, -np.inf).max(axis=1), 0.0)
    return returns[:, list(agents).index(check_reduction(reduction, agents))]


def mean_of_acting(returns: np.ndarray, acted: np.ndarray) -> np.ndarray:
    """(E,): each row's mean of ``returns`` (E, K) over the columns ``acted`` (E, K) marks, 0 where none."""
    count = acted.sum(axis=1)
    return np.where(acted, returns, 0.0).sum(axis=1) / np.maximum(count, 1)


def check_reduction(reduction: str, agents: Sequence[str], groups: Sequence[str] = ()) -> str:
    """``reduction`` if it is one of :data:`RETURN_REDUCTIONS`, an agent of ``agents`` or a group of ``groups``
    (``policy.groups``); else ``ValueError`` (one line naming ``eval.return_reduction``)."""
    if reduction in RETURN_REDUCTIONS or reduction in agents or reduction in groups:
        return reduction
    if groups:
        known = [*RETURN_REDUCTIONS, *agents, *groups]
        raise ValueError(
            f"eval.return_reduction: expected {', '.join(RETURN_REDUCTIONS)}, an agent's name ({', '.join(agents)}) "
            f"or a group's ({', '.join(groups)}), got {reduction!r}{did_you_mean(reduction, known)}"
        )
    if not agents:
        raise ValueError(
            f"eval.return_reduction: a single-agent env's score is its return: expected {', '.join(RETURN_REDUCTIONS)} "
            f"(agent names are for PettingZoo envs), got {reduction!r}"
        )
    known = [*RETURN_REDUCTIONS, *agents]
    raise ValueError(
        f"eval.return_reduction: expected {', '.join(RETURN_REDUCTIONS)} or an agent's name "
        f"({', '.join(agents)}), got {reduction!r}{did_you_mean(reduction, known)}"
    )
