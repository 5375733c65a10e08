"""Acting networks: what evaluation and export need from every algorithm, over raw observations.

Every policy takes *raw* observations: normalization is a module inside it, so a saved or exported
policy carries its statistics and nobody ships them beside it. The interface (:class:`Policy`):

- ``act_scores(obs)``: (B, action_dim) what the greedy action is read from: logits (categorical policies; for
  MultiDiscrete the sub-actions' logits side by side, (B, sum(nvec)); for MultiBinary one logit per bit),
  Q-values (DQN), the Gaussian mean (PPO, BC, IQL), or the pre-tanh mean (SAC, TD3+BC);
- ``deterministic_action(obs)``: the greedy action in the policy's convention (``rlcore.envs.actions``): (B,) int64
  (Discrete), (B, k) int64 (MultiDiscrete, MultiBinary) or (B, action_dim) float (Box);
- ``sample_action(obs, generator)``: a stochastic action for evaluation and exploration;
- ``distribution(obs)``: the action distribution of a stochastic policy (PPO's, SAC's, BC's, IQL's actors).

A policy may carry a recurrent state between steps: ``initial_state(batch)`` is None for a stateless
policy (all of today's), else a (B, *state_shape) tensor; :meth:`Policy.act` takes and returns it, and
:func:`reset_state` puts the rows of envs that just started a new episode back to the initial state.
Evaluation and collection act through ``act``, so a stateful policy works there unchanged.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import (
    AffineTransform,
    Bernoulli,
    Categorical,
    Distribution,
    Independent,
    Normal,
    TanhTransform,
    Transform,
    TransformedDistribution,
)
from torch.distributions.constraints import Constraint

from rlcore.common.errors import ConfigError
from rlcore.config.sections import PolicyConfig
from rlcore.envs.actions import sub_action_sizes
from rlcore.nets.blocks import ObsNormalizer, mlp
from rlcore.nets.encoders import Encoder, build_encoder, float_mask
from rlcore.nets.value_transforms import ValueHead, ValueHeadConfig


def action_dim(action_space: spaces.Space) -> int:
    """The width of a policy's action output: n (Discrete), sum(nvec) (MultiDiscrete: every sub-action's logits),
    n (MultiBinary: a logit per bit), the flat size (Box). How actions are stored:
    ``rlcore.envs.actions.action_layout``."""
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(action_space.nvec.sum())
    assert action_space.shape is not None
    return int(np.prod(action_space.shape))


def require_bounded(action_space: spaces.Space, algo_name: str) -> None:
    """Refuse (one line) a Box with an infinite bound for an algorithm whose actions are squashed into the bounds
    (a tanh, then ``loc + scale * u``): with ``inf`` or ``-inf`` bounds ``loc`` is NaN and training is NaN."""
    if isinstance(action_space, spaces.Box) and not (
        np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))
    ):
        raise ConfigError(f"algo.name: {algo_name} squashes actions into their bounds, but {action_space} is unbounded")


class Policy(nn.Module):
    """Base of every acting network (see the module docstring)."""

    discrete: bool
    obs_normalizer: ObsNormalizer
    action_loc: torch.Tensor
    action_scale: torch.Tensor
    has_distribution: ClassVar[bool] = False
    """Whether :meth:`distribution` is defined (stochastic actors)."""

    def __init__(self, observation_space: gym.Space, action_space: spaces.Space, config: PolicyConfig) -> None:
        super().__init__()
        self.config = config
        self.observation_space = observation_space
        self.action_space = action_space
        self.discrete = isinstance(action_space, spaces.Discrete)
        self.action_dim = action_dim(action_space)
        self.obs_normalizer = ObsNormalizer(
            tuple(observation_space.shape or ()),
            config.obs_clip,
            config.normalize_obs,
            mask=float_mask(observation_space),
        )
        self.encoder = build_encoder(observation_space, config.encoder, config.image_channels)
        self.feature_dim = self.encoder.out_features
        """Width of :meth:`features`: what the heads read."""

    def _register_action_bounds(self, action_space: spaces.Space) -> None:
        """Buffers ``action_loc`` and ``action_scale``: a = loc + scale * u maps u in [-1, 1] onto the Box bounds."""
        assert isinstance(action_space, spaces.Box)
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise ValueError(
                f"{type(self).__name__} squashes actions into their bounds, but {action_space} is unbounded"
            )
        low = torch.as_tensor(action_space.low.reshape(-1), dtype=torch.float32)
        high = torch.as_tensor(action_space.high.reshape(-1), dtype=torch.float32)
        self.register_buffer("action_loc", (high + low) / 2)
        self.register_buffer("action_scale", (high - low) / 2)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Raw observations (B, *obs_shape), normalized and encoded (``rlcore.nets.encoders``): (B, feature_dim)."""
        return self.encoder(self.obs_normalizer(obs))

    def new_encoder(self) -> Encoder:
        """A freshly initialized encoder of the same architecture as this policy's (for an algorithm's critics)."""
        return build_encoder(self.observation_space, self.config.encoder, self.config.image_channels)

    def act_scores(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def distribution(self, obs: torch.Tensor) -> Distribution:
        """The action distribution of a stochastic policy (DQN's and TD3's policies have none)."""
        raise NotImplementedError(f"{type(self).__name__} has no action distribution")

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def sample_action(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        raise NotImplementedError

    def initial_state(self, batch_size: int) -> torch.Tensor | None:
        """The recurrent state at an episode's start, (B, *state_shape); None: the policy has no state."""
        return None

    def act(
        self,
        obs: torch.Tensor,
        state: torch.Tensor | None,
        deterministic: bool,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(actions, next state) for ``obs`` (B, *obs_shape) and the state after the previous step.
        A stateful policy overrides this; a stateless one passes the state through."""
        actions = self.deterministic_action(obs) if deterministic else self.sample_action(obs, generator)
        return actions, state

    def greedy(
        self, obs: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(greedy action, scores, next state): what the exported graph computes. A stateful policy overrides it."""
        return self.deterministic_action(obs), self.act_scores(obs), state


def reset_state(policy: Policy, state: torch.Tensor | None, started: np.ndarray) -> torch.Tensor | None:
    """``state`` with the rows of ``started`` (B,) bool put back to the initial state.

    With next-step autoreset, an env starts its new episode on the step after the one that ended the
    last (the reset step, whose action is ignored): pass that step's ``~valid``.
    """
    if state is None or not started.any():
        return state
    rows = torch.as_tensor(started)
    fresh = policy.initial_state(int(rows.numel()))
    assert fresh is not None
    return torch.where(rows.view(-1, *([1] * (state.dim() - 1))), fresh, state)


def _sample_categorical(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)


_SampleShape = torch.Size | list[int] | tuple[int, ...]


class MultiCategorical(Distribution):
    """Independent categoricals, one per sub-action, the i-th over ``nvec[i]`` choices (MultiDiscrete actions).

    torch.distributions has no batched categorical over rows of different sizes, so the logits (B, sum(nvec)) are
    split by ``nvec`` into one :class:`Categorical` each. The sub-actions are independent: ``log_prob`` and
    ``entropy`` are sums over them, (B,); samples and the ``mode`` (each sub-action's argmax) are (B, k) int64.
    """

    arg_constraints: ClassVar[dict[str, Constraint]] = {}  # none of its own: each Categorical has its logits

    def __init__(self, logits: torch.Tensor, nvec: tuple[int, ...]) -> None:
        self.nvec = nvec
        self.parts = [Categorical(logits=chunk, validate_args=False) for chunk in logits.split(nvec, dim=-1)]
        super().__init__(logits.shape[:-1], torch.Size([len(nvec)]), validate_args=False)

    def sample(self, sample_shape: _SampleShape = torch.Size()) -> torch.Tensor:  # noqa: B008 (torch's signature)
        return torch.stack([part.sample(sample_shape) for part in self.parts], dim=-1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``value``: (..., k) int64 sub-actions -> (...,) summed log-probabilities."""
        return torch.stack(
            [part.log_prob(v) for part, v in zip(self.parts, value.unbind(-1), strict=True)], dim=-1
        ).sum(-1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([part.entropy() for part in self.parts], dim=-1).sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return torch.stack([part.logits.argmax(dim=-1) for part in self.parts], dim=-1)


class MultiBernoulli(Independent):
    """Independent Bernoullis over logits (B, n), one per bit (MultiBinary actions): ``Independent(Bernoulli, 1)``
    with actions as int64 0/1, like every other integer action (``rlcore.envs.actions``), and ``mode`` = logits > 0."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits
        super().__init__(Bernoulli(logits=logits, validate_args=False), 1, validate_args=False)

    def sample(self, sample_shape: _SampleShape = torch.Size()) -> torch.Tensor:  # noqa: B008 (torch's signature)
        return super().sample(sample_shape).long()

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``value``: (..., n) 0/1 (int64 or float) -> (...,) summed log-probabilities."""
        return super().log_prob(value.to(self.logits.dtype))

    @property
    def mode(self) -> torch.Tensor:
        return (self.logits > 0).long()


class SubActions:
    """Independent sub-actions read from one score vector (MultiDiscrete, MultiBinary): what an actor does with
    its scores (B, action_dim) to get a distribution, the greedy action and a sample (B, k) int64."""

    def distribution(self, scores: torch.Tensor) -> Distribution:
        raise NotImplementedError

    def greedy(self, scores: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def sample(self, scores: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        raise NotImplementedError


class CategoricalSubActions(SubActions):
    """A categorical per sub-action: the scores are the sub-actions' logits side by side, (B, sum(nvec))."""

    def __init__(self, nvec: tuple[int, ...]) -> None:
        self.nvec = nvec

    def distribution(self, scores: torch.Tensor) -> Distribution:
        return MultiCategorical(scores, self.nvec)

    def greedy(self, scores: torch.Tensor) -> torch.Tensor:
        return torch.stack([chunk.argmax(dim=-1) for chunk in scores.split(self.nvec, dim=-1)], dim=-1)

    def sample(self, scores: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        chunks = scores.split(self.nvec, dim=-1)
        return torch.stack([_sample_categorical(chunk, generator) for chunk in chunks], dim=-1)


class BernoulliSubActions(SubActions):
    """A Bernoulli per bit: the scores are the bits' logits, (B, n); greedy is logit > 0."""

    def distribution(self, scores: torch.Tensor) -> Distribution:
        return MultiBernoulli(scores)

    def greedy(self, scores: torch.Tensor) -> torch.Tensor:
        return (scores > 0).long()

    def sample(self, scores: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        return (torch.rand(scores.shape, generator=generator) < torch.sigmoid(scores)).long()


def sub_actions(action_space: spaces.Space) -> SubActions | None:
    """The sub-action head of a MultiDiscrete or MultiBinary space; None for Discrete and Box."""
    if isinstance(action_space, spaces.MultiBinary):
        return BernoulliSubActions()
    sizes = sub_action_sizes(action_space)
    return None if sizes is None else CategoricalSubActions(sizes)


class ActorCritic(Policy):
    """Actor and critic MLPs on one shared encoder (the on-policy and actor-learner families: PPO, A2C, IMPALA).

    The encoder is shared (as SB3's and CleanRL's Atari PPO share their CNN): one pass over the pixels serves both
    heads, and the critic's loss, the denser signal, trains the features the actor reads. For vector observations
    it is a flatten with no weights, so the actor and critic networks are as separate as they always were.

    The critic is a :class:`rlcore.nets.value_transforms.ValueHead`: a scalar output by default, optionally in
    Pohlen et al.'s transformed units or categorical over a support (``algo.value_head``); :meth:`value` always
    answers in reward units and :meth:`value_loss` is the head's own loss.

    Discrete actions: a categorical over logits. MultiDiscrete: a categorical per sub-action
    (:class:`MultiCategorical`); MultiBinary: a Bernoulli per bit (:class:`MultiBernoulli`). Box actions: a
    diagonal Gaussian with a learned, state-independent log standard deviation; sampled actions are clipped to the
    bounds only when sent to the env, so log-probabilities stay those of the sampled values.
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
        return self.distribution_of(self.features(obs))

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
        scores = self.actor(features)
        actions = self.greedy_of(scores) if deterministic else self.sample_of(scores, generator)
        return actions, next_state

    def greedy(
        self, obs: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        features, next_state = self.step_features(obs, state)
        scores = self.actor(features)
        return self.greedy_of(scores), scores, next_state

    def distribution_of(self, features: torch.Tensor) -> Distribution:
        """The action distribution for :meth:`features` (B, feature_dim): a caller that also needs the critic
        (PPO's update, rollouts) encodes the observations once for both heads."""
        scores = self.actor(features)
        if self.sub_actions is not None:
            return self.sub_actions.distribution(scores)
        if self.discrete:
            return Categorical(logits=scores, validate_args=False)
        normal = Normal(scores, self.log_std.exp().expand_as(scores), validate_args=False)
        return Independent(normal, 1, validate_args=False)

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
        return self.actor(self.features(obs))

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
            return _sample_categorical(scores, generator)
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
        """Q-values, (B, n_actions)."""
        out = self.q(self.features(obs))
        if not self.dueling:
            return out
        value, advantage = out[:, :1], out[:, 1:]
        return value + advantage - advantage.mean(dim=-1, keepdim=True)

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.act_scores(obs).argmax(dim=-1)

    def sample_action(
        self, obs: torch.Tensor, generator: torch.Generator | None = None, epsilon: float | None = None
    ) -> torch.Tensor:
        """Epsilon-greedy: a uniformly random action with probability ``epsilon``."""
        epsilon = self.eval_epsilon if epsilon is None else epsilon
        greedy = self.deterministic_action(obs)
        explore = torch.rand(greedy.shape, generator=generator) < epsilon
        random = torch.randint(self.action_dim, greedy.shape, generator=generator)
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
        mean, log_std = self.trunk(self.features(obs)).chunk(2, dim=-1)
        return mean, log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)

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
        base = Normal(mean, log_std.exp(), validate_args=False)
        return Independent(TransformedDistribution(base, squash, validate_args=False), 1, validate_args=False)

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
        mean, log_std = self._mean_log_std(obs)
        u = mean + log_std.exp() * torch.randn(mean.shape, generator=generator)
        return self.action_loc + self.action_scale * torch.tanh(u)


class CategoricalActor(Policy):
    """A categorical over logits for Discrete actions (SAC, BC, IQL)."""

    has_distribution = True

    def __init__(self, observation_space: gym.Space, action_space: spaces.Space, config: PolicyConfig) -> None:
        super().__init__(observation_space, action_space, config)
        self.logits = mlp(self.feature_dim, config.hidden_sizes, self.action_dim, config.activation, out_gain=0.01)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        return Categorical(logits=self.act_scores(obs), validate_args=False)

    def act_scores(self, obs: torch.Tensor) -> torch.Tensor:
        return self.logits(self.features(obs))

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.act_scores(obs).argmax(dim=-1)

    def sample_action(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return _sample_categorical(self.act_scores(obs), generator)


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
