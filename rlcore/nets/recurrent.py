"""Recurrent policies: a memory core (LSTM or GRU) between the observation encoder and the actor-critic heads.

    raw obs (B, *obs_shape) -> normalizer -> encoder -> (B, feature_dim) -> core -> (B, size) -> actor, critic

The state is one tensor, (B, 2, size) for an LSTM (h and c stacked) and (B, 1, size) for a GRU, zeros at an
episode's start, so the stateful-policy interface (``Policy.initial_state``, ``act``, ``greedy``, ``reset_state``)
carries it through training, evaluation, collection and export unchanged.

**One core, shared by actor and critic.** sb3-contrib's RecurrentPPO gives the critic an LSTM of its own by default;
CleanRL's LSTM PPO, rl8 and ML-Agents' shared networks share one. rlcore shares it for three reasons: the state is
one tensor whatever the algorithm needs, so what is exported (the actor) carries exactly the state that was trained;
the critic's loss, the denser signal, trains the memory the actor reads (as the shared pixel encoder does); and one
recurrent pass per step instead of two halves the sequential cost of training, the part of a recurrent update that
does not batch. ``vf_coef`` weighs the critic's pull on the shared core.

**Episode starts inside a sequence.** With next-step autoreset (``rlcore.envs.stepping``) an env starts its new episode
on the step after a reset step (``valid`` False): the state is put back to zeros *after* every invalid step, the
same rule :func:`rlcore.nets.policy.reset_state` applies while acting, so training sees the states acting saw.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from gymnasium import spaces
from torch import nn

from rlcore.config.sections import MemoryConfig, PolicyConfig
from rlcore.nets.policies import ActorCritic
from rlcore.nets.value_transforms import ValueHeadConfig


class MemoryCore(nn.Module):
    """An LSTM or GRU of one layer over encoded features, with its state as one (B, layers, size) tensor."""

    def __init__(self, config: MemoryConfig, input_size: int) -> None:
        super().__init__()
        self.lstm = config.type == "lstm"
        self.size = config.size
        self.rnn: nn.LSTM | nn.GRU = (nn.LSTM if self.lstm else nn.GRU)(input_size, config.size)
        self.state_shape = (2 if self.lstm else 1, config.size)
        """The state of one env: h and c (LSTM) or h (GRU), each ``size`` wide."""

    def initial_state(self, batch_size: int) -> torch.Tensor:
        """Zeros, (B, *state_shape): the state at an episode's start."""
        return torch.zeros(batch_size, *self.state_shape)

    def forward(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Run ``x`` (L, B, input_size) from ``state`` (B, *state_shape) with no reset in between:
        (outputs (L, B, size), the state after the last step (B, *state_shape))."""
        out, hidden = self.rnn(x, self._hidden(state))
        return out, self._state(hidden).to(state.dtype)  # float32 whatever autocast computed in

    def _hidden(self, state: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(B, *state_shape) -> what the torch module takes: (h, c) for an LSTM, h for a GRU, each (1, B, size)."""
        if self.lstm:
            return state[:, 0].unsqueeze(0).contiguous(), state[:, 1].unsqueeze(0).contiguous()
        return state[:, 0].unsqueeze(0).contiguous()

    def _state(self, hidden: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        if isinstance(hidden, tuple):
            return torch.stack([hidden[0][0], hidden[1][0]], dim=1)
        return hidden[0].unsqueeze(1)

    def sequence(
        self, x: torch.Tensor, state: torch.Tensor, reset_after: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(outputs (L, B, size), the state after the last step (B, *state_shape)) over ``x`` (L, B, input_size)
        from ``state`` (B, *state_shape), where row b's state goes back to zeros after every step t with
        ``reset_after[t, b]`` (L, B) bool (the invalid, reset steps), the last step included.

        Each row is cut at its resets into segments, the first starting from ``state``, the others from zeros, and
        all segments run as one packed batch: one recurrent call (and one backward) whatever the number of resets.
        """
        steps, batch = reset_after.shape
        starts = torch.zeros(batch, steps, dtype=torch.bool, device=x.device)  # row-major (b, t): a segment starts
        starts[:, 0] = True
        starts[:, 1:] = reset_after[:-1].T
        flat_starts = starts.reshape(-1)
        segment = torch.cumsum(flat_starts.long(), 0) - 1  # (B * L,) the segment of every (b, t)
        first = torch.nonzero(flat_starts).flatten()  # (J,) where each segment starts
        position = torch.arange(batch * steps, device=x.device) - first[segment]  # step within its segment
        lengths = torch.bincount(segment, minlength=len(first))
        padded = x.new_zeros(int(lengths.max()), len(first), x.shape[-1])
        padded[position, segment] = x.transpose(0, 1).reshape(batch * steps, -1)
        begins_row = first % steps == 0  # the row's first segment starts from the given state, the others from zeros
        initial = torch.zeros(len(first), *self.state_shape, dtype=state.dtype, device=state.device)
        initial = initial.index_put((torch.nonzero(begins_row).flatten(),), state)
        packed = nn.utils.rnn.pack_padded_sequence(padded, lengths.cpu(), enforce_sorted=False)  # lengths: on the CPU
        out, hidden = self.rnn(packed, self._hidden(initial))
        out, _ = nn.utils.rnn.pad_packed_sequence(out)
        outputs = out[position, segment].reshape(batch, steps, -1).transpose(0, 1)
        last = self._state(hidden).to(state.dtype)[segment.reshape(batch, steps)[:, -1]]
        return outputs, self._reset(last, reset_after[-1])

    @staticmethod
    def _reset(state: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``state`` (B, *state_shape) with the rows of ``rows`` (B,) bool set to zeros (the initial state)."""
        return torch.where(rows.view(-1, 1, 1), torch.zeros_like(state), state)


class RecurrentActorCritic(ActorCritic):
    """:class:`rlcore.nets.policies.ActorCritic` with a :class:`MemoryCore` between the encoder and the heads.

    Every stateless method (``features(obs)``, ``distribution(obs)``, ``value(obs)``, ...) refuses: a recurrent
    policy is asked through :meth:`act`, :meth:`greedy` and :meth:`step_features` with its state, or over whole
    sequences with :meth:`sequence_features`.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: spaces.Space,
        config: PolicyConfig,
        value_head: ValueHeadConfig | None = None,
    ) -> None:
        assert config.memory is not None
        super().__init__(observation_space, action_space, config, value_head, head_inputs=config.memory.size)
        self.memory = MemoryCore(config.memory, self.encoder.out_features)

    def initial_state(self, batch_size: int) -> torch.Tensor:
        return self.memory.initial_state(batch_size)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        raise TypeError("a recurrent policy needs its state: use act(), greedy() or step_features(obs, state)")

    def step_features(self, obs: torch.Tensor, state: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One step: raw ``obs`` (B, *obs_shape) and ``state`` (B, *state_shape) -> (core output (B, size), the
        next state)."""
        assert state is not None
        out, next_state = self.memory(self.encoder(self.obs_normalizer(obs)).unsqueeze(0), state)
        return out[0], next_state

    def sequence_features(
        self, obs: torch.Tensor, state: torch.Tensor, reset_after: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(core outputs (L, B, size), the state after the last step) over sequences of raw ``obs``
        (L, B, *obs_shape) from ``state`` (B, *state_shape), reset after the steps of ``reset_after`` (L, B) bool
        (:meth:`MemoryCore.sequence`)."""
        steps, batch = obs.shape[:2]
        encoded = self.encoder(self.obs_normalizer(obs.reshape(steps * batch, *obs.shape[2:])))
        return self.memory.sequence(encoded.reshape(steps, batch, -1), state, reset_after)


def actor_critic(
    observation_space: gym.Space,
    action_space: spaces.Space,
    config: PolicyConfig,
    value_head: ValueHeadConfig | None = None,
) -> ActorCritic:
    """The on-policy family's policy: recurrent when ``policy.memory`` is set, else feed-forward."""
    if config.memory is not None:
        return RecurrentActorCritic(observation_space, action_space, config, value_head)
    return ActorCritic(observation_space, action_space, config, value_head)
