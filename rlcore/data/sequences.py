"""A rollout cut into sequences for a recurrent policy: states stored per sequence, minibatches of whole sequences.

Each env's ``T`` steps are cut into ``ceil(T / L)`` sequences of ``L = policy.memory.sequence_length`` steps
(the last may be shorter); sequence ``j = k * N + n`` is steps ``[k L, min((k + 1) L, T))`` of env ``n``. While
collecting, the trainer stores the state it carried into step ``max(k L - burn_in, 0)`` of each env. In the update a
sequence starts from that state: with ``burn_in`` steps, it first runs the ``burn_in`` steps before its start without
gradient (refreshing the stored state with the current weights, as R2D2), then its own steps. Inside a sequence the
state goes back to zeros after every reset step (``rlcore.nets.recurrent``). Losses read the valid steps only: PPO and
A2C index the valid steps of the minibatch's sequences, so padding and reset steps never reach a loss.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from rlcore.data.rollouts import RolloutBuffer, split_batches
from rlcore.nets.policies import ActorCritic
from rlcore.nets.recurrent import RecurrentActorCritic


class SequenceRollout(RolloutBuffer):
    """A :class:`RolloutBuffer` whose minibatches are whole sequences, with the state stored per sequence."""

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        obs_dtype: torch.dtype,
        policy: RecurrentActorCritic,
    ) -> None:
        super().__init__(num_steps, num_envs, obs_shape, action_shape, action_dtype, obs_dtype)
        memory = policy.config.memory
        assert memory is not None
        self.sequence_length = memory.sequence_length
        self.burn_in = memory.burn_in
        self.sequences_per_env = math.ceil(num_steps / self.sequence_length)
        starts = range(0, num_steps, self.sequence_length)
        self._stored_at = {max(start - self.burn_in, 0): k for k, start in enumerate(starts)}
        """Step -> the sequence whose state is stored when the trainer carries its state into that step."""
        self.states = policy.initial_state(self.sequences_per_env * num_envs).reshape(
            self.sequences_per_env, num_envs, *policy.memory.state_shape
        )
        """(K, N, *state_shape): the state carried into step ``max(k L - burn_in, 0)`` of env ``n``."""

    def keep_state(self, step: int, state: torch.Tensor) -> None:
        """Called with the state (N, *state_shape) carried into every ``step``; keeps the ones sequences start from."""
        k = self._stored_at.get(step)
        if k is not None:
            self.states[k] = state

    def minibatches(self, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
        """Flat indices of the valid steps of whole sequences, shuffled by sequence: about ``batch_size`` steps
        (``batch_size / sequence_length`` sequences, at least one) per minibatch, each valid step in exactly one."""
        steps = self.valid.reshape(-1)  # flat index t * N + n
        per_batch = max(1, round(batch_size / self.sequence_length))
        sequences = self._sequence_ids()
        usable = torch.zeros(self.sequences_per_env * self.num_envs, dtype=torch.bool, device=steps.device)
        usable[sequences[steps]] = True  # a sequence of reset steps only (possible when L = 1) has nothing to train
        candidates = torch.nonzero(usable).flatten()
        order = candidates[torch.randperm(candidates.numel(), generator=generator).to(steps.device)]
        for chosen in split_batches(order, per_batch):
            member = torch.zeros_like(usable)
            member[chosen] = True
            yield torch.nonzero(steps & member[sequences]).flatten()

    def _sequence_ids(self) -> torch.Tensor:
        """(T * N,) the sequence of every flat step."""
        device = self.valid.device
        t = torch.arange(self.num_steps, device=device).repeat_interleave(self.num_envs)
        n = torch.arange(self.num_envs, device=device).repeat(self.num_steps)
        return (t // self.sequence_length) * self.num_envs + n

    def features(self, policy: ActorCritic, idx: torch.Tensor) -> torch.Tensor:
        """Core outputs (B, size) at the flat steps ``idx`` (B,), computed over the whole sequences they belong to,
        each from its stored (and burnt-in) state."""
        assert isinstance(policy, RecurrentActorCritic)
        length, envs = self.sequence_length, self.num_envs
        t, n = idx // envs, idx % envs
        sequences, column = torch.unique((t // length) * envs + n, return_inverse=True)
        k, env = sequences // envs, sequences % envs
        start = self.states[k, env]
        if self.burn_in > 0:
            start = self._burn_in(policy, k, env, start)
        times = (k * length).unsqueeze(0) + torch.arange(length, device=k.device).unsqueeze(1)  # (L, M)
        times = times.clamp(max=self.num_steps - 1)  # a short last sequence: padding, read by no loss
        outputs, _ = policy.sequence_features(self.obs[times, env], start, ~self.valid[times, env])
        return outputs[t % length, column]

    @torch.no_grad()
    def _burn_in(
        self, policy: RecurrentActorCritic, k: torch.Tensor, env: torch.Tensor, stored: torch.Tensor
    ) -> torch.Tensor:
        """The states at the starts of sequences ``k`` (M,) of envs ``env`` (M,): each stored state (from ``burn_in``
        steps before the start) run forward through those steps with the current weights; the rollout's first
        sequences keep theirs."""
        later = k > 0  # the first sequence starts the rollout: nothing before it to burn in
        if not later.any():
            return stored
        rows = torch.nonzero(later).flatten()
        steps = torch.arange(self.burn_in, device=k.device).unsqueeze(1)
        times = (k[rows] * self.sequence_length - self.burn_in).unsqueeze(0) + steps
        _, state = policy.sequence_features(self.obs[times, env[rows]], stored[rows], ~self.valid[times, env[rows]])
        fresh = stored.clone()
        fresh[rows] = state
        return fresh


def make_rollout(
    policy: ActorCritic,
    num_steps: int,
    num_envs: int,
    obs_shape: tuple[int, ...],
    action_shape: tuple[int, ...],
    action_dtype: torch.dtype,
    obs_dtype: torch.dtype,
) -> RolloutBuffer:
    """The on-policy trainer's rollout: cut into sequences for a recurrent policy, flat steps otherwise."""
    if isinstance(policy, RecurrentActorCritic):
        return SequenceRollout(num_steps, num_envs, obs_shape, action_shape, action_dtype, obs_dtype, policy)
    return RolloutBuffer(num_steps, num_envs, obs_shape, action_shape, action_dtype, obs_dtype)
