"""The policies of the algorithm families, behind :class:`rlcore.nets.policy.Policy`'s interface: the actor-critic
(PPO, A2C, IMPALA, SVPG), Q-values (DQN), the squashed Gaussian (SAC), categorical and Gaussian actors (SAC, BC, IQL,
ES) and the deterministic actor (TD3+BC, ES)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import (
    AffineTransform,
    Categorical,
    Distribution,
    Independent,
    Normal,
    TanhTransform,
    Transform,
    TransformedDistribution,
)

from rlcore.common.errors import ConfigError
from rlcore.config.sections import PolicyConfig
from rlcore.nets.blocks import mlp
from rlcore.nets.distributions import (
    categorical_draw,
    gaussian_draw,
    masked_categorical,
    masked_logits,
    sample_categorical,
    sub_actions,
)
from rlcore.nets.policy import Policy
from rlcore.nets.value_transforms import ValueHead, ValueHeadConfig


def require_bounded(action_space: spaces.Space, algo_name: str) -> None:
    """Refuse (one line) a Box with an infinite bound for an algorithm whose actions are squashed into the bounds
    (a tanh, then ``loc + scale * u``): with ``inf`` or ``-inf`` bounds ``loc`` is NaN and training is NaN."""
    if isinstance(action_space, spaces.Box) and not (
        np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))
    ):
        raise ConfigError(f"algo.name: {algo_name} squashes actions into their bounds, but {action_space} is unbounded")


class ActorCritic(Policy):
    """Actor and critic MLPs on one shared encoder (the on-policy and actor-learner families: PPO, A2C, IMPALA).

    The encoder is shared (as SB3's and CleanRL's Atari PPO share their CNN): one pass over the pixels serves both
    heads, and the critic's loss, the denser signal, trains the features the actor reads. For vector observations
    it is a flatten with no weights, so the actor and critic networks are as separate as they always were.

    The critic is a :class:`rlcore.nets.value_transforms.ValueHead`: a scalar output by default, optionally in
    Pohlen et al.'s transformed units or categorical over a support (``algo.value_head``); :meth:`value` always
    answers in reward units and :meth:`value_loss` is the head's own loss.

    Discrete actions: a categorical over logits. MultiDiscrete: a categorical per sub-action
    (``rlcore.nets.distributions.MultiCategorical``); MultiBinary: a Bernoulli per bit (``MultiBernoulli``). Box
    actions: a diagonal Gaussian with a learned, state-independent log standard deviation; sampled actions are
    clipped to the bounds only when sent to the env, so log-probabilities stay those of the sampled values.
    """

    has_distribution = True

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: spaces.Space,
        config: PolicyConfig,
        value_head: ValueHeadConfig | None = None,
        head_inputs: int | None = None,
    ) -> None:
        """``head_inputs``: the width the heads read when it is not the encoder's (a recurrent core's output)."""
        super().__init__(observation_space, action_space, config)
        self.sub_actions = sub_actions(action_space)
        width = head_inputs or self.feature_dim
        self.actor = mlp(width, config.hidden_sizes, self.action_dim, config.activation, out_gain=0.01)
        head = value_head or ValueHeadConfig()
        self.critic = ValueHead(width, config.hidden_sizes, config.activation, head)
        self._register_load_state_dict_pre_hook(_critic_keys_before_value_heads)
        if isinstance(action_space, spaces.Box):
            self.log_std = nn.Parameter(torch.full((self.action_dim,), float(config.log_std_init)))

    def distribution(self, obs: torch.Tensor) -> Distribution:
        """The action distribution for ``obs``: (B, *obs_shape) raw observations."""
        return self.distribution_of(self.features(obs), self.action_mask(obs))

    def step_features(self, obs: torch.Tensor, state: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(:meth:`features` of ``obs``, the next state): what the heads read at one step of acting. A feed-forward
        policy passes the state (None) through; ``rlcore.nets.recurrent``'s recurrent one advances it."""
        return self.features(obs), state

    def act(
        self,
        obs: torch.Tensor,
        state: torch.Tensor | None,
        deterministic: bool,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        features, next_state = self.step_features(obs, state)
        scores = masked_logits(self.actor(features), self.action_mask(obs))
        actions = self.greedy_of(scores) if deterministic else self.sample_of(scores, generator)
        return actions, next_state

    def greedy(
        self, obs: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        features, next_state = self.step_features(obs, state)
        scores = masked_logits(self.actor(features), self.action_mask(obs))
        return self.greedy_of(scores), scores, next_state

    def actor_scores_of(self, features: torch.Tensor) -> torch.Tensor:
        """The actor's scores (B, action_dim) for :meth:`features` (B, feature_dim): what :meth:`distribution_of`
        and :meth:`draw_of` read."""
        return self.actor(features)

    def distribution_of(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> Distribution:
        """The action distribution for :meth:`features` (B, feature_dim) under the legal actions ``mask`` (B, n)
        bool (:meth:`action_mask` of the same observations; None: no mask; a run with masks must pass them): a
        caller that also needs the critic (PPO's update, rollouts) encodes the observations once for both heads."""
        scores = self.actor_scores_of(features)
        if self.sub_actions is not None:
            return self.sub_actions.distribution(scores)
        if self.discrete:
            return masked_categorical(scores, mask)
        normal = Normal(scores, self.log_std.exp().expand_as(scores), validate_args=False)
        return Independent(normal, 1, validate_args=False)

    def draw_of(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions, their log-probabilities (B,)) drawn from torch's global generator for :meth:`features` (B,
        feature_dim) under ``mask``: ``distribution_of(features, mask)``'s ``sample()`` and ``log_prob`` (the same
        draw and values), without building the distribution where it is a categorical or a Gaussian (acting's
        hot path)."""
        if self.sub_actions is None:
            scores = self.actor_scores_of(features)
            if self.discrete:
                return categorical_draw(masked_logits(scores, mask))
            return gaussian_draw(scores, self.log_std.exp().expand_as(scores))
        distribution = self.distribution_of(features, mask)
        actions = distribution.sample()
        return actions, distribution.log_prob(actions)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values in reward units, (B,)."""
        return self.critic(self.features(obs))

    def value_of(self, features: torch.Tensor) -> torch.Tensor:
        """State values in reward units, (B,), for :meth:`features` (B, feature_dim)."""
        return self.critic(features)

    def value_loss(
        self,
        obs: torch.Tensor,
        targets: torch.Tensor,
        old_values: torch.Tensor | None = None,
        clip_range: float | None = None,
    ) -> torch.Tensor:
        """The critic's mean loss against ``targets`` (B,) in reward units (``ValueHead.loss``: squared error,
        clipped around ``old_values`` when ``clip_range`` is given, or a cross-entropy for categorical heads)."""
        return self.value_loss_of(self.features(obs), targets, old_values, clip_range)

    def value_loss_of(
        self,
        features: torch.Tensor,
        targets: torch.Tensor,
        old_values: torch.Tensor | None = None,
        clip_range: float | None = None,
    ) -> torch.Tensor:
        """:meth:`value_loss` for :meth:`features` (B, feature_dim)."""
        return self.critic.loss(features, targets, old_values, clip_range)

    def act_scores(self, obs: torch.Tensor) -> torch.Tensor:
        return masked_logits(self.actor(self.features(obs)), self.action_mask(obs))

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.greedy_of(self.act_scores(obs))

    def sample_action(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.sample_of(self.act_scores(obs), generator)

    def greedy_of(self, scores: torch.Tensor) -> torch.Tensor:
        """The greedy action for the actor's ``scores`` (B, action_dim)."""
        if self.sub_actions is not None:
            return self.sub_actions.greedy(scores)
        return scores.argmax(dim=-1) if self.discrete else scores

    def sample_of(self, scores: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """A sampled action for the actor's ``scores`` (B, action_dim)."""
        if self.sub_actions is not None:
            return self.sub_actions.sample(scores, generator)
        if self.discrete:
            return sample_categorical(scores, generator)
        return scores + self.log_std.exp() * torch.randn(scores.shape, generator=generator)


def _critic_keys_before_value_heads(state: dict[str, torch.Tensor], prefix: str, *args: object) -> None:
    """Checkpoints written before critics became value heads name the critic's layers ``critic.<i>.*``; they are
    ``critic.net.<i>.*`` now (the same MLP). Renamed on load, so older checkpoints still load."""
    old = f"{prefix}critic."
    for key in [key for key in state if key.startswith(old) and key[len(old) : len(old) + 1].isdigit()]:
        state[f"{prefix}critic.net.{key[len(old) :]}"] = state.pop(key)


class QPolicy(Policy):
    """Action values Q(s, .) for Discrete actions (DQN), optionally with a dueling head.

    Dueling (Wang et al., 2016): Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a').
    ``sample_action`` is epsilon-greedy with ``eval_epsilon``.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: spaces.Space,
        config: PolicyConfig,
        dueling: bool = False,
        eval_epsilon: float = 0.05,
    ) -> None:
        super().__init__(observation_space, action_space, config)
        self.dueling = dueling
        self.eval_epsilon = eval_epsilon
        out = self.action_dim + 1 if dueling else self.action_dim
        self.q = mlp(self.feature_dim, config.hidden_sizes, out, config.activation, out_gain=1.0)

    def act_scores(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values, (B, n_actions); illegal actions (:meth:`action_mask`) at the dtype's lowest value, so the greedy
        action and a TD target's max over the next state's actions read legal actions only."""
        out = self.q(self.features(obs))
        if self.dueling:
            value, advantage = out[:, :1], out[:, 1:]
            out = value + advantage - advantage.mean(dim=-1, keepdim=True)
        return masked_logits(out, self.action_mask(obs))

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.act_scores(obs).argmax(dim=-1)

    def sample_action(
        self, obs: torch.Tensor, generator: torch.Generator | None = None, epsilon: float | None = None
    ) -> torch.Tensor:
        """Epsilon-greedy: a uniformly random (legal) action with probability ``epsilon``."""
        return self.sample_of(self.act_scores(obs), self.action_mask(obs), generator, epsilon)

    def sample_of(
        self,
        scores: torch.Tensor,
        mask: torch.Tensor | None,
        generator: torch.Generator | None = None,
        epsilon: float | None = None,
    ) -> torch.Tensor:
        """:meth:`sample_action`'s draw from ``generator`` given the Q-values ``scores`` (B, n_actions; illegal
        actions already at the lowest value) and the action ``mask`` (B, n_actions) or None: what N seeds' stacked
        Q-values are drawn through, each seed's rows with its own generator."""
        epsilon = self.eval_epsilon if epsilon is None else epsilon
        greedy = scores.argmax(dim=-1)
        explore = torch.rand(greedy.shape, generator=generator) < epsilon
        if mask is None:
            random = torch.randint(self.action_dim, greedy.shape, generator=generator)
        else:
            random = sample_categorical(masked_logits(torch.zeros(mask.shape, device=mask.device), mask), generator)
        return torch.where(explore, random, greedy)


class SquashedGaussianActor(Policy):
    """SAC's actor for Box actions: a = low + (tanh(u) + 1) / 2 * (high - low), u ~ N(mu(s), sigma(s)).

    The distribution is a ``TransformedDistribution`` (tanh, then the affine map to the bounds), so
    log-probabilities include the change-of-variables correction.
    """

    LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0

    has_distribution = True

    def __init__(self, observation_space: gym.Space, action_space: spaces.Space, config: PolicyConfig) -> None:
        super().__init__(observation_space, action_space, config)
        self._register_action_bounds(action_space)
        self.trunk = mlp(self.feature_dim, config.hidden_sizes, 2 * self.action_dim, config.activation, out_gain=0.01)

    def _mean_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean_log_std(self.trunk(self.features(obs)))

    @classmethod
    def mean_log_std(cls, trunk_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The trunk's output (*, 2 * action_dim) -> the Gaussian's mean and clamped log std, (*, action_dim) each."""
        mean, log_std = trunk_out.chunk(2, dim=-1)
        return mean, log_std.clamp(cls.LOG_STD_MIN, cls.LOG_STD_MAX)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        """The distribution of actions in env units (tanh, then the affine map to the bounds)."""
        return self._squashed(obs, to_bounds=True)

    def squashed_distribution(self, obs: torch.Tensor) -> Distribution:
        """The distribution of the squashed action ``u = tanh(x)`` in [-1, 1], before the affine map to the bounds.

        SAC measures entropy and log-probabilities here (as the authors' code and SB3 do), so that its entropy
        target means the same whatever the bounds: in env units every log-probability is shifted by
        ``-sum(log(scale))``, which makes a target of ``-action_dim`` unreachable for narrow bounds and a
        near-deterministic policy for wide ones. ``to_env(u)`` is the action the env gets.
        """
        return self._squashed(obs, to_bounds=False)

    def _squashed(self, obs: torch.Tensor, to_bounds: bool) -> Distribution:
        mean, log_std = self._mean_log_std(obs)
        squash: list[Transform] = [TanhTransform(cache_size=1)]
        if to_bounds:
            squash.append(AffineTransform(self.action_loc, self.action_scale, cache_size=1))
        return squashed_gaussian(mean, log_std, squash)

    def to_env(self, unit: torch.Tensor) -> torch.Tensor:
        """Squashed actions in [-1, 1] -> env units."""
        return self.action_loc + self.action_scale * unit

    def to_unit(self, actions: torch.Tensor) -> torch.Tensor:
        """Env units -> the squashed [-1, 1] space (what the critics see)."""
        return (actions - self.action_loc) / self.action_scale

    def act_scores(self, obs: torch.Tensor) -> torch.Tensor:
        return self._mean_log_std(obs)[0]

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.action_loc + self.action_scale * torch.tanh(self.act_scores(obs))

    def sample_action(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.sample_of(*self._mean_log_std(obs), generator)

    def sample_of(
        self, mean: torch.Tensor, log_std: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """:meth:`sample_action`'s draw from ``generator`` given the Gaussian's ``mean`` and clamped ``log_std``
        (B, action_dim each; :meth:`mean_log_std`), squashed into the bounds: what N seeds' stacked actor outputs
        are drawn through, each seed's rows with its own generator."""
        u = mean + log_std.exp() * torch.randn(mean.shape, generator=generator)
        return self.action_loc + self.action_scale * torch.tanh(u)


def squashed_gaussian(mean: torch.Tensor, log_std: torch.Tensor, squash: list[Transform]) -> Distribution:
    """N(mean, exp(log_std)) (*, action_dim) pushed through the transforms ``squash`` (tanh, and the affine map to
    the bounds when in env units), one event over the last dim."""
    base = Normal(mean, log_std.exp(), validate_args=False)
    return Independent(TransformedDistribution(base, squash, validate_args=False), 1, validate_args=False)


def squashed_sample(dist: Distribution, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``dist.rsample()`` and its log-probability for a :func:`squashed_gaussian` ``dist``, with the standard normal
    draw given: ``noise`` of the distribution's shape (what ``Normal.rsample`` draws from torch's global generator,
    ``torch.empty(shape).normal_()``), so the same arithmetic as ``rsample`` then ``log_prob``."""
    assert isinstance(dist, Independent) and isinstance(dist.base_dist, TransformedDistribution)
    base = dist.base_dist.base_dist
    assert isinstance(base, Normal)
    sample = base.loc + noise * base.scale
    for transform in dist.base_dist.transforms:
        sample = transform(sample)  # cached: log_prob inverts it exactly
    return sample, dist.log_prob(sample)


class CategoricalActor(Policy):
    """A categorical over logits for Discrete actions (SAC, BC, IQL)."""

    has_distribution = True

    def __init__(self, observation_space: gym.Space, action_space: spaces.Space, config: PolicyConfig) -> None:
        super().__init__(observation_space, action_space, config)
        self.logits = mlp(self.feature_dim, config.hidden_sizes, self.action_dim, config.activation, out_gain=0.01)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        return Categorical(logits=self.act_scores(obs), validate_args=False)

    def act_scores(self, obs: torch.Tensor) -> torch.Tensor:
        """Logits (B, n), illegal actions (:meth:`action_mask`) at the dtype's lowest value."""
        return masked_logits(self.logits(self.features(obs)), self.action_mask(obs))

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.act_scores(obs).argmax(dim=-1)

    def sample_action(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return sample_categorical(self.act_scores(obs), generator)


class GaussianActor(Policy):
    """A diagonal Gaussian over Box actions with a state-independent log std (behavioural cloning).

    The deterministic action is the mean (clipped to the bounds only when sent to the env or exported).
    """

    has_distribution = True

    def __init__(self, observation_space: gym.Space, action_space: spaces.Space, config: PolicyConfig) -> None:
        super().__init__(observation_space, action_space, config)
        self.mean = mlp(self.feature_dim, config.hidden_sizes, self.action_dim, config.activation, out_gain=0.01)
        self.log_std = nn.Parameter(torch.full((self.action_dim,), float(config.log_std_init)))

    def distribution(self, obs: torch.Tensor) -> Distribution:
        mean = self.act_scores(obs)
        normal = Normal(mean, self.log_std.exp().expand_as(mean), validate_args=False)
        return Independent(normal, 1, validate_args=False)

    def act_scores(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mean(self.features(obs))

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.act_scores(obs)

    def sample_action(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        mean = self.act_scores(obs)
        return mean + self.log_std.exp() * torch.randn(mean.shape, generator=generator)


class DeterministicActor(Policy):
    """a = low + (tanh(mu(s)) + 1) / 2 * (high - low): TD3's actor. ``sample_action`` adds Gaussian noise
    of ``noise_std`` (a share of the half-range) and clips to the bounds."""

    def __init__(
        self, observation_space: gym.Space, action_space: spaces.Space, config: PolicyConfig, noise_std: float = 0.1
    ) -> None:
        super().__init__(observation_space, action_space, config)
        self._register_action_bounds(action_space)
        self.noise_std = noise_std
        self.mu = mlp(self.feature_dim, config.hidden_sizes, self.action_dim, config.activation, out_gain=0.01)

    def act_scores(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mu(self.features(obs))

    def unit_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The action rescaled to [-1, 1]: (B, action_dim)."""
        return torch.tanh(self.act_scores(obs))

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.action_loc + self.action_scale * self.unit_action(obs)

    def sample_action(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        unit = self.unit_action(obs)
        noisy = (unit + self.noise_std * torch.randn(unit.shape, generator=generator)).clamp(-1.0, 1.0)
        return self.action_loc + self.action_scale * noisy


def stochastic_actor(observation_space: gym.Space, action_space: spaces.Space, config: PolicyConfig) -> Policy:
    """A categorical actor for Discrete actions, a Gaussian one for Box actions (BC, IQL)."""
    if isinstance(action_space, spaces.Discrete):
        return CategoricalActor(observation_space, action_space, config)
    return GaussianActor(observation_space, action_space, config)
