"""The modules that get exported: a policy's greedy action and scores from raw observations (and a state, and the
action mask taken apart from the observation in a masked run), with Box actions clipped and :data:`NO_LEGAL_ACTION`
where a mask allows nothing."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rlcore.envs.action_masks import MaskInputs, mask_inputs
from rlcore.nets.policy import Policy


class GreedyPolicy(nn.Module):
    """raw obs -> (greedy action, scores); what gets exported for a stateless policy. Box actions are clipped to
    ``action_low``/``action_high``; integer actions (no bounds given) pass through."""

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, policy: Policy, action_low: np.ndarray | None, action_high: np.ndarray | None) -> None:
        super().__init__()
        self.policy = policy
        self.clips = action_low is not None
        if action_low is not None:
            assert action_high is not None
            self.register_buffer("low", torch.as_tensor(action_low.reshape(-1), dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(action_high.reshape(-1), dtype=torch.float32))

    def clip(self, action: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(action, self.high), self.low) if self.clips else action

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        action, scores, _ = self.policy.greedy(obs, None)
        return self.clip(action), scores


class GreedyStatefulPolicy(GreedyPolicy):
    """(raw obs, state) -> (greedy action, scores, next state); what gets exported for a policy with a state."""

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        action, scores, next_state = self.policy.greedy(obs, state)
        assert next_state is not None
        return self.clip(action), scores, next_state


NO_LEGAL_ACTION = -1
"""The action an exported masked policy returns for a row whose ``action_mask`` is all False (no legal action; the
argmax of scores that are all the float32 minimum would be action 0, which the mask says is illegal)."""


def no_legal_action(action: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """``action`` (B,) with :data:`NO_LEGAL_ACTION` in the rows whose ``action_mask`` (B, n) allows nothing."""
    return torch.where(action_mask.any(dim=1), action, torch.full_like(action, NO_LEGAL_ACTION))


class MaskedGreedyPolicy(nn.Module):
    """(obs without its mask, action_mask) -> (greedy action, scores): a stateless policy of a masked run; a row
    whose mask allows no action gets :data:`NO_LEGAL_ACTION`."""

    def __init__(self, policy: Policy, inputs: MaskInputs) -> None:
        super().__init__()
        self.policy = policy
        self.inputs = inputs

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        action, scores, _ = self.policy.greedy(self.inputs.join(obs, action_mask), None)
        return no_legal_action(action, action_mask), scores


class MaskedGreedyStatefulPolicy(MaskedGreedyPolicy):
    """(obs without its mask, action_mask, state) -> (greedy action, scores, next state)."""

    def forward(  # type: ignore[override]
        self, obs: torch.Tensor, action_mask: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        action, scores, next_state = self.policy.greedy(self.inputs.join(obs, action_mask), state)
        assert next_state is not None
        return no_legal_action(action, action_mask), scores, next_state


def exported_module(policy: Policy, action_space: spaces.Space) -> nn.Module:
    """The module that gets exported: greedy actions and scores, taking the mask apart in a masked run."""
    stateful = policy.initial_state(1) is not None
    masked = mask_inputs(policy.observation_space)
    if masked is not None:
        return (MaskedGreedyStatefulPolicy if stateful else MaskedGreedyPolicy)(policy, masked).eval()
    low = action_space.low if isinstance(action_space, spaces.Box) else None
    high = action_space.high if isinstance(action_space, spaces.Box) else None
    return (GreedyStatefulPolicy if stateful else GreedyPolicy)(policy, low, high).eval()
