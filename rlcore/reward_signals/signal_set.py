"""The reward signals of one run (``algo.reward_signals``): what the on-policy trainer calls between collecting a
rollout and the algorithm's update.

    A_ext           = the algorithm's own advantages on the env's rewards (its estimator, its critic)
    A_i, i in signals = each signal's GAE on its own rewards, value network and gamma (``RewardSignal.learn``)
    A               = strength_ext * A_ext + sum_i strength_i * A_i           what the policy is trained on

The policy's critic keeps fitting the env's returns in reward units: weighting its advantages by strength_ext is
what scaling the env's rewards by it would do (GAE is linear in the rewards and values), without changing the
critic's targets — so value clipping, categorical value heads over a support in reward units, and the learning
curves keep their meaning. The signals' networks, optimizers and statistics are saved with the algorithm
(``OnPolicyAlgorithm.state_dict``); none of them is part of the policy or its export.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rlcore.common.files import sha256_file
from rlcore.data.rollouts import RolloutBuffer
from rlcore.nets.policy import Policy
from rlcore.reward_signals.config import RewardSignalsConfig
from rlcore.reward_signals.curiosity import Curiosity
from rlcore.reward_signals.gail import GAIL, check_header, load_demonstrations
from rlcore.reward_signals.rnd import RND
from rlcore.reward_signals.signal import RewardSignal, SignalBatch


def combine_advantages(
    extrinsic_strength: float, extrinsic: torch.Tensor, signals: Sequence[tuple[float, torch.Tensor]]
) -> torch.Tensor:
    """strength_ext * A_ext + sum_i strength_i * A_i, each (T, N); ``signals`` the (strength_i, A_i) pairs."""
    combined = extrinsic_strength * extrinsic
    for strength, advantages in signals:
        combined = combined + strength * advantages
    return combined


def check_reward_signals(algo: Any, policy: Policy) -> dict[str, Any]:
    """What can be refused before a run starts (GAIL's dataset missing, or recorded with other spaces), then
    GAIL's dataset's sha256 for the run's fingerprint (a re-collected dataset starts a fresh run); {} without it.
    The rows are read and checked when the algorithm is built."""
    config: RewardSignalsConfig | None = getattr(algo, "reward_signals", None)
    if config is None or config.gail is None:
        return {}
    check_header(config.gail, policy.observation_space, policy.action_space)
    return {"gail_sha256": sha256_file(Path(config.gail.dataset))}


class RewardSignals:
    """The learned signals (RND, curiosity, GAIL, in that order) and the extrinsic signal's strength."""

    def __init__(self, config: RewardSignalsConfig, policy: Policy, gae_lambda: float) -> None:
        self.extrinsic_strength = config.extrinsic.strength
        self.gae_lambda = gae_lambda
        observation_space, action_space = policy.observation_space, policy.action_space
        self.signals: dict[str, RewardSignal] = {}
        if config.rnd is not None:
            self.signals["rnd"] = RND(config.rnd, observation_space, policy.new_encoder)
        if config.curiosity is not None:
            self.signals["curiosity"] = Curiosity(config.curiosity, observation_space, action_space, policy.new_encoder)
        if config.gail is not None:
            expert = load_demonstrations(config.gail, observation_space, action_space)
            self.signals["gail"] = GAIL(config.gail, observation_space, action_space, policy.new_encoder, expert)

    @classmethod
    def of(cls, policy: Policy, algo: Any) -> RewardSignals | None:
        """The signals ``algo.reward_signals`` asks for, or None (the env's reward alone, as without the key)."""
        config: RewardSignalsConfig | None = getattr(algo, "reward_signals", None)
        return None if config is None else cls(config, policy, algo.gae_lambda)

    def learn(
        self,
        rollout: RolloutBuffer,
        last_obs: torch.Tensor,
        extrinsic_advantages: torch.Tensor,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The combined advantages (T, N) for ``rollout`` (``last_obs`` (N, *obs_shape): the observation after its
        last step), then each signal's round of training on it; and the metrics, ``<signal>/<name>``."""
        batch = SignalBatch.of(rollout, last_obs)
        parts: list[tuple[float, torch.Tensor]] = []
        metrics: dict[str, float] = {}
        for name, signal in self.signals.items():
            advantages, learned = signal.learn(batch, self.gae_lambda, generator)
            parts.append((signal.config.strength, advantages))
            metrics.update({f"{name}/{key}": value for key, value in learned.items()})
        return combine_advantages(self.extrinsic_strength, extrinsic_advantages, parts), metrics

    def state_dict(self) -> dict[str, Any]:
        return {name: signal.training_state() for name, signal in self.signals.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, signal in self.signals.items():
            signal.load_training_state(state[name])
