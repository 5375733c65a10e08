"""Rollout tasks: what a population learner asks a worker to run, and the few numbers (or the short segment)
the worker sends back.

A task is plain data (a frozen dataclass: a few integers and floats), picklable to any process; its
:meth:`RolloutTask.run` does the work on the :class:`WorkerContext` of the process it lands in (its envs,
its copy of the policy, the published weights). Two kinds:

| task              | learner | runs                                                   | returns                      |
|-------------------|---------|--------------------------------------------------------|------------------------------|
| `PerturbedPairs`  | ES      | K antithetic pairs theta +- sigma * eps, side by side  | `PairResults`: returns,      |
|                   |         |                                                        | lengths, obs moments         |
| `ParticleSegment` | SVPG    | ``n_steps`` vector steps of one particle (its envs go  | `SegmentResult`: the segment |
|                   |         | on from the last segment)                              |                              |

A task depends only on its own fields and the published weights, never on which process runs it or what
that process ran before (a particle's envs aside: they continue in the worker that holds them), so a lost
worker's tasks can be run again anywhere with the same result.

The seeds of ``train.seeds`` share one pool of workers: each seed's task travels as a :class:`SeedTask`, which
runs it on that seed's rows of the published weights and keeps its state (a particle's envs) apart from the other
seeds', so the task gives the result it gives in the one-seed run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn.utils import parameters_to_vector

from rlcore.algos.noise_table import noise_rows, noise_table
from rlcore.envs.observations import obs_tensor
from rlcore.envs.stepping import VectorStep, VectorStepper
from rlcore.nets.policy import Policy


class ParticleEnvs:
    """One particle's envs in a worker: the stepper and the returns and lengths of its episodes in progress
    (episodes continue from one segment to the next, as the on-policy trainer's do)."""

    def __init__(self, stepper: VectorStepper, env_seed: int) -> None:
        self.stepper = stepper
        self.stepper.reset(env_seed)
        num_envs = stepper.env.num_envs
        self.running_return = np.zeros(num_envs)
        self.running_length = np.zeros(num_envs, dtype=np.int64)

    def track(self, step: VectorStep) -> tuple[list[float], list[int]]:
        """Count ``step`` into the episodes in progress; the returns and lengths of those it ended."""
        self.running_return += step.rewards * step.valid
        self.running_length += step.valid
        if not step.ended.any():
            return [], []
        returns = self.running_return[step.ended].tolist()
        lengths = self.running_length[step.ended].tolist()
        self.running_return[step.ended] = 0.0
        self.running_length[step.ended] = 0
        return returns, lengths


class WorkerContext(Protocol):
    """What a task needs from the worker it runs in (``rlcore.workers.population.worker.RolloutWorker``)."""

    num_envs: int
    """``env.num_envs``: the envs of each SVPG particle."""

    def member(self, index: int) -> Policy:
        """The worker's policy holding member ``index``'s published weights (ES: 0, the mean; SVPG: a particle)."""
        ...

    def batched_greedy(self) -> BatchedGreedy:
        """Greedy actions of many parameter vectors of the worker's policy at once."""
        ...

    def episode_steppers(self, count: int) -> tuple[VectorStepper, VectorStepper]:
        """Two vector envs of ``count`` envs each (the + and - halves of antithetic pairs), kept between tasks."""
        ...

    def particle_envs(self, particle: int, env_seed: int) -> ParticleEnvs:
        """Particle ``particle``'s envs, built (and reset with ``env_seed``) the first time this worker runs it."""
        ...


class RolloutResult(ABC):
    """What every result tells the trainer: env steps taken and the training episodes that ended."""

    @property
    @abstractmethod
    def env_steps(self) -> int: ...

    @property
    @abstractmethod
    def episode_returns(self) -> np.ndarray:
        """(E,) float64 undiscounted returns of the episodes that ended."""

    @property
    @abstractmethod
    def episode_lengths(self) -> np.ndarray:
        """(E,) int64."""


class RolloutTask(ABC):
    """One unit of rollout work (see the module docstring)."""

    @property
    def affinity(self) -> int | None:
        """A worker slot this task prefers (``affinity % workers``): where its state lives. None: any worker."""
        return None

    @abstractmethod
    def run(self, worker: WorkerContext) -> RolloutResult: ...


class _Greedy(nn.Module):
    """``forward`` = the policy's greedy action, so :func:`torch.func.functional_call` can call it."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy.deterministic_action(obs)


class BatchedGreedy:
    """Greedy actions of ``B`` copies of one policy, copy ``b`` with its own flat parameter vector, in one call:
    :func:`torch.func.vmap` over :func:`torch.func.functional_call` (works for any policy; buffers such as the
    observation normalizer's statistics are the policy's own, shared by every copy). About 10x fewer seconds per
    env step than one forward pass per env on CartPole-sized networks."""

    def __init__(self, policy: Policy) -> None:
        self.module = _Greedy(policy)
        named = list(self.module.named_parameters())
        self.names = [name for name, _ in named]
        self.shapes = [tuple(p.shape) for _, p in named]
        self.sizes = [p.numel() for _, p in named]
        self._call = vmap(self._one)

    def _one(self, params: dict[str, torch.Tensor], obs: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, params, (obs.unsqueeze(0),)).squeeze(0)

    @torch.no_grad()
    def __call__(self, flat: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """``flat`` (B, dim) parameter vectors (``parameters_to_vector`` order), ``obs`` (B, *obs_shape) ->
        (B,) or (B, action_dim) greedy actions."""
        batch = flat.shape[0]
        chunks = flat.split(self.sizes, dim=1)
        params = {
            name: chunk.reshape(batch, *shape)
            for name, chunk, shape in zip(self.names, chunks, self.shapes, strict=True)
        }
        actions: torch.Tensor = self._call(params, obs)
        return actions


@dataclass(frozen=True)
class PairResults(RolloutResult):
    """K antithetic pairs' rollouts; column 0 is theta + sigma * eps, column 1 theta - sigma * eps."""

    first_pair: int
    returns: np.ndarray
    """(K, 2) float64 undiscounted returns."""
    lengths: np.ndarray
    """(K, 2) int64 env steps of each rollout."""
    aborted: np.ndarray
    """(K, 2) bool: stopped by the rollout step budget before the episode ended."""
    obs_mean: np.ndarray
    """(K, 2, *obs_shape) float64 mean of the observations each rollout acted on (``lengths`` of them)."""
    obs_var: np.ndarray
    """(K, 2, *obs_shape) float64 their (population) variance."""

    @property
    def env_steps(self) -> int:
        return int(self.lengths.sum())

    @property
    def episode_returns(self) -> np.ndarray:
        return self.returns.reshape(-1)

    @property
    def episode_lengths(self) -> np.ndarray:
        return self.lengths.reshape(-1)


@dataclass(frozen=True)
class PerturbedPairs(RolloutTask):
    """ES: pairs ``first_pair .. first_pair + K - 1``, pair ``j`` perturbed by ``noise[offsets[j] : + dim]``.

    Both rollouts of pair ``j`` start from env seed ``env_seed + j`` (common random numbers: the pair differs
    only by the sign of its perturbation, as in Maze). Actions are greedy. A rollout ends with its first episode,
    or after ``max_steps`` env steps (aborted; null: no budget beyond the env's own time limit).
    """

    first_pair: int
    offsets: tuple[int, ...]
    env_seed: int
    noise_std: float
    noise_seed: int
    noise_table_size: int
    max_steps: int | None

    def run(self, worker: WorkerContext) -> PairResults:
        policy = worker.member(0)
        base = parameters_to_vector(policy.parameters()).detach()
        table = noise_table(self.noise_seed, self.noise_table_size)
        eps = torch.from_numpy(noise_rows(table, self.offsets, base.numel()))
        flat = torch.cat([base + self.noise_std * eps, base - self.noise_std * eps])  # (2K, dim): + rows, then -
        pairs = len(self.offsets)
        plus, minus = worker.episode_steppers(pairs)
        plus.reset(self.env_seed)
        minus.reset(self.env_seed)
        greedy = worker.batched_greedy()
        rows = 2 * pairs
        returns = np.zeros(rows)
        lengths = np.zeros(rows, dtype=np.int64)
        done = np.zeros(rows, dtype=bool)
        obs_sum = np.zeros((rows, *plus.obs.shape[1:]))
        obs_squares = np.zeros_like(obs_sum)
        steps = 0
        while not done.all() and (self.max_steps is None or steps < self.max_steps):
            obs = np.concatenate([plus.obs, minus.obs])
            active = ~done
            seen = obs[active].astype(np.float64)
            obs_sum[active] += seen
            obs_squares[active] += seen * seen
            actions = greedy(flat, obs_tensor(obs)).numpy()
            first, second = plus.step(actions[:pairs]), minus.step(actions[pairs:])
            rewards = np.concatenate([first.rewards, second.rewards])
            returns[active] += rewards[active]
            lengths[active] += 1
            done |= np.concatenate([first.ended, second.ended])  # a row that ended before stays done
            steps += 1
        count = np.maximum(lengths, 1).reshape(-1, *([1] * (obs_sum.ndim - 1)))
        mean = obs_sum / count
        var = np.maximum(obs_squares / count - mean * mean, 0.0)

        def paired(array: np.ndarray) -> np.ndarray:  # (2K, ...) + rows then - rows -> (K, 2, ...)
            return np.stack([array[:pairs], array[pairs:]], axis=1)

        return PairResults(self.first_pair, paired(returns), paired(lengths), paired(~done), paired(mean), paired(var))


@dataclass(frozen=True)
class SegmentResult(RolloutResult):
    """One particle's segment of ``T`` vector steps over ``N`` envs (``rlcore.data.rollouts.TrajectoryBatch``'s
    layout)."""

    particle: int
    obs: np.ndarray
    """(T + 1, N, *obs_shape) in the storage dtype (``rlcore.envs.observations``: float32, or e.g. uint8 frames); the
    last
    row is the observation after the last step (the bootstrap)."""
    actions: np.ndarray
    """(T, N) int64 or (T, N, action_dim), the policy's convention."""
    rewards: np.ndarray
    """(T, N) float32."""
    terminated: np.ndarray
    episode_end: np.ndarray
    valid: np.ndarray
    """(T, N) bool each; ``valid`` is False at autoreset steps."""
    finished_returns: np.ndarray
    finished_lengths: np.ndarray

    @property
    def env_steps(self) -> int:
        return int(self.rewards.size)

    @property
    def episode_returns(self) -> np.ndarray:
        return self.finished_returns

    @property
    def episode_lengths(self) -> np.ndarray:
        return self.finished_lengths


@dataclass(frozen=True)
class ParticleSegment(RolloutTask):
    """SVPG: ``n_steps`` vector steps of particle ``particle``, actions sampled from it with a generator seeded
    by ``sampling_seed``. Its envs live in the worker that runs it (tasks prefer that worker: ``affinity``); a
    worker that has none builds them and resets them with ``env_seed + particle * env.num_envs``."""

    particle: int
    n_steps: int
    env_seed: int
    sampling_seed: int

    @property
    def affinity(self) -> int | None:
        return self.particle

    @torch.no_grad()
    def run(self, worker: WorkerContext) -> SegmentResult:
        policy = worker.member(self.particle)
        envs = worker.particle_envs(self.particle, self.env_seed + self.particle * worker.num_envs)
        stepper = envs.stepper
        generator = torch.Generator().manual_seed(self.sampling_seed)
        obs, actions, rewards, terminated, ended, valid = [], [], [], [], [], []
        finished_returns: list[float] = []
        finished_lengths: list[int] = []
        for _ in range(self.n_steps):
            obs_t = obs_tensor(stepper.obs)  # in its storage dtype: frames stay uint8
            action = policy.sample_action(obs_t, generator)
            step = stepper.step(action.numpy())
            obs.append(obs_t.numpy())
            actions.append(action.numpy())
            rewards.append(step.rewards.astype(np.float32))
            terminated.append(step.terminated)
            ended.append(step.ended)
            valid.append(step.valid)
            episode_returns, episode_lengths = envs.track(step)
            finished_returns += episode_returns
            finished_lengths += episode_lengths
        obs.append(obs_tensor(stepper.obs).numpy())
        return SegmentResult(
            self.particle,
            np.stack(obs),
            np.stack(actions),
            np.stack(rewards),
            np.stack(terminated),
            np.stack(ended),
            np.stack(valid),
            np.asarray(finished_returns, dtype=np.float64),
            np.asarray(finished_lengths, dtype=np.int64),
        )


class _SeedView:
    """A worker as one seed's task sees it: member ``i`` is row ``first_member + i`` of the published weights, and
    particle ``p``'s envs are the worker's particle ``first_member + p``."""

    def __init__(self, worker: WorkerContext, first_member: int) -> None:
        self.worker = worker
        self.first_member = first_member
        self.num_envs = worker.num_envs

    def member(self, index: int) -> Policy:
        return self.worker.member(self.first_member + index)

    def batched_greedy(self) -> BatchedGreedy:
        return self.worker.batched_greedy()

    def episode_steppers(self, count: int) -> tuple[VectorStepper, VectorStepper]:
        return self.worker.episode_steppers(count)  # reset by every task: nothing carries over between seeds

    def particle_envs(self, particle: int, env_seed: int) -> ParticleEnvs:
        return self.worker.particle_envs(self.first_member + particle, env_seed)


@dataclass(frozen=True)
class SeedTask(RolloutTask):
    """Seed ``seed``'s ``task`` among the tasks of several seeds served by the same workers: its members are rows
    ``first_member ..`` of the published weights (the seeds' members stacked in seed order)."""

    seed: int
    first_member: int
    task: RolloutTask

    @property
    def affinity(self) -> int | None:
        own = self.task.affinity
        return None if own is None else self.first_member + own

    def run(self, worker: WorkerContext) -> RolloutResult:
        return self.task.run(_SeedView(worker, self.first_member))
