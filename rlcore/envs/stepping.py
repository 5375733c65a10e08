"""Stepping a vector env with next-step autoreset: the one place that knows which steps are real transitions.

After a step that ends an episode, gymnasium returns that episode's last observation and resets the env
on the *next* step (its action is ignored, its reward is 0). Those reset steps belong to no episode:
every loop (on-policy, off-policy, collection) masks them out with :attr:`VectorStep.valid`.

Every observation, reward and (continuous) action that passes here is checked to be finite: a NaN or infinite
value (broken physics from env parameters, a wrapper's bug, a policy with non-finite weights) stops the run with a
one-line :class:`NonFiniteError` naming the env, the sub-env and the step, before it is trained on or scored.
Evaluation (``rlcore.evaluation.evaluator``) steps its envs itself and uses the same check (:func:`check_finite`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rlcore.common.errors import RLCoreError
from rlcore.envs.actions import to_env_actions


class NonFiniteError(RLCoreError):
    """An env returned a NaN or infinite observation or reward (or a policy chose such an action): one line
    naming the env, the sub-env and the step; never trained on or scored (the CLI exits with status 2)."""


def finite(values: np.ndarray) -> bool:
    """Whether every value is finite; integer and boolean arrays (discrete actions, uint8 frames) always are.
    The hot-path test: one ``np.isfinite`` over the batch."""
    return values.dtype.kind not in "fc" or bool(np.isfinite(values).all())


def _first_bad_row(values: np.ndarray) -> int:
    rows = np.asarray(values).reshape(len(values), -1)
    return int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])


def _shown(row: np.ndarray) -> str:
    flat = np.asarray(row, dtype=np.float64).reshape(-1)
    text = np.array2string(flat[:8], precision=4, separator=", ")
    return text[:-1] + ", ...]" if flat.size > 8 else text


def check_finite(
    env_id: str,
    where: Callable[[int], str],
    observations: np.ndarray | None = None,
    rewards: np.ndarray | None = None,
    actions: np.ndarray | None = None,
) -> None:
    """Raise :class:`NonFiniteError` unless every given batch (one row per sub-env) is finite; ``where(i)`` says
    where sub-env ``i`` is (its index, the step, an evaluation's setting and episode seed)."""
    for what, values in (("observation", observations), ("reward", rewards), ("action", actions)):
        if values is None or finite(values):
            continue
        row = _first_bad_row(values)
        if what == "action":
            raise NonFiniteError(
                f"{env_id} ({where(row)}): the policy chose a non-finite action {_shown(values[row])} (its weights "
                "or its inputs are NaN or infinite: a diverged or corrupted policy)"
            )
        raise NonFiniteError(
            f"{env_id} ({where(row)}): the env returned a non-finite {what} {_shown(values[row])}; an env must "
            "return finite observations and rewards (broken physics from the env's parameters? a bug in a wrapper "
            "or in the env?)"
        )


def env_name(env: gym.vector.VectorEnv) -> str:
    """The id a vector env was made from (what errors name)."""
    spec = getattr(env, "spec", None)
    return str(getattr(spec, "id", None) or "the env")


@dataclass(frozen=True)
class VectorStep:
    """One step of ``N`` envs. ``obs`` (N, *obs_shape) is what the actions were chosen on."""

    obs: np.ndarray
    actions: np.ndarray
    """(N,) or (N, action_dim), in the policy's convention (flat; as chosen, before clipping)."""
    rewards: np.ndarray
    """(N,) float64."""
    next_obs: np.ndarray
    """(N, *obs_shape): the observation after the step; at an episode's end its last observation."""
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray
    """(N,) bool: False where the step only reset an env that had ended (not a transition), or where the env's
    ``info["valid"]`` says so (a multi-agent env's agent that left before the others, ``rlcore.envs.multiagent``)."""
    ended: np.ndarray
    """(N,) bool: an episode ended at this step (terminated or truncated); computed once, read per env."""


class VectorStepper:
    """Steps ``env`` and tracks the autoreset mask; holds the current observations. Refuses non-finite values
    (:func:`check_finite`); ``owner`` names who steps it in those errors (e.g. ``"actor 2"``)."""

    def __init__(self, env: gym.vector.VectorEnv, owner: str | None = None) -> None:
        self.env = env
        self.env_id = env_name(env)
        self.owner = owner
        self.action_space = env.single_action_space
        self.obs: np.ndarray = np.empty(0)
        self.env_steps = 0
        """Env steps taken (``num_envs`` per step) since :meth:`reset`, counted from its ``env_steps``."""
        self._prev_ended = np.zeros(env.num_envs, dtype=bool)

    def reset(self, seed: int, env_steps: int = 0) -> np.ndarray:
        """Reset every env (sub-env ``i`` with ``seed + i``); returns the observations. ``env_steps``: the count
        errors report steps from (a trainer's steps so far)."""
        obs, _ = self.env.reset(seed=seed)
        self.obs = np.asarray(obs)
        self._prev_ended[:] = False
        self.env_steps = env_steps
        if not finite(self.obs):
            check_finite(self.env_id, lambda index: self._where(index, "reset at env step"), observations=self.obs)
        return self.obs

    def _where(self, index: int, what: str = "env step") -> str:
        owner = f" of {self.owner}" if self.owner else ""
        return f"sub-env {index}{owner}, {what} {self.env_steps}"

    def step(self, actions: torch.Tensor | np.ndarray) -> VectorStep:
        """Send ``actions`` (policy convention) to the envs; returns the step with its validity mask."""
        actions = np.asarray(actions)
        if not finite(actions):  # NaN actions would come back as the env's NaN observations, blamed on the env
            check_finite(self.env_id, self._where, actions=actions)
        next_obs, rewards, terminated, truncated, info = self.env.step(to_env_actions(actions, self.action_space))
        rewards, next_obs = np.asarray(rewards, dtype=np.float64), np.asarray(next_obs)
        if not (finite(rewards) and finite(next_obs)):
            check_finite(self.env_id, self._where, next_obs, rewards)
        self.env_steps += len(actions)
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        step = VectorStep(
            obs=self.obs,
            actions=actions,
            rewards=rewards,
            next_obs=next_obs,
            terminated=terminated,
            truncated=truncated,
            valid=~self._prev_ended & np.asarray(info.get("valid", True), dtype=bool),
            ended=terminated | truncated,
        )
        self._prev_ended = step.ended
        self.obs = step.next_obs
        return step
