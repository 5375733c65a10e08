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
    returns: np.ndarray, agents: Sequence[str], reduction: str, groups: Mapping[str, Sequence[int]] | None = None
) -> np.ndarray:
    """``returns`` (E, A): episode ``e``'s return of agent ``agents[a]`` -> (E,) one score per episode: the
    ``reduction`` (:data:`RETURN_REDUCTIONS`) over the agents, the column of the agent it names, or the mean of the
    columns of the group it names (``groups``: group name -> its agents' indices)."""
    returns = np.asarray(returns, dtype=np.float64)
    if groups and reduction in groups and reduction not in agents:
        return returns[:, list(groups[reduction])].mean(axis=1)
    if returns.ndim != 2 or returns.shape[1] != len(agents):
        raise ValueError(f"expected returns of shape (episodes, {len(agents)}), got {returns.shape}")
    if reduction == "mean":
        return returns.mean(axis=1)
    if reduction == "sum":
        return returns.sum(axis=1)
    if reduction == "min":
        return returns.min(axis=1)
    if reduction == "max":
        return returns.max(axis=1)
    return returns[:, list(agents).index(check_reduction(reduction, agents))]


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
