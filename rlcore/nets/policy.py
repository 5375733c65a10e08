"""The acting interface (:class:`Policy`): what evaluation and export need from every algorithm's network.

Every policy takes *raw* observations: normalization is a module inside it, so a saved or exported
policy carries its statistics and nobody ships them beside it. The interface (:class:`Policy`):

- ``act_scores(obs)``: (B, action_dim) what the greedy action is read from: logits (categorical policies; for
  MultiDiscrete the sub-actions' logits side by side, (B, sum(nvec)); for MultiBinary one logit per bit),
  Q-values (DQN), the Gaussian mean (PPO, BC, IQL), or the pre-tanh mean (SAC, TD3+BC);
- ``deterministic_action(obs)``: the greedy action in the policy's convention (``rlcore.envs.actions``): (B,) int64
  (Discrete), (B, k) int64 (MultiDiscrete, MultiBinary) or (B, action_dim) float (Box);
- ``sample_action(obs, generator)``: a stochastic action for evaluation and exploration;
- ``distribution(obs)``: the action distribution of a stochastic policy (PPO's, SAC's, BC's, IQL's actors).

**Action masks.** Observations that carry the env's mask of legal actions (``env.action_mask``; the packed space
says where: ``rlcore.envs.observations.action_mask_slice``) give :meth:`Policy.action_mask` (B, n) bool, and every
categorical policy applies it to its scores (``rlcore.nets.distributions.masked_logits``): masked actions have
probability 0 and lowest scores, so acting, greedy evaluation, collection, the losses and the exported graph never
choose them. The mask is read from the observation itself, so the rollout, replay or dataset row that stored the
observation also holds the mask it was acted on under.

A policy may carry a recurrent state between steps: ``initial_state(batch)`` is None for a stateless
policy (all of today's), else a (B, *state_shape) tensor; :meth:`Policy.act` takes and returns it, and
:func:`reset_state` puts the rows of envs that just started a new episode back to the initial state.
Evaluation and collection act through ``act``, so a stateful policy works there unchanged.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Distribution

from rlcore.config.sections import PolicyConfig
from rlcore.envs.observations import action_mask_slice
from rlcore.nets.blocks import ObsNormalizer
from rlcore.nets.encoders import Encoder, build_encoder, float_mask


def action_dim(action_space: spaces.Space) -> int:
    """The width of a policy's action output: n (Discrete), sum(nvec) (MultiDiscrete: every sub-action's logits),
    n (MultiBinary: a logit per bit), the flat size (Box). How actions are stored:
    ``rlcore.envs.actions.action_layout``."""
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(action_space.nvec.sum())
    assert action_space.shape is not None
    return int(np.prod(action_space.shape))


class Policy(nn.Module):
    """Base of every acting network (see the module docstring)."""

    discrete: bool
    obs_normalizer: ObsNormalizer
    action_loc: torch.Tensor
    action_scale: torch.Tensor
    has_distribution: ClassVar[bool] = False
    """Whether :meth:`distribution` is defined (stochastic actors)."""

    def __init__(self, observation_space: gym.Space, action_space: spaces.Space, config: PolicyConfig) -> None:
        super().__init__()
        self.config = config
        self.observation_space = observation_space
        self.action_space = action_space
        self.discrete = isinstance(action_space, spaces.Discrete)
        self.action_dim = action_dim(action_space)
        self.obs_normalizer = ObsNormalizer(
            tuple(observation_space.shape or ()),
            config.obs_clip,
            config.normalize_obs,
            mask=float_mask(observation_space),
        )
        self.encoder = build_encoder(observation_space, config.encoder, config.image_channels)
        self.feature_dim = self.encoder.out_features
        """Width of :meth:`features`: what the heads read."""
        self.mask_slice = action_mask_slice(observation_space)
        """Where the action mask sits in an observation (``obs[..., start:stop]``); None: no mask."""
        if self.mask_slice is not None and not self.discrete:
            raise ValueError(f"action masks need a Discrete action space, got {action_space}")

    def action_mask(self, obs: torch.Tensor) -> torch.Tensor | None:
        """The legal actions at raw observations ``obs`` (B, *obs_shape): (B, n) bool, True where legal; None when
        the observations carry no mask."""
        if self.mask_slice is None:
            return None
        start, stop = self.mask_slice
        return obs[..., start:stop] > 0

    def _register_action_bounds(self, action_space: spaces.Space) -> None:
        """Buffers ``action_loc`` and ``action_scale``: a = loc + scale * u maps u in [-1, 1] onto the Box bounds."""
        assert isinstance(action_space, spaces.Box)
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise ValueError(
                f"{type(self).__name__} squashes actions into their bounds, but {action_space} is unbounded"
            )
        low = torch.as_tensor(action_space.low.reshape(-1), dtype=torch.float32)
        high = torch.as_tensor(action_space.high.reshape(-1), dtype=torch.float32)
        self.register_buffer("action_loc", (high + low) / 2)
        self.register_buffer("action_scale", (high - low) / 2)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Raw observations (B, *obs_shape), normalized and encoded (``rlcore.nets.encoders``): (B, feature_dim)."""
        return self.encoder(self.obs_normalizer(obs))

    def new_encoder(self) -> Encoder:
        """A freshly initialized encoder of the same architecture as this policy's (for an algorithm's critics)."""
        return build_encoder(self.observation_space, self.config.encoder, self.config.image_channels)

    def act_scores(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def distribution(self, obs: torch.Tensor) -> Distribution:
        """The action distribution of a stochastic policy (DQN's and TD3's policies have none)."""
        raise NotImplementedError(f"{type(self).__name__} has no action distribution")

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def sample_action(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        raise NotImplementedError

    def initial_state(self, batch_size: int) -> torch.Tensor | None:
        """The recurrent state at an episode's start, (B, *state_shape); None: the policy has no state."""
        return None

    def act(
        self,
        obs: torch.Tensor,
        state: torch.Tensor | None,
        deterministic: bool,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(actions, next state) for ``obs`` (B, *obs_shape) and the state after the previous step.
        A stateful policy overrides this; a stateless one passes the state through."""
        actions = self.deterministic_action(obs) if deterministic else self.sample_action(obs, generator)
        return actions, state

    def greedy(
        self, obs: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(greedy action, scores, next state): what the exported graph computes. A stateful policy overrides it."""
        return self.deterministic_action(obs), self.act_scores(obs), state


def reset_state(policy: Policy, state: torch.Tensor | None, started: np.ndarray) -> torch.Tensor | None:
    """``state`` with the rows of ``started`` (B,) bool put back to the initial state.

    With next-step autoreset, an env starts its new episode on the step after the one that ended the
    last (the reset step, whose action is ignored): pass that step's ``~valid``.
    """
    if state is None or not started.any():
        return state
    rows = torch.as_tensor(started)
    fresh = policy.initial_state(int(rows.numel()))
    assert fresh is not None
    return torch.where(rows.view(-1, *([1] * (state.dim() - 1))), fresh, state)
