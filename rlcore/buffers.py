"""On-policy rollout storage: preallocated (T, N, ...) tensors filled one vector step at a time."""

from __future__ import annotations

from collections.abc import Iterator

import torch


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
    ) -> None:
        self.num_steps = num_steps
        self.num_envs = num_envs
        shape = (num_steps, num_envs)
        self.obs = torch.zeros(shape + obs_shape)
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

    def flat_valid_indices(self) -> torch.Tensor:
        """Indices into the flattened (T * N) rollout of the steps that are trained on."""
        return torch.nonzero(self.valid.reshape(-1), as_tuple=False).squeeze(-1)

    def minibatches(self, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
        """Shuffled index batches of the valid steps; the last one may be smaller."""
        valid = self.flat_valid_indices()
        order = valid[torch.randperm(valid.numel(), generator=generator)]
        for start in range(0, order.numel(), batch_size):
            yield order[start : start + batch_size]

    def flat(self, name: str) -> torch.Tensor:
        """A stored field with (T, N) flattened to (T * N,)."""
        tensor: torch.Tensor = getattr(self, name)
        return tensor.reshape(self.num_steps * self.num_envs, *tensor.shape[2:])
