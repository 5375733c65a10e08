"""A test helper (importable as ``slow_env`` from the tests folder): ``slow_env.SlowSteps``, a wrapper (for
``env.wrappers``) whose every step takes ``seconds`` longer, so a rollout task lasts long enough to be killed in.
In a ``multiprocessing`` child (a rollout worker or an actor) its first step creates the file ``$SLOW_ENV_MARKER``:
the moment a worker is inside a task."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym


class SlowSteps(gym.Wrapper):
    def __init__(self, env: gym.Env, seconds: float = 0.1) -> None:
        super().__init__(env)
        self.seconds = seconds

    def step(self, action: Any) -> Any:
        marker = os.environ.get("SLOW_ENV_MARKER")
        if marker and multiprocessing.parent_process() is not None:
            Path(marker).touch()
        time.sleep(self.seconds)
        return self.env.step(action)
