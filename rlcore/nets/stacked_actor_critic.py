"""N seeds' actor-critics (PPO's and A2C's policies) as one batched program: features, action scores, values and
action distributions for (N, B, ...) inputs, seed k's from seed k's stacked weights and normalizer statistics.

Each ``nn.Linear`` is one ``torch.baddbmm`` over the stacked weights (:meth:`StackedPolicies.mlp`), the normalizer
the unbatched arithmetic broadcast over the seed dimension, so a seed's forward pass is its unbatched one (bitwise in
practice: measured equal on CartPole's shapes). Only plain MLP actor-critics stack (:func:`batching_problem` says
why not; the on-policy loop then calls each seed's own policy): vector observations through the flatten encoder, no
recurrent core, a scalar value head in reward units, Discrete or Box actions. Sampling draws each seed's random
numbers from that seed's own generator (:meth:`StackedActorCritic.sample` per seed;
:meth:`StackedActorCritic.sample_seeds` for all seeds, one argmax over every seed's Categorical), so seed k's actions
are the ones its unbatched run draws.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from gymnasium import spaces
from torch.distributions import Categorical, Distribution, Independent, Normal

from rlcore.nets.encoders import Flatten
from rlcore.nets.policies import ActorCritic
from rlcore.nets.policy import Policy
from rlcore.nets.stacked import StackedPolicies


def batching_problem(policy: Policy) -> str | None:
    """Why ``policy``'s architecture cannot be stacked by :class:`StackedActorCritic`, or None when it can."""
    if type(policy) is not ActorCritic:
        return f"a {type(policy).__name__}"
    if not isinstance(policy.encoder, Flatten) or len(policy.observation_space.shape or ()) != 1:
        return "observations other than flat vectors"
    if policy.mask_slice is not None:
        return "observations carrying an action mask"
    if policy.obs_normalizer.mask is not None:
        return "observations normalized in part (a Dict space)"
    if policy.critic.categorical or policy.critic.config.transform != "none":
        return "a categorical or transformed value head"
    if not isinstance(policy.action_space, spaces.Discrete | spaces.Box):
        return f"{type(policy.action_space).__name__} actions"
    return None


class StackedActorCritic:
    """N :class:`ActorCritic` policies of one architecture, stacked (``stacked``: their :class:`StackedPolicies`).

    Shapes: observations (N, B, obs_dim), features (N, B, obs_dim), scores (N, B, action_dim), values (N, B).
    """

    def __init__(self, policies: Sequence[ActorCritic]) -> None:
        problem = batching_problem(policies[0])
        if problem is not None:
            raise ValueError(f"policies: cannot batch {problem}")
        self.stacked = StackedPolicies(list(policies))
        self.count = self.stacked.count
        normalizer = policies[0].obs_normalizer
        self.normalize, self.obs_clip, self.epsilon = normalizer.enabled, normalizer.clip, normalizer.epsilon
        self.discrete = policies[0].discrete

    def parameters(self) -> list[torch.Tensor]:
        return self.stacked.parameters()

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """``ActorCritic.features`` per seed: raw observations (N, B, obs_dim) normalized with each seed's statistics
        (``ObsNormalizer.forward``'s arithmetic) and cast to float32 (the flatten encoder)."""
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
        """``ActorCritic.act(..., deterministic=True)`` per seed for observations (N, B, obs_dim): the argmax action
        (N, B) int64 (Discrete) or the Gaussian means (N, B, action_dim) float32 (Box)."""
        scores = self.scores(self.features(obs))
        return scores.argmax(dim=-1) if self.discrete else scores

    @staticmethod
    @torch.no_grad()
    def sample(distribution: Distribution, k: int, generator: torch.Generator) -> torch.Tensor:
        """Seed ``k``'s actions from ``distribution`` (:meth:`distribution`'s), drawn from ``generator`` exactly as
        ``distribution.sample()`` of seed k's unbatched distribution draws from torch's global generator:
        (B,) int64 (Discrete) or (B, action_dim) float32 (Box)."""
        if isinstance(distribution, Categorical):
            probs = distribution.probs[k]
            return torch.multinomial(probs, 1, True, generator=generator).T.reshape(probs.shape[:-1])
        assert isinstance(distribution, Independent) and isinstance(distribution.base_dist, Normal)
        normal = distribution.base_dist
        return torch.normal(normal.loc[k], normal.scale[k], generator=generator)

    @staticmethod
    @torch.no_grad()
    def sample_seeds(distribution: Distribution, generators: Sequence[torch.Generator]) -> torch.Tensor:
        """Every seed's actions from ``distribution`` (:meth:`distribution`'s), seed k's drawn from
        ``generators[k]``, bitwise what :meth:`sample` gives seed by seed: (N, B) int64 (Discrete) or
        (N, B, action_dim) float32 (Box).

        Discrete: ``torch.multinomial`` of one sample draws it as ``argmax(probs / q)`` with ``q`` an ``Exp(1)``
        draw of the probabilities' shape (the Gumbel-max trick, torch's CPU fast path), so each seed draws its
        ``q`` (B, A) from its own generator as ``multinomial`` would and one division and argmax serve every seed
        (``tests/test_seeds_batched.py`` checks the results and the generators' states against ``sample``).
        Probabilities ``multinomial`` refuses (not finite, negative) go through :meth:`sample`, which raises as the
        unbatched run does."""
        if not isinstance(distribution, Categorical):
            return torch.stack([StackedActorCritic.sample(distribution, k, g) for k, g in enumerate(generators)])
        probs = distribution.probs
        if not bool(((probs >= 0) & (probs < torch.inf)).all()):
            return torch.stack([StackedActorCritic.sample(distribution, k, g) for k, g in enumerate(generators)])
        exponential = torch.empty_like(probs)  # (N, B, A): row k, one contiguous (B, A) block, is seed k's
        for k, generator in enumerate(generators):
            exponential[k].exponential_(1, generator=generator)
        return (probs / exponential).argmax(dim=-1)

    def copy_weights_to(self, k: int, policy: ActorCritic) -> None:
        """Seed ``k``'s stacked parameters into ``policy`` (its buffers, the normalizer's statistics, are left)."""
        with torch.no_grad():
            for name, param in policy.named_parameters():
                param.copy_(self.stacked.params[name][k])

    def load_buffers_from(self, k: int, policy: ActorCritic) -> None:
        """``policy``'s buffers (its normalizer's statistics) into seed ``k``'s stacked buffers."""
        with torch.no_grad():
            for name, buffer in policy.named_buffers():
                if name in self.stacked.buffers:
                    self.stacked.buffers[name][k].copy_(buffer)
