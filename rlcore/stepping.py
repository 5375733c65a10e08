"""Stepping a vector env with next-step autoreset: the one place that knows which steps are real transitions.

After a step that ends an episode, gymnasium returns that episode's last observation and resets the env
on the *next* step (its action is ignored, its reward is 0). Those reset steps belong to no episode:
every loop (on-policy, off-policy, collection) masks them out with :attr:`VectorStep.valid`.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rlcore.actions import to_env_actions


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
    """(N,) bool: False where the step only reset an env that had ended (not a transition)."""
    ended: np.ndarray
    """(N,) bool: an episode ended at this step (terminated or truncated); computed once, read per env."""


class VectorStepper:
    """Steps ``env`` and tracks the autoreset mask; holds the current observations."""

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        self.env = env
        self.action_space = env.single_action_space
        self.obs: np.ndarray = np.empty(0)
        self._prev_ended = np.zeros(env.num_envs, dtype=bool)

    def reset(self, seed: int) -> np.ndarray:
        """Reset every env (sub-env ``i`` with ``seed + i``); returns the observations."""
        obs, _ = self.env.reset(seed=seed)
        self.obs = np.asarray(obs)
        self._prev_ended[:] = False
        return self.obs

    def step(self, actions: torch.Tensor | np.ndarray) -> VectorStep:
        """Send ``actions`` (policy convention) to the envs; returns the step with its validity mask."""
        actions = np.asarray(actions)
        next_obs, rewards, terminated, truncated, _ = self.env.step(to_env_actions(actions, self.action_space))
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        step = VectorStep(
            obs=self.obs,
            actions=actions,
            rewards=np.asarray(rewards, dtype=np.float64),
            next_obs=np.asarray(next_obs),
            terminated=terminated,
            truncated=truncated,
            valid=~self._prev_ended,
            ended=terminated | truncated,
        )
        self._prev_ended = step.ended
        self.obs = step.next_obs
        return step
