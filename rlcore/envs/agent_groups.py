"""Groups of agents (``policy.groups``): which agents of a PettingZoo env share which policy, and what each group's
policy observes.

``policy.groups`` maps a group's name to agent-name patterns (``fnmatch``: ``adversary_*``); every agent must match
exactly one group. Each group has its own policy, trained on its agents' rows only (``rlcore.nets.grouped``).

A group's policy observes its agents' own observations at their true width (the vector env pads every row to the
widest agent's: ``rlcore.envs.multiagent``) followed, with ``env.agent_id``, by the one-hot of the agent's index
within the group: the columns of the env's one-hot for the group's agents. So agents with different observation
widths (MPE's simple_adversary: 8 and 10) train side by side, one policy per kind of agent.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from rlcore.common.errors import did_you_mean
from rlcore.envs.multiagent import Agents


@dataclass(frozen=True)
class Group:
    """One group: its name, its agents' indices in the env's agent order, and the observation its policy reads."""

    name: str
    agents: tuple[int, ...]
    """Indices into the env's ``possible_agents`` (row ``i * A + a`` of copy ``i`` is agent ``a``)."""
    columns: tuple[int, ...]
    """The columns of an env row (padded observation, then the env's one-hot) that make this group's observation:
    the agent's own width, then the one-hot columns of the group's agents (with ``env.agent_id``)."""
    observation_space: spaces.Box
    """What the group's policy observes: (width + len(agents) with env.agent_id,) float32."""


@dataclass(frozen=True)
class GroupLayout:
    """Every group of an env's agents, in ``policy.groups`` order."""

    agent_names: tuple[str, ...]
    groups: tuple[Group, ...]
    one_hot_start: int | None = None
    """With ``env.agent_id``: the column of an env row where the agent's one-hot (over all agents) starts."""

    def group_of_agent(self) -> np.ndarray:
        """(A,) int64: the index of each agent's group."""
        owner = np.zeros(len(self.agent_names), dtype=np.int64)
        for index, group in enumerate(self.groups):
            owner[list(group.agents)] = index
        return owner

    def rows(self, group: int, copies: int) -> np.ndarray:
        """The rows (of ``copies * A``) of group ``group``'s agents, in row order: (copies * len(agents),) int64."""
        count = len(self.agent_names)
        agents = np.asarray(self.groups[group].agents, dtype=np.int64)
        return (np.arange(copies, dtype=np.int64)[:, None] * count + agents[None, :]).reshape(-1)

    def members(self) -> dict[str, list[str]]:
        """Group name -> its agents' names (for model cards and logs)."""
        return {group.name: [self.agent_names[a] for a in group.agents] for group in self.groups}


def group_layout(agents: Agents, patterns: Mapping[str, Sequence[str]], env_id: str, agent_id: bool) -> GroupLayout:
    """The groups ``patterns`` (group -> agent-name patterns) make of ``agents``; ``ValueError`` (one line naming
    ``policy.groups``) for a pattern that matches no agent, an agent in no group or in two, or a group whose agents
    observe different spaces."""
    names = agents.names
    owners: dict[str, str] = {}
    groups: list[Group] = []
    if not patterns:
        raise ValueError("policy.groups: expected at least one group (group name -> agent-name patterns), got none")
    for group_name, group_patterns in patterns.items():
        members: list[int] = []
        for pattern in group_patterns:
            matched = [index for index, name in enumerate(names) if fnmatch.fnmatchcase(name, pattern)]
            if not matched:
                raise ValueError(
                    f"policy.groups.{group_name}: {pattern!r} matches no agent of {env_id} ({', '.join(names)})"
                    + did_you_mean(pattern, list(names))
                )
            for index in matched:
                owner = owners.get(names[index])
                if owner is not None and owner != group_name:
                    raise ValueError(
                        f"policy.groups: agent {names[index]} is in two groups ({owner} and {group_name}); each agent "
                        "belongs to exactly one"
                    )
                owners[names[index]] = group_name
                if index not in members:
                    members.append(index)
        groups.append(_group(group_name, tuple(sorted(members)), agents, env_id, agent_id))
    missing = [name for name in names if name not in owners]
    if missing:
        raise ValueError(
            f"policy.groups: agent(s) {', '.join(missing)} of {env_id} are in no group; every agent belongs to "
            "exactly one (add a pattern such as '*' to a group)"
        )
    start = int(agents.observation_space.shape[0]) if agent_id else None  # type: ignore[index]
    return GroupLayout(names, tuple(groups), start)


def _group(name: str, members: tuple[int, ...], agents: Agents, env_id: str, agent_id: bool) -> Group:
    space = agents.observation_space
    widths = {agents.widths[a] for a in members} if agents.mixed else set()
    if len(widths) > 1:
        listed = ", ".join(f"{agents.names[a]}: {agents.widths[a]}" for a in members)
        raise ValueError(
            f"policy.groups.{name}: its agents observe different spaces (widths {listed}) but share one policy; "
            "put them in different groups"
        )
    if not (isinstance(space, spaces.Box) and len(space.shape) == 1):
        raise ValueError(
            f"policy.groups: each group's policy reads its agents' columns of a 1-D Box observation; {env_id} "
            f"observes {space}"
        )
    width = widths.pop() if widths else int(space.shape[0])
    own = list(range(width))
    one_hot = [int(space.shape[0]) + a for a in members] if agent_id else []
    low = np.concatenate([space.low[:width].astype(np.float32), np.zeros(len(one_hot), np.float32)])
    high = np.concatenate([space.high[:width].astype(np.float32), np.ones(len(one_hot), np.float32)])
    return Group(name, members, tuple(own + one_hot), spaces.Box(low, high, dtype=np.float32))
