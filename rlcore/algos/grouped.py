"""Groups of agents trained side by side (``policy.groups``): one instance of the run's algorithm per group, each
with its own policy (a member of ``rlcore.nets.grouped.GroupedActorCritic``) and its own optimizer state.

The on-policy loop (``rlcore.trainers.on_policy``: a group is a member) gives each member its group's rows of the
rollout and calls that member's own ``advantages`` and ``update``; this class only holds the members for the session:
its counters sum theirs and its state (a checkpoint's ``algorithm``) is theirs by group name.
"""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

from rlcore.algos.base import AlgoConfig, Algorithm, OnPolicyAlgorithm
from rlcore.config.sections import PolicyConfig
from rlcore.nets.grouped import GroupedActorCritic
from rlcore.nets.policy import Policy
from rlcore.nets.precision import Precision


class GroupedAlgorithm(OnPolicyAlgorithm[AlgoConfig, GroupedActorCritic]):
    """``member_class`` (PPO, A2C) once per group of ``policy``: :attr:`members`, by group name."""

    def __init__(
        self, member_class: type[OnPolicyAlgorithm[Any, Any]], policy: GroupedActorCritic, config: AlgoConfig
    ) -> None:
        self.members = {name: member_class(member, config) for name, member in policy.members.items()}
        Algorithm.__init__(self, policy, config)  # not the family's: each member has its own reward signals
        self.reward_signals = None

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: Any
    ) -> Policy:
        raise TypeError("a grouped policy is built by rlcore.registry.build_policy, from the env's agents")

    def compute_in(self, precision: Precision) -> None:
        super().compute_in(precision)
        for member in self.members.values():
            member.compute_in(precision)

    def update(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        raise TypeError("a grouped run updates each member on its group's rows (rlcore.trainers.on_policy)")

    def count(self) -> None:
        """The session's counters from the members' (after their updates): steps and skips summed, the longest
        run of consecutive skips."""
        members = self.members.values()
        self.gradient_steps = sum(member.gradient_steps for member in members)
        self.skipped_steps = sum(member.skipped_steps for member in members)
        self.consecutive_skips = max(member.consecutive_skips for member in members)

    def state_dict(self) -> dict[str, Any]:
        return {
            "gradient_steps": self.gradient_steps,
            "groups": {name: member.state_dict() for name, member in self.members.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, member in self.members.items():
            member.load_state_dict(state["groups"][name])
        self.count()
