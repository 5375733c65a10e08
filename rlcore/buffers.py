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
        valid = self.flat_valid_indices()
        order = valid[torch.randperm(valid.numel(), generator=generator)]
        if order.numel() == 0:
            return
        full, tail = divmod(order.numel(), batch_size)
        if full == 0 or (2 * tail >= batch_size and tail >= 2):
            yield from order.split(batch_size)
        else:
            yield from order.tensor_split(full)

    def flat(self, name: str) -> torch.Tensor:
        """A stored field with (T, N) flattened to (T * N,)."""
        tensor: torch.Tensor = getattr(self, name)
        return tensor.reshape(self.num_steps * self.num_envs, *tensor.shape[2:])
