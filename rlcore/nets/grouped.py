"""One policy per group of agents (``policy.groups``): :class:`GroupedActorCritic` routes each row of a multi-agent
vector env to its group's actor-critic.

Rows come in the env's order (``rlcore.envs.multiagent``): row ``i * A + a`` is agent ``a`` of copy ``i``, so a
batch of ``B`` rows (a multiple of ``A``: every agent of whole copies, as the trainer and the evaluators step them)
holds agent ``r % A`` at row ``r``. Each group's member reads only its columns of the row (the agent's own width,
then its one-hot within the group: ``rlcore.envs.agent_groups``) and acts for its agents' rows only; training
never goes through this class: the on-policy loop (``rlcore.trainers.on_policy``: a group is a member) trains each
member on its own rows with its own optimizer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from gymnasium import spaces
from torch import nn

from rlcore.config.sections import PolicyConfig
from rlcore.envs.agent_groups import GroupLayout, group_layout
from rlcore.envs.config import EnvConfig
from rlcore.nets.policies import ActorCritic
from rlcore.nets.policy import Policy


class GroupedActorCritic(Policy):
    """One :class:`ActorCritic` per group (``members``, in ``policy.groups`` order) behind the acting interface.

    The composite's own observation normalizer is off: each member normalizes its own columns
    (``policy.normalize_obs``)."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        config: PolicyConfig,
        layout: GroupLayout,
        members: dict[str, ActorCritic],
    ) -> None:
        super().__init__(observation_space, action_space, config.model_copy(update={"normalize_obs": False}))
        self.layout = layout
        self.members = nn.ModuleDict(members)
        self._owner = torch.as_tensor(layout.group_of_agent())
        self._columns = [torch.as_tensor(group.columns, dtype=torch.int64) for group in layout.groups]
        membership = torch.zeros(len(layout.agent_names), len(layout.groups))
        membership[torch.arange(len(layout.agent_names)), self._owner] = 1.0
        self._membership = membership
        """(A, G): agent ``a`` is in group ``g``."""

    def group_rows(self, batch: int) -> list[torch.Tensor]:
        """For a batch of ``batch`` rows in the env's order: each group's rows, (rows of the group,) int64."""
        agents = len(self.layout.agent_names)
        if batch % agents:
            raise ValueError(f"a grouped policy acts on whole copies of the env: {batch} rows, {agents} agents")
        owner = self._owner.repeat(batch // agents)
        return [torch.nonzero(owner == index).squeeze(1) for index in range(len(self.layout.groups))]

    def member_obs(self, obs: torch.Tensor, group: int, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Group ``group``'s view of env rows ``obs`` (B, width): its columns, of ``rows`` only when given."""
        picked = obs if rows is None else obs.index_select(0, rows)
        return picked.index_select(1, self._columns[group])

    def _route(
        self, obs: torch.Tensor, run: Callable[[ActorCritic, torch.Tensor], tuple[torch.Tensor, ...]]
    ) -> tuple[torch.Tensor, ...]:
        """``run(member, member_obs)`` for each group, its outputs scattered back into the rows' order."""
        out: list[torch.Tensor] = []
        for index, rows in enumerate(self.group_rows(obs.shape[0])):
            member = self.members[self.layout.groups[index].name]
            results = run(member, self.member_obs(obs, index, rows))  # type: ignore[arg-type]
            if not out:
                out = [r.new_zeros((obs.shape[0], *r.shape[1:])) for r in results]
            for whole, part in zip(out, results, strict=True):
                whole[rows] = part
        return tuple(out)

    def act(
        self,
        obs: torch.Tensor,
        state: torch.Tensor | None,
        deterministic: bool,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        (actions,) = self._route(obs, lambda m, o: (m.act(o, None, deterministic, generator)[0],))
        return actions, state

    def greedy(
        self, obs: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The greedy actions and scores of env rows ``obs`` (B, width). With ``env.agent_id`` each row's group is
        read from its one-hot, so any batch of rows works (the exported graph: every member scores every row and
        each row keeps its group's); without it, rows are in the env's order (a multiple of the agent count)."""
        start = self.layout.one_hot_start
        if start is None:
            actions, scores = self._route(obs, lambda m, o: m.greedy(o, None)[:2])
            return actions, scores, state
        return (*self._greedy_by_one_hot(obs, start), state)

    def _greedy_by_one_hot(self, obs: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        one_hot = obs[:, start : start + len(self.layout.agent_names)].to(torch.float32)
        groups = one_hot @ self._membership  # (B, G): each row's group, one-hot
        outputs = [self.member(index).greedy(self.member_obs(obs, index), None)[:2] for index in range(groups.shape[1])]
        actions, scores = outputs[0]
        for index, (member_actions, member_scores) in enumerate(outputs[1:], start=1):
            mine = groups[:, index] > 0.5
            actions = torch.where(mine.view(-1, *([1] * (member_actions.dim() - 1))), member_actions, actions)
            scores = torch.where(mine.unsqueeze(1), member_scores, scores)
        return actions, scores

    def member(self, index: int) -> ActorCritic:
        """Group ``index``'s policy."""
        member = self.members[self.layout.groups[index].name]
        assert isinstance(member, ActorCritic)
        return member

    def act_scores(self, obs: torch.Tensor) -> torch.Tensor:
        return self.greedy(obs, None)[1]

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.greedy(obs, None)[0]

    def sample_action(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return self._route(obs, lambda m, o: (m.sample_action(o, generator),))[0]

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Each row's value under its group's critic, (B,)."""
        return self._route(obs, lambda m, o: (m.value(o),))[0]


def grouped_actor_critic(
    observation_space: spaces.Space,
    action_space: spaces.Space,
    config: PolicyConfig,
    env: EnvConfig,
    make_member: Callable[[spaces.Box], Policy],
) -> GroupedActorCritic:
    """The grouped policy of ``config.groups`` over ``env``'s agents; ``make_member(observation_space)`` builds each
    group's actor-critic (the algorithm's own ``make_policy``)."""
    agents = env.agents()
    assert agents is not None and config.groups is not None
    layout = group_layout(agents, config.groups, env.id, env.agent_id is not False)
    members: dict[str, ActorCritic] = {}
    for group in layout.groups:
        member = make_member(group.observation_space)
        if not isinstance(member, ActorCritic):
            raise TypeError(f"policy.groups: a group's policy must be an actor-critic, got {type(member).__name__}")
        members[group.name] = member
    return GroupedActorCritic(observation_space, action_space, config, layout, members)
