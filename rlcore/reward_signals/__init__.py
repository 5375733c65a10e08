"""Reward signals beside the env's reward for on-policy runs (``algo.reward_signals``): RND and curiosity for
exploration, GAIL for imitation from a dataset. Each is a reward model with its own value network; the policy
learns from the strength-weighted sum of every signal's advantages (:mod:`rlcore.reward_signals.signal_set`).

May import: ``rlcore.objectives`` and every layer below it; not ``rlcore.algos`` (the algorithms use the signals)."""

from rlcore.reward_signals.config import RewardSignalsConfig
from rlcore.reward_signals.signal_set import RewardSignals, check_reward_signals

__all__ = ["RewardSignals", "RewardSignalsConfig", "check_reward_signals"]
