"""A learned reward signal: its reward model, its own value network, one optimizer, and its statistics.

Per rollout (:meth:`RewardSignal.learn`), with the models as they were before this rollout's update:

    update the running observation statistics with the rollout's valid observations
    r_t     = the signal's reward for each valid transition (0 on autoreset steps)        (T, N)
    r_t     = r_t / std(intrinsic return)      when the signal normalizes its reward (RND, curiosity)
    V, V'   = its value network on s_t and on s_{t+1}                                       (T, N)
    A, R    = GAE with the signal's gamma and ``algo.gae_lambda`` (:func:`signal_advantages`); an episodic signal
              stops at episode ends (no value after a terminal state), a non-episodic one runs on across them,
              from an episode's last step straight to the next one's first observation; 0 on autoreset steps
    then ``epochs`` passes over shuffled minibatches of the valid steps:
        loss = the model's own loss + (V(s_t) - R_t)^2

A signal's networks read its own normalized observations (running mean/std of float values, clipped, as RND
needs), so nothing here depends on, or changes, the policy or its normalizer. Frames (``uint8``/``bool`` images,
a packed ``Dict``'s image keys) pass through to a CNN of the policy's architecture, which scales ``uint8`` by
1/255; a signal built with ``normalize_images`` (RND) normalizes them per pixel instead, and its encoders read the
normalized values unscaled.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlcore.data.rollouts import RolloutBuffer
from rlcore.envs.observations import PackedDict, is_image, layout
from rlcore.nets.blocks import ObsNormalizer
from rlcore.nets.encoders import Encoder, Flatten, ImageEncoder, float_mask
from rlcore.objectives.returns import gae
from rlcore.objectives.reward_scaling import RewardScaler
from rlcore.reward_signals.config import IntrinsicConfig
from rlcore.reward_signals.inputs import EncodedMLP


@dataclass
class SignalBatch:
    """A rollout as the signals read it, every field (T, N, ...) in the rollout's layout."""

    obs: torch.Tensor
    """(T, N, *obs_shape) s_t, in the observations' storage dtype."""
    actions: torch.Tensor
    """(T, N) or (T, N, k): a_t in the policy's convention."""
    next_obs: torch.Tensor
    """(T, N, *obs_shape) s_{t+1}: at an episode's end its last observation (next-step autoreset)."""
    valid: torch.Tensor
    """(T, N) bool: False on autoreset steps (no transition: no reward, never trained on)."""
    terminated: torch.Tensor
    episode_end: torch.Tensor

    @classmethod
    def of(cls, rollout: RolloutBuffer, last_obs: torch.Tensor) -> SignalBatch:
        """``last_obs`` (N, *obs_shape): the observation after the rollout's last step."""
        next_obs = torch.cat([rollout.obs[1:], last_obs.to(rollout.obs.dtype).unsqueeze(0)])
        return cls(rollout.obs, rollout.actions, next_obs, rollout.valid, rollout.terminated, rollout.episode_end)

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.valid.shape[0]), int(self.valid.shape[1])

    def flat(self, name: str) -> torch.Tensor:
        """A field with (T, N) flattened to (T * N,)."""
        tensor: torch.Tensor = getattr(self, name)
        return tensor.reshape(-1, *tensor.shape[2:])


def signal_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    episode_end: torch.Tensor,
    valid: torch.Tensor,
    gamma: float,
    lam: float,
    episodic: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE of one signal over (T, N) tensors; returns (advantages, value targets), 0 and V(s_t) on autoreset rows.

    ``episodic``: :func:`rlcore.objectives.returns.gae`, as the extrinsic return (no value after a terminal state,
    nothing flows
    back across an episode's end); the autoreset rows (``valid`` False), which GAE keeps for the time structure,
    get advantage 0, so they carry no weight wherever they are read.

    Not ``episodic``: the return runs on as if the env never ended (Burda et al., 2018, RND: "non-episodic"; OpenAI's
    random-network-distillation code, whose same-step autoreset hands it the next episode's first observation at
    once). With next-step autoreset the row after an episode's last step t is an autoreset row (reward 0, no
    transition): it is skipped, so the last step chains straight into the next episode's first observation s'_0
    (its value is the autoreset row's ``next_values``), with one gamma::

        delta_t = r_t + gamma * V(s'_0) - V(s_t)          A_t = delta_t + gamma * lam * A_{t+2}

    never bootstrapping from V(last observation), a state this value network is never trained on. An episode that
    ends on the rollout's last row has no s'_0 yet: it bootstraps from the mean value of the next episodes' first
    observations seen in this rollout (the expectation of V(s'_0) over the reset distribution), or, if the rollout
    saw none, from V(last observation). ``terminated`` is ignored (no state is terminal to a non-episodic return).
    """
    invalid = ~valid
    if episodic:
        advantages, _ = gae(rewards, values, next_values, terminated, episode_end, gamma, lam)
    else:
        ends = episode_end & valid
        # V(s'_0) of an ending row t is the autoreset row t + 1's next value.
        bootstrap = next_values.clone()
        bootstrap[:-1] = torch.where(ends[:-1], next_values[1:], next_values[:-1])
        if bool(invalid.any()):
            first_values = next_values[invalid].mean()
            bootstrap[-1] = torch.where(ends[-1], first_values, next_values[-1])
        deltas = rewards + gamma * bootstrap - values
        advantages = torch.zeros_like(values)
        running = torch.zeros_like(values[0])
        for t in range(values.shape[0] - 1, -1, -1):
            # An autoreset row passes A_{t+1} through untouched to the episode's last step before it.
            running = torch.where(valid[t], deltas[t] + gamma * lam * running, running)
            advantages[t] = running
    advantages = advantages.masked_fill(invalid, 0.0)
    return advantages, advantages + values


def has_images(space: gym.Space) -> bool:
    """Frames, or a packed ``Dict`` with a frame among its keys."""
    if isinstance(space, PackedDict):
        return any(is_image(part.space) for part in layout(space.dict_space))
    return is_image(space)


def normalized_elements(space: gym.Space, images: bool) -> np.ndarray | None:
    """Which elements of an observation a signal's normalizer applies to (``rlcore.nets.blocks.ObsNormalizer``'s mask):
    the float values (:func:`rlcore.nets.encoders.float_mask`), and with ``images`` every pixel of a frame too."""
    mask = float_mask(space)
    if not images:
        return mask
    if isinstance(space, PackedDict):
        assert mask is not None
        mask = mask.copy()
        for part in layout(space.dict_space):
            if is_image(part.space):
                mask[part.start : part.stop] = True
        return mask
    return None if is_image(space) else mask


STATISTICS_CHUNK_ELEMENTS = 1 << 22
"""At most this many observation elements per update of the running statistics (32 MB in float64): a rollout of
Atari frames would otherwise take a gigabyte to merge at once. Chunks merge exactly (parallel Welford)."""


class RewardSignal(nn.Module, ABC):
    """Base of RND, curiosity and GAIL: the rollout procedure above; a member defines its reward model.

    Members set ``self.optimizer`` (over every trainable parameter) at the end of their constructor.
    """

    name: ClassVar[str]
    optimizer: torch.optim.Optimizer

    def __init__(
        self,
        config: IntrinsicConfig,
        observation_space: gym.Space,
        new_encoder: Callable[[], Encoder],
        obs_clip: float,
        normalize_reward: bool,
        normalize_images: bool = False,
    ) -> None:
        super().__init__()
        self.config = config
        self.new_encoder = new_encoder
        mask = normalized_elements(observation_space, normalize_images)
        self.obs_normalizer = ObsNormalizer(tuple(observation_space.shape or ()), obs_clip, enabled=True, mask=mask)
        self.normalizes_images = normalize_images and has_images(observation_space)
        """Frames are normalized: observations reach the normalizer as float32, the encoders do not rescale."""
        self.value_net = self.encoded_mlp(1)
        # The intrinsic return's scale, as PPO's reward scaling (RND: "divide by a running estimate of the standard
        # deviations of the intrinsic returns"); an episodic signal's return restarts with each episode.
        self.reward_scaler = RewardScaler(config.gamma, clip=None) if normalize_reward else None

    def encoded_mlp(self, out_features: int, extra: int = 0, out_gain: float = 1.0) -> EncodedMLP:
        """A network on this signal's normalized observations: a fresh encoder, then an MLP of ``hidden_sizes``."""
        encoder = self.new_encoder()
        if self.normalizes_images:  # the normalized frames are the input, not raw 0-255 values to scale by 1/255
            for module in encoder.modules():
                if isinstance(module, (Flatten, ImageEncoder)):
                    module.scale = 1.0
        return EncodedMLP(encoder, encoder.out_features, self.config.hidden_sizes, out_features, extra, out_gain)

    def make_optimizer(self) -> torch.optim.Optimizer:
        """Adam over every trainable parameter: the value network at ``value_lr``, the reward model at ``lr``."""
        value = {id(p) for p in self.value_net.parameters()}
        model = [p for p in self.parameters() if p.requires_grad and id(p) not in value]
        groups = [{"params": list(self.value_net.parameters()), "lr": self.config.value_lr}]
        return torch.optim.Adam(groups + [{"params": model, "lr": self.config.lr}])

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """Raw observations (B, *obs_shape) as this signal's networks read them: clip((x - mu) / sigma) on the
        normalized elements (float32 with frames among them), the others as they are."""
        return self.obs_normalizer(obs.to(torch.float32) if self.normalizes_images else obs)

    def update_statistics(self, obs: torch.Tensor) -> None:
        """Merge raw observations (B, *obs_shape) into the running statistics, in chunks of bounded size."""
        rows = max(1, STATISTICS_CHUNK_ELEMENTS // max(1, obs[0].numel())) if obs.shape[0] else 1
        for chunk in obs.split(rows):
            self.obs_normalizer.update(chunk)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """(B,) the value of this signal's return, for raw observations (B, *obs_shape)."""
        return self.value_net(self.normalize(obs)).squeeze(-1)

    @abstractmethod
    def rewards(self, batch: SignalBatch) -> torch.Tensor:
        """(T * N,) this signal's reward of every transition of the flattened batch (autoreset steps included:
        the caller zeroes them), before any normalization."""

    @abstractmethod
    def model_loss(self, batch: SignalBatch, rows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """The reward model's loss terms on the flattened batch's ``rows`` (valid steps); ``loss`` is minimized,
        the other terms are logged."""

    def learn(
        self, batch: SignalBatch, lam: float, generator: torch.Generator
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """This signal's advantages (T, N) for the rollout (from the models before it), then one round of training
        on it; returns them and the metrics (``reward``: the mean reward of the valid steps, before normalization)."""
        steps, envs = batch.shape
        valid = batch.valid
        with torch.no_grad():
            seen = torch.cat([batch.obs[valid], batch.next_obs[valid]])
            if seen.numel():
                self.update_statistics(seen)
            raw = torch.where(valid.reshape(-1), self.rewards(batch), 0.0).reshape(steps, envs)
            rewards = raw
            if self.reward_scaler is not None:
                ends = batch.episode_end if self.config.episodic else torch.zeros_like(batch.episode_end)
                rewards = self.reward_scaler.scale(raw, ends, valid)
            values = self.value(batch.flat("obs")).reshape(steps, envs)
            next_values = self.value(batch.flat("next_obs")).reshape(steps, envs)
            advantages, returns = signal_advantages(
                rewards, values, next_values, batch.terminated, batch.episode_end, valid, self.config.gamma, lam,
                self.config.episodic,
            )  # fmt: skip
        metrics = self._train(batch, returns.reshape(-1), generator)
        metrics["reward"] = float(raw[valid].mean()) if bool(valid.any()) else 0.0
        metrics["value"] = float(values[valid].mean()) if bool(valid.any()) else 0.0
        return advantages, metrics

    def _train(self, batch: SignalBatch, returns: torch.Tensor, generator: torch.Generator) -> dict[str, float]:
        """``epochs`` passes over shuffled minibatches of the valid steps: the model's loss plus the value loss."""
        valid = torch.nonzero(batch.valid.reshape(-1), as_tuple=False).squeeze(-1)
        obs = batch.flat("obs")
        totals: dict[str, float] = {}
        minibatches = 0
        for _ in range(self.config.epochs):
            order = valid[torch.randperm(valid.numel(), generator=generator)]
            if order.numel() < 2:
                break
            # Nearly equal minibatches of about batch_size: no small tail.
            for rows in order.tensor_split(max(1, round(order.numel() / self.config.batch_size))):
                terms = self.model_loss(batch, rows, generator)
                value_loss = (self.value(obs[rows]) - returns[rows]).square().mean()
                loss = terms["loss"] + value_loss
                self.optimizer.zero_grad(set_to_none=True)
                if not bool(torch.isfinite(loss)):  # one non-finite step would make every weight NaN
                    continue
                loss.backward()
                self.optimizer.step()
                minibatches += 1
                for key, term in {**terms, "value_loss": value_loss}.items():
                    if key != "loss":
                        totals[key] = totals.get(key, 0.0) + float(term.detach())
        return {key: total / max(minibatches, 1) for key, total in totals.items()}

    def training_state(self) -> dict[str, Any]:
        """Networks, statistics and the optimizer: what a resumed run needs."""
        return {"networks": self.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.load_state_dict(state["networks"])
        self.optimizer.load_state_dict(state["optimizer"])
