"""Training rows for a centralized critic (``policy.critic: centralized``, ``rlcore.nets.central_critic``): each
row's observation followed by the critic's input at the same step, its env copy's global state and the agent's
one-hot (``rlcore.envs.multiagent.ParallelEnvRows.critic_inputs``)."""

from __future__ import annotations

import torch

from rlcore.envs.multiagent import ParallelEnvRows
from rlcore.nets.central_critic import CentralizedActorCritic
from rlcore.nets.policy import Policy
from rlcore.trainers.sources import EnvSource


class CriticRows:
    """Widens the observations of one vector env's rows with the critic's inputs of its current step."""

    def __init__(self, env: ParallelEnvRows, obs_width: int, critic_width: int) -> None:
        self.env = env
        self.obs_width = obs_width
        self.critic_width = critic_width

    @classmethod
    def of(cls, policy: Policy, source: EnvSource) -> CriticRows | None:
        """For a policy whose members (or itself) have a centralized critic; None otherwise."""
        members = list(getattr(policy, "members", {}).values()) or [policy]
        central = [m for m in members if isinstance(m, CentralizedActorCritic)]
        if not central:
            return None
        env = source.env.unwrapped
        assert isinstance(env, ParallelEnvRows)
        width = int(source.env.single_observation_space.shape[0])  # type: ignore[index]
        return cls(env, width, central[0].critic_width)

    def inputs(self) -> torch.Tensor:
        """The critic's inputs of every row now, (rows, critic_width)."""
        return torch.as_tensor(self.env.critic_inputs())

    def shape(self, obs_shape: tuple[int, ...]) -> tuple[int, ...]:
        """A training row's shape for observations of ``obs_shape``."""
        return (obs_shape[0] + self.critic_width,)

    def actor_part(self, rows: torch.Tensor) -> torch.Tensor:
        """The observations (B, width - critic_width) of training rows (B, width)."""
        return rows[..., : rows.shape[-1] - self.critic_width]
