"""A rollout worker: the envs, the policy copy and the published weights of one process, on which tasks run.

Built from the run's params tree (plain JSON-safe data), so any process can build one: the learner's own
(``runner: dev``), a spawned subprocess (``local``), a Dask worker (``dask``: one per worker process, cached
by the tree in :func:`cached_worker`, so a process builds its envs, policy and noise table once per run).
Weights arrive once per iteration as ``(version, (members, size) float64)`` — every member's ``state_dict`` as
one flat vector (``rlcore.workers.weights.WeightsCodec``): one member for ES (the mean), one per particle for SVPG.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import torch

from rlcore.algos.population_tasks import BatchedGreedy, ParticleEnvs, RolloutResult, RolloutTask
from rlcore.envs.stepping import VectorStepper
from rlcore.envs.vector import make_vector_env
from rlcore.nets.policy import Policy
from rlcore.params import validate_params
from rlcore.registry import algorithm_class
from rlcore.workers.weights import WeightsCodec


class RolloutWorker:
    """Implements ``rlcore.algos.population_tasks.WorkerContext`` for the tasks it runs."""

    def __init__(self, tree: dict[str, Any]) -> None:
        params = validate_params(tree, source="rollout worker")
        self.params = params
        self.num_envs = params.env.num_envs
        probe = make_vector_env(params.env, 1)  # the spaces, as every other process sees them
        observation_space, action_space = probe.single_observation_space, probe.single_action_space
        probe.close()
        algo_cls = algorithm_class(params.algo.name)
        with torch.random.fork_rng():  # its initial weights are overwritten: leave the process's RNG as it was
            self.policy = algo_cls.make_policy(observation_space, action_space, params.policy, params.algo)
        self.codec = WeightsCodec(self.policy)
        self.version = -1
        self._weights: np.ndarray | None = None
        self._loaded_member = -1
        self._greedy: BatchedGreedy | None = None
        self._episode_steppers: dict[int, tuple[VectorStepper, VectorStepper]] = {}
        self._particles: dict[int, ParticleEnvs] = {}

    def load(self, version: int, weights: np.ndarray) -> None:
        """The weights of ``version``: (members, size) float64 (a no-op when this version is loaded)."""
        if version == self.version:
            return
        self._weights = np.asarray(weights, dtype=np.float64).reshape(-1, self.codec.size)
        self.version = version
        self._loaded_member = -1

    def member(self, index: int) -> Policy:
        if self._weights is None:
            raise RuntimeError("a rollout task ran before any weights were published")
        if index != self._loaded_member:
            self.codec.decode_into(self.policy, self._weights[index])
            self._loaded_member = index
        return self.policy

    def batched_greedy(self) -> BatchedGreedy:
        if self._greedy is None:
            self._greedy = BatchedGreedy(self.policy)
        return self._greedy

    def episode_steppers(self, count: int) -> tuple[VectorStepper, VectorStepper]:
        if count not in self._episode_steppers:
            env = self.params.env
            self._episode_steppers[count] = (
                VectorStepper(make_vector_env(env, count)),
                VectorStepper(make_vector_env(env, count)),
            )
        return self._episode_steppers[count]

    def particle_envs(self, particle: int, env_seed: int) -> ParticleEnvs:
        if particle not in self._particles:
            stepper = VectorStepper(make_vector_env(self.params.env, self.num_envs))
            self._particles[particle] = ParticleEnvs(stepper, env_seed)
        return self._particles[particle]

    def run(self, task: RolloutTask) -> RolloutResult:
        return task.run(self)

    def close(self) -> None:
        for plus, minus in self._episode_steppers.values():
            plus.env.close()
            minus.env.close()
        for envs in self._particles.values():
            envs.stepper.env.close()
        self._episode_steppers.clear()
        self._particles.clear()


CACHED_RUNS = 2
"""Runs whose worker a process keeps (Dask worker processes outlive runs, and may serve two at once)."""
_CACHED: dict[str, RolloutWorker] = {}
"""This process's workers, by the hash of their run's params tree, least recently used first."""


def cached_worker(tree_json: str) -> RolloutWorker:
    """The worker of the params tree ``tree_json`` (JSON text), built on first use in this process; beyond
    :data:`CACHED_RUNS` runs the least recently used worker is closed."""
    key = hashlib.sha256(tree_json.encode()).hexdigest()
    worker = _CACHED.pop(key, None) or RolloutWorker(json.loads(tree_json))
    _CACHED[key] = worker
    while len(_CACHED) > CACHED_RUNS:
        _CACHED.pop(next(iter(_CACHED))).close()
    return worker
