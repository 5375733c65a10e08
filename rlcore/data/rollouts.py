"""On-policy storage: rollouts filled one vector step at a time, and actors' trajectories batched for a learner."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from rlcore.nets.policies import ActorCritic


class RolloutBuffer:
    """One rollout of ``num_steps`` vector steps over ``num_envs`` envs.

    ``valid`` is False for the steps where next-step autoreset was resetting an env (the action was
    ignored and the reward is 0): they are kept for the time structure of GAE but never trained on.
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        obs_dtype: torch.dtype = torch.float32,
    ) -> None:
        self.num_steps = num_steps
        self.num_envs = num_envs
        shape = (num_steps, num_envs)
        self.obs = torch.zeros(shape + obs_shape, dtype=obs_dtype)
        """(T, N, *obs_shape) in the observations' storage dtype (``rlcore.envs.observations``: uint8 frames stay
        uint8)."""
        self.actions = torch.zeros(shape + action_shape, dtype=action_dtype)
        self.log_probs = torch.zeros(shape)
        self.values = torch.zeros(shape)
        self.next_values = torch.zeros(shape)
        self.rewards = torch.zeros(shape)
        self.terminated = torch.zeros(shape, dtype=torch.bool)
        self.episode_end = torch.zeros(shape, dtype=torch.bool)
        self.valid = torch.ones(shape, dtype=torch.bool)
        self.advantages = torch.zeros(shape)
        self.returns = torch.zeros(shape)

    def record_step(
        self, t: int, rewards: np.ndarray, terminated: np.ndarray, ended: np.ndarray, valid: np.ndarray
    ) -> None:
        """What the env said of vector step ``t``, each (N,): written through NumPy views of the CPU storage (a
        ``torch.as_tensor`` and a copy per field cost ~20x more, per step of every run); the float64 rewards are
        rounded to float32 as ``torch.as_tensor`` rounds them."""
        self.rewards.numpy()[t] = rewards
        self.terminated.numpy()[t] = terminated
        self.episode_end.numpy()[t] = ended
        self.valid.numpy()[t] = valid

    def to(self, device: torch.device) -> RolloutBuffer:
        """This rollout with every tensor on ``device`` (a copy; ``self`` when they are there already): what a
        learner on a GPU trains on (``train.device``)."""
        if self.obs.device == device:
            return self
        moved = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, torch.Tensor):
                setattr(moved, name, value.to(device))
        return moved

    def flat_valid_indices(self) -> torch.Tensor:
        """Indices into the flattened (T * N) rollout of the steps that are trained on."""
        return torch.nonzero(self.valid.reshape(-1), as_tuple=False).squeeze(-1)

    def minibatches(self, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
        """Shuffled index batches of the valid steps, each valid step in exactly one.

        The number of valid steps changes from rollout to rollout (autoreset steps are left out), so it
        rarely divides by ``batch_size``. The batches are full (``batch_size``) and the remainder is
        handled so that no minibatch is small: a remainder of at least half a batch is a last minibatch
        of its own, a smaller one is spread evenly over the full batches (sizes then differ by at most
        one), and fewer valid steps than a batch make a single minibatch of all of them. So every
        minibatch holds at least ``batch_size // 2`` samples (unless the rollout has fewer valid steps):
        never the 1-sample tail whose advantage std is NaN, nor a 2-5 sample tail taking a full,
        noisy step. A rollout whose valid count divides evenly, or leaves a large tail, is split as before.
        """
        yield from shuffled_minibatches(self.valid, batch_size, generator)

    def features(self, policy: ActorCritic, idx: torch.Tensor) -> torch.Tensor:
        """What ``policy``'s heads read at the flat steps ``idx`` (B,): (B, width). Here the encoded observations;
        a recurrent rollout (``rlcore.data.sequences``) runs its sequences through the policy's memory."""
        return policy.features(self.flat("obs")[idx])

    def action_mask(self, policy: ActorCritic, idx: torch.Tensor) -> torch.Tensor | None:
        """The legal actions ``policy`` acted under at the flat steps ``idx`` (B,): (B, n) bool, read from the stored
        observations (``Policy.action_mask``); None when they carry no mask."""
        return policy.action_mask(self.flat("obs")[idx])

    def flat(self, name: str) -> torch.Tensor:
        """A stored field with (T, N) flattened to (T * N,)."""
        tensor: torch.Tensor = getattr(self, name)
        return tensor.reshape(self.num_steps * self.num_envs, *tensor.shape[2:])


ACTING_FIELDS = ("obs", "actions", "log_probs", "values")
"""The fields an acting step records (``Member.record``); the env's are :meth:`RolloutBuffer.record_step`'s."""


def stack_acting_fields(rollouts: Sequence[RolloutBuffer]) -> dict[str, torch.Tensor]:
    """The :data:`ACTING_FIELDS` of ``rollouts`` (of one shape) moved into one storage each, (M, T, N, ...), every
    rollout's field now its view ``[k]`` with its contents kept: one write at ``[:, t]`` records a step of every
    rollout (M per-rollout writes cost more than the stacked forward pass itself)."""
    storage = {name: torch.stack([getattr(rollout, name) for rollout in rollouts]) for name in ACTING_FIELDS}
    for k, rollout in enumerate(rollouts):
        for name, stacked in storage.items():
            setattr(rollout, name, stacked[k])
    return storage


def shuffled_minibatches(valid: torch.Tensor, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """:meth:`RolloutBuffer.minibatches` of a rollout whose validity mask is ``valid`` (T, N) bool: index batches
    into its flattened (T * N) steps (one seed's rollout of a batched run draws its own with its own generator)."""
    indices = torch.nonzero(valid.reshape(-1), as_tuple=False).squeeze(-1)
    order = torch.randperm(indices.numel(), generator=generator).to(indices.device)  # the generator is the CPU's
    yield from split_batches(indices[order], batch_size)


def split_batches(order: torch.Tensor, batch_size: int) -> Iterator[torch.Tensor]:
    """``order`` (n,) cut into batches of ``batch_size``, none small: a remainder of at least half a batch (and 2)
    is a batch of its own, a smaller one is spread over the full batches, fewer than a batch make one batch."""
    if order.numel() == 0:
        return
    full, tail = divmod(order.numel(), batch_size)
    if full == 0 or (2 * tail >= batch_size and tail >= 2):
        yield from order.split(batch_size)
    else:
        yield from order.tensor_split(full)


@dataclass
class TrajectoryBatch:
    """Trajectories of ``T`` vector steps from actors, side by side: ``N`` is the sum of their envs.

    Made by :meth:`stack` from what actors send (NumPy arrays of the same names, one trajectory each).
    ``obs`` has ``T + 1`` rows: the last is the observation after the last step, for the bootstrap value
    (with next-step autoreset, the row after a step that ended an episode is that episode's last observation).
    """

    obs: torch.Tensor
    """(T + 1, N, *obs_shape) in the observations' storage dtype: float32 for floats, uint8 frames as uint8."""
    actions: torch.Tensor
    """(T, N) int64 or (T, N, *action_shape), the policy's convention."""
    behaviour_log_probs: torch.Tensor
    """(T, N) log mu(a_t | s_t) of the copy of the policy the actor acted with."""
    rewards: torch.Tensor
    """(T, N) float32."""
    terminated: torch.Tensor
    """(T, N) bool."""
    episode_end: torch.Tensor
    """(T, N) bool: terminated or truncated."""
    valid: torch.Tensor
    """(T, N) bool: False at autoreset steps (no transition; never trained on)."""
    versions: torch.Tensor
    """(N,) int64: the weights version each env's trajectory was made with."""
    initial_state: torch.Tensor | None = None
    """(N, *state_shape): a recurrent policy's state at each env's first step (``policy.memory``); None otherwise."""

    @classmethod
    def stack(cls, trajectories: Sequence[dict[str, np.ndarray]]) -> TrajectoryBatch:
        """Concatenate trajectories along the env axis (``versions`` are per trajectory, repeated per env).
        float64 arrays become float32; integer and boolean arrays (frames) keep their dtype."""
        columns: dict[str, torch.Tensor] = {}
        for field in fields(cls):
            if field.name in ("versions", "initial_state"):
                continue
            arrays = [np.asarray(item[field.name]) for item in trajectories]
            tensor = torch.from_numpy(np.concatenate(arrays, axis=1))
            if tensor.dtype == torch.float64:
                tensor = tensor.float()
            columns[field.name] = tensor
        versions = [np.full(np.shape(item["rewards"])[1], int(item["version"])) for item in trajectories]
        states = [item.get("initial_state") for item in trajectories]
        initial_state = None
        if states[0] is not None:
            initial_state = torch.from_numpy(np.concatenate([np.asarray(state) for state in states], axis=0)).float()
        return cls(**columns, versions=torch.from_numpy(np.concatenate(versions)), initial_state=initial_state)

    @property
    def env_steps(self) -> int:
        """Env steps the batch holds (autoreset steps included, as the other trainers count them)."""
        return int(self.rewards.numel())
