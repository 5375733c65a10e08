"""Generative adversarial imitation learning (Ho & Ermon, 2016) against a dataset of expert transitions.

    D(s, a) = sigmoid(l(s, a))      the probability that (s, a) is the expert's; l reads the signal's normalized
                                    observations (and the action's features unless ``use_actions`` is false)
    L_D     = -E_expert[log D] - E_policy[log(1 - D)] + lambda * E_x[(||grad_x l(x)|| - 1)^2]
              x = u * expert + (1 - u) * policy, one u ~ U(0, 1) per pair, the norm over the pair's inputs
              together (normalized observation and action features)
    r_t     = -log(1 - D(s_t, a_t)) = softplus(l(s_t, a_t))

The penalty is Gulrajani et al.'s (2017, WGAN-GP) on the discriminator's logit l, as Kostrikov et al. (2019,
"Discriminator-actor-critic") apply it to GAIL: their code (google-research ``dac/gail.py``) draws one coefficient
per pair and penalizes the gradient of the logit w.r.t. the concatenated (observation, action). ML-Agents' GAIL
differs: it penalizes the gradient of D = sigmoid(l), mixes with one coefficient per input element, and takes the
norm over the first observation's gradient only.

The expert's transitions come from a Parquet dataset of our schema (``rlcore.data.schema``: what ``rlcore collect``
writes), read whole when the run starts; each minibatch of policy transitions meets as many expert transitions,
drawn with the update's generator. GAIL's return is episodic by default: its reward is positive, so the policy
also learns to keep episodes going, as the expert does where episodes end in failure.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from rlcore.common.errors import ConfigError
from rlcore.common.files import shown_path
from rlcore.data import demonstrations
from rlcore.nets.encoders import Encoder
from rlcore.reward_signals.config import GAILConfig
from rlcore.reward_signals.inputs import action_features, action_width
from rlcore.reward_signals.signal import RewardSignal, SignalBatch

KEY = "algo.reward_signals.gail"


def gail_reward(logits: torch.Tensor) -> torch.Tensor:
    """-log(1 - D) with D = sigmoid(logits), computed as softplus(logits) (exact, and finite where D rounds to 1)."""
    return F.softplus(logits)


def gradient_penalty(
    logit_of: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    expert: tuple[torch.Tensor, torch.Tensor | None],
    policy: tuple[torch.Tensor, torch.Tensor | None],
    mix: torch.Tensor,
) -> torch.Tensor:
    """E[(||grad_x logit(x)||_2 - 1)^2] at x = mix * expert + (1 - mix) * policy, the norm over every input of a
    pair (observation features and action features together): the gradient of the logit, not of D = sigmoid(logit),
    and one coefficient per pair (Kostrikov et al., 2019). ``mix`` (B,) in [0, 1]; inputs (B, ...)."""
    inputs: list[torch.Tensor] = []
    for expert_part, policy_part in zip(expert, policy, strict=True):
        if expert_part is None or policy_part is None:
            continue
        u = mix.reshape(-1, *([1] * (expert_part.dim() - 1)))
        inputs.append((u * expert_part.float() + (1 - u) * policy_part.float()).requires_grad_(True))
    logits = logit_of(inputs[0], inputs[1] if len(inputs) > 1 else None)
    # allow_unused: an input read through an index (a Discrete observation's one-hot) has no gradient: 0 there.
    grads = torch.autograd.grad(logits.sum(), inputs, create_graph=True, allow_unused=True)
    squared = torch.zeros(mix.shape[0])
    for grad in grads:
        if grad is not None:
            squared = squared + grad.reshape(grad.shape[0], -1).square().sum(dim=1)
    return (torch.sqrt(squared + 1e-12) - 1).square().mean()


def check_header(config: GAILConfig, observation_space: gym.Space, action_space: spaces.Space) -> dict[str, Any]:
    """What can be refused before a run starts (``rlcore.data.demonstrations.check_header``): the dataset's metadata."""
    return demonstrations.check_header(f"{KEY}.dataset", Path(config.dataset), observation_space, action_space)


def load_demonstrations(
    config: GAILConfig, observation_space: gym.Space, action_space: spaces.Space
) -> tuple[torch.Tensor, torch.Tensor]:
    """The expert's (observations (M, *obs_shape), actions (M,) or (M, k)) from ``config.dataset``, its first
    ``max_episodes`` episodes; refused in one line naming the key when the file does not fit this run."""
    path = Path(config.dataset)
    data = demonstrations.load_demonstrations(f"{KEY}.dataset", path, observation_space, action_space)
    rows = np.arange(len(data))
    if config.max_episodes is not None:
        _, first_rows = np.unique(data.episode_id, return_index=True)
        episodes = data.episode_id[np.sort(first_rows)]  # in file order
        if len(episodes) < config.max_episodes:
            raise ConfigError(
                f"{KEY}.max_episodes: {config.max_episodes}, but {shown_path(path)} holds {len(episodes)} episodes"
            )
        rows = np.flatnonzero(np.isin(data.episode_id, episodes[: config.max_episodes]))
    return torch.from_numpy(data.obs[rows]), torch.from_numpy(data.actions[rows])


class GAIL(RewardSignal):
    name = "gail"

    def __init__(
        self,
        config: GAILConfig,
        observation_space: gym.Space,
        action_space: spaces.Space,
        new_encoder: Callable[[], Encoder],
        demonstrations: tuple[torch.Tensor, torch.Tensor],
    ) -> None:
        super().__init__(config, observation_space, new_encoder, obs_clip=10.0, normalize_reward=False)
        self.config: GAILConfig = config
        self.action_space = action_space
        extra = action_width(action_space) if config.use_actions else 0
        # Near-zero logits at the start: D = 1/2 everywhere, a uniform reward of log 2. A random ReLU network's
        # logits grow with the input's distance, so at a normal gain states far from the data (a falling pole)
        # would start with large rewards of a random sign, and the policy would chase them before D has learned.
        self.discriminator = self.encoded_mlp(1, extra=extra, out_gain=0.01)
        self.expert_obs, self.expert_actions = demonstrations
        """Plain attributes, not buffers: checkpoints do not carry the dataset."""
        self.optimizer = self.make_optimizer()

    def _inputs(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What the discriminator reads: normalized observations and (with ``use_actions``) action features."""
        features = action_features(actions, self.action_space) if self.config.use_actions else None
        return self.normalize(obs), features

    def logits(self, obs_inputs: torch.Tensor, action_inputs: torch.Tensor | None) -> torch.Tensor:
        """(B,) l(s, a) from :meth:`_inputs`."""
        return self.discriminator(obs_inputs, action_inputs).squeeze(-1)

    def rewards(self, batch: SignalBatch) -> torch.Tensor:
        return gail_reward(self.logits(*self._inputs(batch.flat("obs"), batch.flat("actions"))))

    def model_loss(self, batch: SignalBatch, rows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        policy = self._inputs(batch.flat("obs")[rows], batch.flat("actions")[rows])
        drawn = torch.randint(len(self.expert_obs), (rows.numel(),), generator=generator)
        expert = self._inputs(self.expert_obs[drawn], self.expert_actions[drawn])
        expert_logits, policy_logits = self.logits(*expert), self.logits(*policy)
        # -log D(expert) - log(1 - D(policy)), each averaged over its batch
        discriminator_loss = F.binary_cross_entropy_with_logits(
            expert_logits, torch.ones_like(expert_logits)
        ) + F.binary_cross_entropy_with_logits(policy_logits, torch.zeros_like(policy_logits))
        terms: dict[str, Any] = {"discriminator_loss": discriminator_loss.detach()}
        loss = discriminator_loss
        if self.config.gradient_penalty > 0:
            penalty = gradient_penalty(self.logits, expert, policy, torch.rand(rows.numel(), generator=generator))
            loss = loss + self.config.gradient_penalty * penalty
            terms["gradient_penalty"] = penalty.detach()
        terms["expert_estimate"] = torch.sigmoid(expert_logits).mean().detach()
        terms["policy_estimate"] = torch.sigmoid(policy_logits).mean().detach()
        return {"loss": loss, **terms}
