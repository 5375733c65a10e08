"""Algorithm families: the roles every member of a family fills, as typed contracts.

A family is three things: a config base class (the keys its trainer reads), an abstract class with the
methods its trainer calls, and the trainer (``rlcore/trainers/<family>.py``). An algorithm declares its
family by subclassing it, and is one file in ``rlcore/algos/`` plus its import and its class in
``rlcore.registry``.

| family     | config base       | trainer calls                                         | trainer             |
|------------|-------------------|-------------------------------------------------------|---------------------|
| on-policy  | OnPolicyConfig    | ``advantages(rollout)``, ``update(rollout, ...)``     | trainers/on_policy  |
| off-policy | OffPolicyConfig   | ``explore(obs, ...)``, ``update(batch, ...)``         | trainers/off_policy |
| offline    | OfflineConfig     | ``update(batch, ...)``, ``validate(held_out)``        | trainers/offline    |
| actor-learner | ActorLearnerConfig | ``update(trajectories, ...)``                     | trainers/actor_learner |
| population | PopulationConfig  | ``members()``, ``ask(seed, ...)``, ``tell(tasks, results)`` | trainers/population |

Every algorithm's optimizers, extra networks (critics, targets), tensors (SAC's log alpha) and step
counter are saved and restored by :meth:`Algorithm.state_dict` from its attributes: nothing to write by hand.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, Generic, Literal, TypeVar

import torch
from gymnasium import spaces
from pydantic import Field, model_validator
from torch import nn

from rlcore.algos.population_tasks import RolloutResult, RolloutTask
from rlcore.config.sections import AlgoConfig, PolicyConfig
from rlcore.data.rollouts import RolloutBuffer, TrajectoryBatch
from rlcore.nets.policy import Policy
from rlcore.nets.precision import Precision
from rlcore.nets.value_transforms import ValueHeadConfig
from rlcore.objectives.bc_regularizer import BehavioralCloningConfig
from rlcore.objectives.returns import gae
from rlcore.reward_signals import RewardSignals, RewardSignalsConfig

__all__ = [
    "AlgoConfig",
    "Algorithm",
    "OffPolicyAlgorithm",
    "OffPolicyConfig",
    "OfflineAlgorithm",
    "OfflineConfig",
    "ActorLearnerAlgorithm",
    "ActorLearnerConfig",
    "OnPolicyAlgorithm",
    "OnPolicyConfig",
    "PopulationAlgorithm",
    "PopulationConfig",
]


class OnPolicyConfig(AlgoConfig):
    """Keys of the on-policy loop: how long a rollout is and how its advantages are estimated."""

    n_steps: int = Field(128, ge=1)
    """Vector steps per rollout; a rollout holds ``n_steps * env.num_envs`` transitions."""
    gamma: float = Field(0.99, gt=0, le=1)
    """Discount gamma of the env's reward in GAE's advantages and returns (also the extrinsic signal's discount with
    ``reward_signals``)."""
    gae_lambda: float = Field(0.95, ge=0, le=1)
    """GAE's lambda: 0 is the one-step TD error, 1 the Monte Carlo return minus the value."""
    value_head: ValueHeadConfig = Field(default_factory=ValueHeadConfig)
    """The critic's output: a scalar (default), in signed-sqrt units, or categorical over a support."""
    grad_accumulation: int = Field(1, ge=1, le=1024)
    """Minibatches whose gradients are summed (each weighted by its share of the samples) before one optimizer
    step: k minibatches of ``batch_size / k`` give the step of one minibatch of ``batch_size`` in a k-th of the
    activation memory (PPO); A2C splits its one batch into k parts."""
    behavioral_cloning: BehavioralCloningConfig | None = None
    """An auxiliary BC loss on a dataset's demonstrations, its weight decaying to 0
    (``rlcore.objectives.bc_regularizer``)."""
    reward_signals: RewardSignalsConfig | None = None
    """Rewards beside the env's: ``extrinsic``, ``rnd``, ``curiosity``, ``gail``, each with a ``strength`` and a
    ``gamma`` (``rlcore.reward_signals``); null: the env's reward alone."""

    @model_validator(mode="after")
    def _one_extrinsic_discount(self) -> OnPolicyConfig:
        extrinsic = self.reward_signals.extrinsic.gamma if self.reward_signals is not None else None
        if extrinsic is not None and extrinsic != self.gamma:
            raise ValueError(
                f"algo.reward_signals.extrinsic.gamma: the extrinsic discount is algo.gamma ({self.gamma}), "
                f"got {extrinsic}: set algo.gamma (or leave extrinsic.gamma out)"
            )
        return self


class OffPolicyConfig(AlgoConfig):
    """Keys shared by replay-based algorithms (DQN, SAC): the buffer, the update cadence, target networks."""

    gamma: float = Field(0.99, gt=0, le=1)
    """Discount gamma of the TD targets: an n-step target's bootstrap is discounted by gamma**k for the k steps it
    spans (by 0 when the episode terminated within them)."""
    n_step: int = Field(1, ge=1)
    """Steps folded into each TD target (n-step returns)."""
    buffer_size: int = Field(100_000, ge=1)
    """Transitions kept in the replay ring."""
    batch_size: int = Field(256, ge=1)
    """Transitions per gradient step."""
    learning_starts: int = Field(1_000, ge=0)
    """Env steps of uniformly random actions before the first update (warm-up)."""
    train_freq: int = Field(1, ge=1)
    """Env steps (summed over envs) collected between two update phases."""
    gradient_steps_per_sample: float = Field(1.0, gt=0, le=1000)
    """Gradient steps per collected env step (update-to-data ratio, at most 1000); fractions carry over between
    phases."""
    tau: float = Field(1.0, gt=0, le=1)
    """Target-network update: Polyak averaging with this weight; 1.0 copies the weights (a hard update)."""
    target_update_interval: int = Field(1, ge=1)
    """Gradient steps between target-network updates."""
    max_grad_norm: float | None = Field(10.0, gt=0)
    """Each gradient step's norm over the network's parameters is clipped to this; null: no clipping."""

    @model_validator(mode="after")
    def _buffer_holds_a_batch(self) -> OffPolicyConfig:
        if self.buffer_size < self.batch_size:
            raise ValueError(
                f"algo.buffer_size: must be >= algo.batch_size ({self.batch_size}) so a batch can be sampled, "
                f"got {self.buffer_size}"
            )
        return self


class OfflineConfig(AlgoConfig):
    """Keys of the offline loop: gradient steps on minibatches of a fixed dataset."""

    lr: float = Field(3e-4, gt=0)
    """Adam learning rate of the algorithm's networks, constant (IQL: the actor's starts here and follows
    ``actor_lr_schedule``)."""
    batch_size: int = Field(256, ge=1)
    """Dataset transitions per gradient step."""


class ActorLearnerConfig(AlgoConfig):
    """Keys of the actor-learner loop: actors roll out a lagging copy of the policy while one learner updates it.

    Each actor steps its own ``env.num_envs`` envs, so ``num_actors * env.num_envs`` envs run in all. An actor
    sends a trajectory of ``trajectory_length`` vector steps tagged with the version of the weights it acted
    with; the learner updates on ``batch_trajectories`` of them at a time and publishes new weights after each
    update.
    """

    gamma: float = Field(0.99, gt=0, le=1)
    """Discount gamma of the V-trace targets and policy-gradient advantages."""
    num_actors: int = Field(2, ge=1, le=256)
    """Actor processes (or Dask tasks, or in-process actors with ``runner: dev``)."""
    trajectory_length: int = Field(32, ge=1)
    """Vector steps per trajectory."""
    batch_trajectories: int = Field(2, ge=1)
    """Trajectories per learner update."""
    queue_size: int = Field(8, ge=1)
    """Trajectories received and waiting for the learner; while it is full the learner reads no more, and
    actors block on sending."""
    max_policy_lag: int = Field(8, ge=0)
    """A trajectory made with weights more than this many updates old is dropped (counted in
    ``train/dropped_trajectories``); V-trace corrects the lag below it."""
    runner: Literal["dev", "local", "dask"] = "local"
    """Where actors run: ``dev`` in the learner's process one after another (reproducible, for debugging),
    ``local`` one subprocess each, ``dask`` one long-running task each on a Dask cluster
    (``deploy.dask_address``, or a LocalCluster of ``num_actors`` workers on 127.0.0.1 started for the run)."""
    actor_timeout_seconds: float = Field(120.0, gt=0)
    """An actor that holds work but sends nothing for this long is reported and replaced."""
    value_head: ValueHeadConfig = Field(default_factory=ValueHeadConfig)
    """The critic's output: a scalar (default), in signed-sqrt units, or categorical over a support."""


class PopulationConfig(AlgoConfig):
    """Keys of the population loop: each iteration the algorithm asks for rollout tasks (perturbations of its
    parameters, or its particles' segments), workers run them, and the algorithm is told the results.

    Where the tasks run is ``runner``, as for actor-learner runs: ``dev`` in the learner's process, ``local`` in
    ``num_workers`` spawned subprocesses, ``dask`` as tasks on ``deploy.dask_address`` (or on a LocalCluster of
    ``num_workers`` processes on 127.0.0.1 started for the run). Results are ordered by task, not by arrival.
    """

    runner: Literal["dev", "local", "dask"] = "local"
    """Where rollout tasks run: ``dev`` in the learner's process, ``local`` in ``num_workers`` spawned subprocesses,
    ``dask`` as tasks on ``deploy.dask_address`` (or on a LocalCluster of ``num_workers`` processes started for the
    run); a lost worker's tasks are run again."""
    num_workers: int = Field(2, ge=1, le=256)
    """Worker processes of the ``local`` runner, and of the LocalCluster of the ``dask`` runner."""
    worker_timeout_seconds: float = Field(120.0, gt=0)
    """A ``local`` worker that holds a task but answers nothing this long is replaced; its tasks are re-issued."""


def accumulation_groups(minibatches: Iterable[torch.Tensor], size: int) -> Iterator[list[torch.Tensor]]:
    """Consecutive groups of ``size`` minibatches (the last may be smaller): the minibatches whose gradients one
    optimizer step sums (``algo.grad_accumulation``)."""
    group: list[torch.Tensor] = []
    for minibatch in minibatches:
        group.append(minibatch)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


ConfigT = TypeVar("ConfigT", bound=AlgoConfig)
PolicyT = TypeVar("PolicyT", bound=Policy)


class Algorithm(ABC, Generic[ConfigT, PolicyT]):
    """What every algorithm is: a policy it improves, its config, and the state it saves.

    Class attributes: ``name`` (its ``algo.name``), ``Config`` (its params section), ``action_spaces``
    (the action-space types it can act in; others are refused before a run starts).
    """

    name: ClassVar[str]
    Config: ClassVar[type[AlgoConfig]]
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]]
    capabilities: ClassVar[frozenset[str]] = frozenset()
    """Optional params it honours: ``memory`` (``policy.memory``), ``precision`` (``train.precision`` other than
    fp32), ``cuda`` (``train.device: cuda``), ``action_mask`` (``env.action_mask``: its losses and targets read the
    masked policy), ``multiagent`` (a PettingZoo env, each agent's steps rows of the rollout:
    ``rlcore.envs.multiagent``). Others are refused at load (``rlcore.params``)."""

    @classmethod
    def check_params(cls, params: Any) -> None:
        """Refuse (``ConfigError``, one line) params this algorithm cannot run with, before anything is written (at
        the start of training; ES: rollouts need a step budget)."""

    def __init__(self, policy: PolicyT, config: ConfigT) -> None:
        self.policy = policy
        self.config = config
        self.gradient_steps = 0
        """Optimizer steps taken so far (saved; drives delayed and periodic target updates)."""
        self.skipped_steps = 0
        """Optimizer steps skipped for a non-finite loss or gradient (see :meth:`optimizer_step`)."""
        self.consecutive_skips = 0
        self._pending_skip = False
        self.precision = Precision()
        """How losses are computed (``rlcore.nets.precision``): float32 unless the session says otherwise
        (:meth:`compute_in`)."""

    def compute_in(self, precision: Precision) -> None:
        """Compute the losses' forward passes in ``precision`` (``train.precision``), scaling them for fp16; only
        algorithms that list ``precision`` in :attr:`capabilities` are given anything but fp32. Called before a
        resume loads :meth:`state_dict` (which holds fp16's loss scale)."""
        self.precision = precision

    @staticmethod
    @abstractmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: Any
    ) -> Policy:
        """The acting network this algorithm trains (what evaluation, collection and export use)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything but the policy that a resume needs: networks, optimizers, tensors, the step counter."""
        state: dict[str, Any] = {"gradient_steps": self.gradient_steps}
        if scaler := self.precision.state_dict():  # fp16's loss scale; absent otherwise (other checkpoints unchanged)
            state["grad_scaler"] = scaler
        for key, value in vars(self).items():
            if key == "policy":
                continue
            if isinstance(value, nn.Module | torch.optim.Optimizer):
                state[key] = value.state_dict()
            elif isinstance(value, torch.Tensor):
                state[key] = value.detach().clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.gradient_steps = int(state["gradient_steps"])
        self.precision.load_state_dict(state.get("grad_scaler", {}))
        for key, value in vars(self).items():
            if key == "policy":
                continue
            if isinstance(value, nn.Module | torch.optim.Optimizer):
                value.load_state_dict(state[key])
            elif isinstance(value, torch.Tensor):
                with torch.no_grad():
                    value.copy_(state[key])

    def optimizer_step(
        self,
        optimizer: torch.optim.Optimizer,
        loss: torch.Tensor,
        parameters: Iterable[nn.Parameter] | None = None,
        max_grad_norm: float | None = None,
    ) -> bool:
        """One gradient step on ``loss``, clipping the gradient norm of ``parameters`` when asked.

        A non-finite loss (or clipped gradient norm) is skipped, never applied: one such step would make every
        weight NaN. Skips are counted (``skipped_steps``, ``consecutive_skips``); the trainer stops the run when
        they persist. Returns whether the step was applied.
        """
        optimizer.zero_grad(set_to_none=True)
        self.accumulate(loss)
        return self.apply_gradients(optimizer, parameters, max_grad_norm)

    def accumulate(self, loss: torch.Tensor) -> bool:
        """Add the gradients of ``loss`` to those held (gradient accumulation: several minibatches' losses, each
        weighted by its share of the samples, then one :meth:`apply_gradients`); at fp16 the loss is multiplied by
        the loss scale first. A non-finite loss is not back-propagated: the pending step is skipped (counted) and
        False returned."""
        if not bool(torch.isfinite(loss)):
            self._pending_skip = True
            return self._skip()
        self.precision.scaler.scale(loss).backward()
        return True

    def apply_gradients(
        self,
        optimizer: torch.optim.Optimizer,
        parameters: Iterable[nn.Parameter] | None = None,
        max_grad_norm: float | None = None,
    ) -> bool:
        """One optimizer step on the accumulated gradients, clipping their norm when asked; a non-finite norm is
        skipped (counted). At fp16 the gradients are unscaled first, and a step whose gradients overflowed is
        skipped (counted) while the loss scale halves. The gradients are not zeroed: the next step zeroes them
        first."""
        if self._pending_skip:
            self._pending_skip = False
            optimizer.zero_grad(set_to_none=True)
            return False
        scaler = self.precision.scaler
        if max_grad_norm is not None and parameters is not None:
            scaler.unscale_(optimizer)  # the norm of the true gradients (a no-op below fp16)
            norm = clip_grad_norm_(parameters, max_grad_norm)
            if not bool(torch.isfinite(norm)):
                optimizer.zero_grad(set_to_none=True)
                if scaler.is_enabled():
                    scaler.update()  # overflowed at this scale: the next step uses half of it
                return self._skip()
        if scaler.is_enabled():
            scale = scaler.get_scale()
            scaler.step(optimizer)  # skipped by the scaler when a gradient is not finite
            scaler.update()
            if scaler.get_scale() < scale:
                return self._skip()
        else:
            optimizer.step()
        self.consecutive_skips = 0
        return True

    def abandon_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Drop the accumulated gradients of a step that will not be taken (PPO's target-KL stop inside a group of
        ``grad_accumulation`` minibatches), with a skip pending from a non-finite loss among them: neither counts."""
        self._pending_skip = False
        optimizer.zero_grad(set_to_none=True)

    def _skip(self) -> bool:
        self.skipped_steps += 1
        self.consecutive_skips += 1
        return False


class OnPolicyAlgorithm(Algorithm[ConfigT, PolicyT]):
    """Learns from the rollout its own policy just collected (PPO; A2C, IMPALA next)."""

    def __init__(self, policy: PolicyT, config: ConfigT) -> None:
        super().__init__(policy, config)
        self.reward_signals = RewardSignals.of(policy, config)
        """``algo.reward_signals``' networks, or None; the trainer calls ``reward_signals.learn`` on each rollout."""

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.reward_signals is not None:  # absent otherwise: checkpoints of earlier runs still load
            state["reward_signals"] = self.reward_signals.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.reward_signals is not None:
            self.reward_signals.load_state_dict(state["reward_signals"])

    @torch.no_grad()
    def advantages(self, rollout: RolloutBuffer) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantages, value targets), each (T, N), for a filled rollout. GAE unless a member chooses
        another estimator from ``rlcore.objectives.returns``."""
        cfg = self.config
        assert isinstance(cfg, OnPolicyConfig)
        return gae(
            rollout.rewards,
            rollout.values,
            rollout.next_values,
            rollout.terminated,
            rollout.episode_end,
            cfg.gamma,
            cfg.gae_lambda,
        )

    @abstractmethod
    def update(self, rollout: RolloutBuffer, progress: float, generator: torch.Generator) -> dict[str, float]:
        """Improve the policy on one rollout (advantages filled in). ``progress`` in [0, 1] of the budget."""


class OffPolicyAlgorithm(Algorithm[ConfigT, PolicyT]):
    """Learns from a replay of past transitions (DQN, SAC)."""

    @torch.no_grad()
    def explore(self, obs: torch.Tensor, progress: float, generator: torch.Generator) -> torch.Tensor:
        """Actions to collect with, (B,) or (B, action_dim), in the policy's convention. Default: sample."""
        return self.policy.sample_action(obs, generator)

    @abstractmethod
    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        """One gradient step on a replay batch (``obs``, ``actions``, ``rewards``, ``next_obs``, ``discounts``)."""


class OfflineAlgorithm(Algorithm[ConfigT, PolicyT]):
    """Learns from a fixed dataset, never stepping an env (BC, TD3+BC, IQL)."""

    batch_fields: tuple[str, ...] = ("obs", "actions", "rewards", "next_obs", "terminated")
    """The dataset fields :meth:`update` reads: a minibatch gathers these only."""

    @abstractmethod
    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        """One gradient step on a dataset batch (the fields :attr:`batch_fields`, (B, ...) each)."""

    @torch.no_grad()
    def validate(self, held_out: dict[str, torch.Tensor]) -> dict[str, float]:
        """Metrics on held-out episodes, recorded with every checkpoint; none unless a member defines them."""
        return {}


class ActorLearnerAlgorithm(Algorithm[ConfigT, PolicyT]):
    """Learns from trajectories that actors made with an older copy of its policy (IMPALA)."""

    @abstractmethod
    def update(self, batch: TrajectoryBatch, progress: float) -> dict[str, float]:
        """One learner step on a batch of trajectories (behaviour log-probabilities and weight versions inside)."""


class PopulationAlgorithm(Algorithm[ConfigT, PolicyT]):
    """Learns from whole rollouts of a population of parameter vectors (ES's perturbations, SVPG's particles).

    Per iteration the trainer publishes :meth:`members` (their weights, once), runs the tasks :meth:`ask`
    returns on its runner, and hands the results, in task order, to :meth:`tell`. ``policy`` is what evaluation,
    checkpoints and export see: ES's mean, or a copy of SVPG's best particle. ``iterations`` is saved.
    """

    def __init__(self, policy: PolicyT, config: ConfigT) -> None:
        super().__init__(policy, config)
        self.iterations = 0
        """Iterations told so far: the weights version workers see, and with the run's seed the seed of ``ask``."""

    @abstractmethod
    def members(self) -> list[Policy]:
        """The policies whose weights the tasks need, in the order tasks name them (all of one architecture)."""

    @abstractmethod
    def ask(self, seed: int, first_env_seed: int) -> list[RolloutTask]:
        """This iteration's tasks. ``seed`` is the iteration's own (from the run's seed and ``iterations``);
        ``first_env_seed`` the first training-range env seed the tasks may use (``rlcore.common.seeds``)."""

    @abstractmethod
    def tell(self, tasks: list[RolloutTask], results: list[RolloutResult], progress: float) -> dict[str, float]:
        """Update from the results of :meth:`ask`'s tasks (``results[i]`` is ``tasks[i]``'s); counts the iteration."""

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "iterations": self.iterations}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.iterations = int(state["iterations"])


@torch.no_grad()
def clip_grad_norm_(parameters: Iterable[nn.Parameter], max_norm: float) -> torch.Tensor:
    """``nn.utils.clip_grad_norm_`` (2-norm) with its arithmetic, bitwise, for gradients on one device in one dtype
    (others: that function itself); returns the norm before clipping. Its grouping of the gradients by device and
    dtype and its three wrapped calls cost more than their arithmetic on a small network (measured: ~1/6 of a DQN
    CartPole gradient step)."""
    grads = [param.grad for param in parameters if param.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    first = grads[0]
    if any(grad.device != first.device or grad.dtype != first.dtype or grad.is_sparse for grad in grads):
        return nn.utils.clip_grad_norm_(grads, max_norm)
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm
