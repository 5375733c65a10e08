"""A centralized critic (``policy.critic: centralized``, MAPPO): the actor reads the agent's own observation, the
value function the env's global state and the agent's one-hot.

We follow MAPPO (Yu et al., 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent Games") and its
code (marlbenchmark/on-policy: ``R_Actor`` on ``obs``, ``R_Critic`` on ``share_obs``; with ``use_centralized_V``
its MPE runner makes ``share_obs`` every agent's observation side by side, repeated for each agent): the critic's
input is the env's global state (PettingZoo's MPE ``state()`` is exactly every agent's observation side by side)
followed by the agent's one-hot (the paper's agent-specific variant adds the agent's identity, so a critic shared
by all agents can give each its own value). Training rows are the
actor's observation followed by that critic input (``rlcore.envs.multiagent.ParallelEnvRows.critic_inputs``);
acting, evaluation and export see the observation alone, so the exported model is the actor only. Not done here:
MAPPO's value normalization (PopArt) and its feature-pruned state.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from gymnasium import spaces

from rlcore.config.sections import PolicyConfig
from rlcore.nets.policies import ActorCritic
from rlcore.nets.value_transforms import ValueHead, ValueHeadConfig


class CentralizedActorCritic(ActorCritic):
    """An :class:`ActorCritic` whose critic reads ``critic_width`` values of global state and agent one-hot.

    :meth:`features` of an actor-width observation (B, obs_width) are the actor's features (B, feature_dim); of a
    training row (B, obs_width + critic_width) they are the actor's features followed by the critic input as it
    is. The actor's heads read the first ``feature_dim`` features, the critic the rest."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: spaces.Space,
        config: PolicyConfig,
        critic_width: int,
        value_head: ValueHeadConfig | None = None,
    ) -> None:
        super().__init__(observation_space, action_space, config, value_head)
        self.obs_width = int(observation_space.shape[0]) if observation_space.shape else 0
        self.critic_width = critic_width
        self.critic = ValueHead(critic_width, config.hidden_sizes, config.activation, value_head or ValueHeadConfig())

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        actor = self.encoder(self.obs_normalizer(obs[..., : self.obs_width]))
        if obs.shape[-1] == self.obs_width:
            return actor
        return torch.cat([actor, obs[..., self.obs_width :].to(actor.dtype)], dim=-1)

    def action_mask(self, obs: torch.Tensor) -> torch.Tensor | None:
        return super().action_mask(obs[..., : self.obs_width])

    def actor_scores_of(self, features: torch.Tensor) -> torch.Tensor:
        return super().actor_scores_of(features[..., : self.feature_dim])

    def value_of(self, features: torch.Tensor) -> torch.Tensor:
        """Values (B,) from training-row features (B, feature_dim + critic_width)."""
        return self.critic(features[..., self.feature_dim :])

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Values (B,) of training rows (B, obs_width + critic_width)."""
        return self.value_of(self.features(obs))

    def value_loss_of(
        self,
        features: torch.Tensor,
        targets: torch.Tensor,
        old_values: torch.Tensor | None = None,
        clip_range: float | None = None,
    ) -> torch.Tensor:
        return self.critic.loss(features[..., self.feature_dim :], targets, old_values, clip_range)

    def act_scores(self, obs: torch.Tensor) -> torch.Tensor:
        return super().act_scores(obs[..., : self.obs_width])
