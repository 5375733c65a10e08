"""N seeds' actor-critics (PPO's and A2C's policies) stacked, and which ones stack.

Features, action scores, values and distributions for (N, B, ...) inputs, seed k's from seed k's weights and
normalizer statistics, each seed's actions drawn from its own generator (what its unbatched run draws). Shapes:
observations and features (N, B, obs_dim), scores (N, B, action_dim), values (N, B).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from gymnasium import spaces
from torch.distributions import Categorical, Distribution, Independent, Normal

from rlcore.nets.encoders import Flatten
from rlcore.nets.policies import ActorCritic
from rlcore.nets.policy import Policy
from rlcore.nets.stacked import StackedModules, unstackable

REFUSED = {
    "observations other than flat vectors": lambda p: (
        not isinstance(p.encoder, Flatten) or len(p.observation_space.shape or ()) != 1
    ),
    "observations carrying an action mask": lambda p: p.mask_slice is not None,
    "observations normalized in part (a Dict space)": lambda p: p.obs_normalizer.mask is not None,
    "a categorical or transformed value head": lambda p: p.critic.categorical or p.critic.config.transform != "none",
    "actions other than Discrete or Box": lambda p: not isinstance(p.action_space, spaces.Discrete | spaces.Box),
}
"""What an actor-critic leaves to each seed's own policy beyond the rule of :func:`unstackable`."""


def batching_problem(policy: Policy) -> str | None:
    """Why ``policy``'s architecture cannot be stacked by :class:`StackedActorCritic`, or None when it can."""
    return unstackable(policy, (ActorCritic,), REFUSED)


class StackedActorCritic(StackedModules):
    """N :class:`ActorCritic` policies of one architecture (part ``"policy"``) and, if given, their ``optimizers``
    (optimizer ``"optimizer"``), stacked."""

    def __init__(self, policies: Sequence[ActorCritic], optimizers: Sequence[torch.optim.Optimizer] = ()) -> None:
        problem = batching_problem(policies[0])
        if problem is not None:
            raise ValueError(f"policies: cannot batch {problem}")
        super().__init__({"policy": policies}, {"optimizer": (optimizers, ["policy"])} if optimizers else None)
        self.stacked = self.parts["policy"]
        normalizer = policies[0].obs_normalizer
        self.normalize, self.obs_clip, self.epsilon = normalizer.enabled, normalizer.clip, normalizer.epsilon
        self.discrete = policies[0].discrete

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """``ActorCritic.features`` per seed: raw observations normalized with each seed's statistics
        (``ObsNormalizer.forward``'s arithmetic), cast to float32 (the flatten encoder)."""
        if self.normalize:
            mean = self.stacked.buffers["obs_normalizer.mean"].unsqueeze(1)  # (N, 1, obs_dim) float64
            var = self.stacked.buffers["obs_normalizer.var"].unsqueeze(1)
            std = torch.sqrt(var + self.epsilon).to(obs.dtype)
            obs = torch.clamp((obs - mean.to(obs.dtype)) / std, -self.obs_clip, self.obs_clip)
        return obs.to(torch.float32)

    def scores(self, features: torch.Tensor) -> torch.Tensor:
        """The actors' outputs (logits or Gaussian means), (N, B, action_dim)."""
        return self.stacked.mlp("actor", features)

    def values(self, features: torch.Tensor) -> torch.Tensor:
        """State values in reward units, (N, B)."""
        return self.stacked.mlp("critic.net", features).squeeze(-1)

    def distribution(self, scores: torch.Tensor) -> Distribution:
        """``ActorCritic.distribution_of`` for every seed at once: batch shape (N, B)."""
        if self.discrete:
            return Categorical(logits=scores, validate_args=False)
        std = self.stacked.params["log_std"].exp().unsqueeze(1).expand_as(scores)  # (N, A) -> (N, B, A)
        return Independent(Normal(scores, std, validate_args=False), 1, validate_args=False)

    @torch.no_grad()
    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """``ActorCritic.act(..., deterministic=True)`` per seed: the argmax actions (N, B) int64 (Discrete) or the
        Gaussian means (N, B, action_dim) float32 (Box)."""
        scores = self.scores(self.features(obs))
        return scores.argmax(dim=-1) if self.discrete else scores

    @staticmethod
    @torch.no_grad()
    def sample_seeds(distribution: Distribution, generators: Sequence[torch.Generator]) -> torch.Tensor:
        """Every seed's actions from ``distribution`` (:meth:`distribution`'s), seed k's drawn from ``generators[k]``
        as ``distribution.sample()`` of its unbatched distribution draws from torch's global generator: (N, B) int64
        or (N, B, action_dim) float32.

        Discrete: ``torch.multinomial`` of one sample is ``argmax(probs / q)`` with ``q`` an ``Exp(1)`` draw of the
        probabilities' shape (torch's CPU fast path), so each seed draws its ``q`` (B, A) from its own generator and
        one division and argmax serve every seed. Box actions, and probabilities ``multinomial`` refuses (which it
        raises on as unbatched), draw seed by seed."""
        probs = distribution.probs if isinstance(distribution, Categorical) else None
        if probs is None or not bool(((probs >= 0) & (probs < torch.inf)).all()):
            return torch.stack([_sample(distribution, k, generator) for k, generator in enumerate(generators)])
        exponential = torch.empty_like(probs)  # (N, B, A): row k, one contiguous (B, A) block, is seed k's
        for k, generator in enumerate(generators):
            exponential[k].exponential_(1, generator=generator)
        return (probs / exponential).argmax(dim=-1)


def _sample(distribution: Distribution, k: int, generator: torch.Generator) -> torch.Tensor:
    """Seed ``k``'s actions from ``distribution`` drawn from ``generator`` as ``distribution.sample()`` of its
    unbatched distribution draws from the global one: (B,) int64 or (B, action_dim) float32."""
    if isinstance(distribution, Categorical):
        probs = distribution.probs[k]
        return torch.multinomial(probs, 1, True, generator=generator).T.reshape(probs.shape[:-1])
    assert isinstance(distribution, Independent) and isinstance(distribution.base_dist, Normal)
    return torch.normal(distribution.base_dist.loc[k], distribution.base_dist.scale[k], generator=generator)
