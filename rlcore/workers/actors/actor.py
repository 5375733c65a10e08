"""An actor: its own vector env and a copy of the policy, rolling out fixed-length trajectories.

The same class runs in the learner's process (``runner: dev``), in a subprocess (``local``) and in a Dask
task (``dask``). It is built from plain data (:class:`ActorSpec`: the params tree as JSON and seeds), so
any process can build it; weights arrive as one flat float64 vector with a version number
(``rlcore.workers.weights.WeightsCodec``), and trajectories leave as a dict of NumPy arrays
(``rlcore.data.rollouts.TrajectoryBatch`` names them).

An actor process serves every seed of a run with ``train.seeds`` (:class:`SeedActors`): one :class:`Actor` per
seed, each with its own envs, episodes, recurrent state and sampling stream, taking turns; every trajectory is
tagged with its seed's lane (the seed's index among the run's seeds).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from rlcore.algos.base import ActorLearnerConfig
from rlcore.envs.observations import obs_tensor
from rlcore.envs.stepping import VectorStepper
from rlcore.envs.vector import make_vector_env
from rlcore.nets.policies import ActorCritic
from rlcore.nets.policy import reset_state
from rlcore.params import validate_params
from rlcore.registry import algorithm_class
from rlcore.workers.weights import WeightsCodec


@dataclass(frozen=True)
class ActorSpec:
    """What a process needs to build actor ``actor_id``: the run's params tree (JSON-safe) and its seeds."""

    params: dict[str, Any]
    actor_id: int
    env_seed: int
    """The actor's envs reset with ``env_seed`` (sub-env ``i``: ``+ i``): in the training seed range."""
    sampling_seed: int
    """Seeds the actor's action sampling (a subprocess's torch RNG)."""


class Actor:
    """Rolls out ``algo.trajectory_length`` vector steps of ``env.num_envs`` envs per :meth:`rollout`; episodes
    continue across trajectories."""

    def __init__(self, spec: ActorSpec) -> None:
        params = validate_params(spec.params, source=f"actor {spec.actor_id}")
        self.actor_id = spec.actor_id
        assert isinstance(params.algo, ActorLearnerConfig), "actors belong to actor-learner algorithms"
        self.trajectory_length = params.algo.trajectory_length
        self.env = make_vector_env(params.env, params.env.num_envs)
        self.stepper = VectorStepper(self.env, owner=f"actor {spec.actor_id}")
        algo_cls = algorithm_class(params.algo.name)
        # Actor-learner algorithms (IMPALA) act with an actor-critic: its heads read step_features.
        self.policy = cast(
            ActorCritic,
            algo_cls.make_policy(
                self.env.single_observation_space, self.env.single_action_space, params.policy, params.algo
            ),
        )
        self.codec = WeightsCodec(self.policy)
        self.version = -1
        self.stepper.reset(spec.env_seed)
        num_envs = params.env.num_envs
        self._running_return = np.zeros(num_envs)
        self._running_length = np.zeros(num_envs, dtype=np.int64)
        self.state = self.policy.initial_state(num_envs)
        """A recurrent policy's state (``policy.memory``), carried across trajectories as episodes are; None."""

    def set_weights(self, version: int, flat: np.ndarray) -> None:
        self.codec.decode_into(self.policy, flat)
        self.version = version

    @torch.no_grad()
    def rollout(self) -> dict[str, Any]:
        """One trajectory: arrays named as :class:`rlcore.data.rollouts.TrajectoryBatch`'s fields, (T, N) or
        (T + 1, N, ...) for ``obs``, plus ``version``, ``actor_id`` and the returns and lengths of the episodes
        that ended in it (``episode_returns``, ``episode_lengths``)."""
        steps, stepper = self.trajectory_length, self.stepper
        obs, actions, log_probs, rewards, terminated, ended, valid = [], [], [], [], [], [], []
        finished_returns: list[float] = []
        finished_lengths: list[int] = []
        initial_state = None if self.state is None else self.state.numpy().copy()
        for _ in range(steps):
            obs_t = obs_tensor(stepper.obs)  # in its storage dtype: frames travel as uint8
            features, next_state = self.policy.step_features(obs_t, self.state)
            dist = self.policy.distribution_of(features, self.policy.action_mask(obs_t))
            action = dist.sample()
            step = stepper.step(action.numpy())
            self.state = reset_state(self.policy, next_state, ~step.valid)  # the step after a reset starts anew
            obs.append(obs_t.numpy())
            actions.append(action.numpy())
            log_probs.append(dist.log_prob(action).numpy())
            rewards.append(step.rewards.astype(np.float32))
            terminated.append(step.terminated)
            ended.append(step.ended)
            valid.append(step.valid)
            self._running_return += step.rewards * step.valid
            self._running_length += step.valid
            if step.ended.any():
                finished_returns += self._running_return[step.ended].tolist()
                finished_lengths += self._running_length[step.ended].tolist()
                self._running_return[step.ended] = 0.0
                self._running_length[step.ended] = 0
        obs.append(obs_tensor(stepper.obs).numpy())
        return {
            "obs": np.stack(obs),
            "actions": np.stack(actions),
            "behaviour_log_probs": np.stack(log_probs),
            "rewards": np.stack(rewards),
            "terminated": np.stack(terminated),
            "episode_end": np.stack(ended),
            "valid": np.stack(valid),
            "initial_state": initial_state,
            "version": self.version,
            "actor_id": self.actor_id,
            "episode_returns": np.asarray(finished_returns, dtype=np.float64),
            "episode_lengths": np.asarray(finished_lengths, dtype=np.int64),
        }

    def close(self) -> None:
        self.env.close()


Streams = Callable[[int], AbstractContextManager[None]]
"""Lane -> a context in which torch's global generator is that lane's (its seed's) sampling stream."""


class SeedActors:
    """Actor ``actor_id`` of every seed an actor process serves: lane ``k`` is seed ``k``'s :class:`Actor`, built
    from its own spec, initialized and rolling out in lane ``k``'s sampling stream: ``streams`` (``runner: dev``:
    the learner's seeds' generator states), or by default streams of its own, each seeded with its spec's
    ``sampling_seed`` as a one-seed actor process seeds torch."""

    def __init__(self, specs: Sequence[ActorSpec], streams: Streams | None = None) -> None:
        self.actors: list[Actor] = []
        self._seeded: list[torch.Tensor] = [
            torch.Generator().manual_seed(spec.sampling_seed).get_state() for spec in specs
        ]
        self._streams = streams or self._own_stream
        self._turn = 0
        try:
            for lane, spec in enumerate(specs):
                with self._streams(lane):  # the policy's initialization draws from it, as in a one-seed actor
                    self.actors.append(Actor(spec))
        except BaseException:
            self.close()
            raise

    def next_lane(self, active: Callable[[int], bool]) -> int | None:
        """The next lane in turn that ``active`` admits (a finished seed's is not); None when none is."""
        for _ in range(len(self.actors)):
            lane = self._turn % len(self.actors)
            self._turn += 1
            if active(lane):
                return lane
        return None

    def rollout(self, lane: int) -> dict[str, Any]:
        """Lane ``lane``'s next trajectory (:meth:`Actor.rollout`), tagged with ``lane``."""
        with self._streams(lane):
            return {**self.actors[lane].rollout(), "lane": lane}

    @contextlib.contextmanager
    def _own_stream(self, lane: int) -> Iterator[None]:
        """Torch's global generator in lane ``lane``'s own seeded state for the block."""
        other = torch.get_rng_state()
        torch.set_rng_state(self._seeded[lane])
        try:
            yield
        finally:
            self._seeded[lane] = torch.get_rng_state()
            torch.set_rng_state(other)

    def close(self) -> None:
        for actor in self.actors:
            actor.close()
