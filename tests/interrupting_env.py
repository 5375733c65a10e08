"""A test helper (importable as ``interrupting_env`` from the tests folder): ``interrupting_env.CtrlC``, a wrapper
(for ``env.wrappers``) that raises ``KeyboardInterrupt`` as Ctrl-C in a terminal would, when ``$RLCORE_TEST_CTRL_C``
says so: ``step:<n>`` at a sub-env's n-th step, ``checkpoint`` at the first step once a run folder of the working
directory holds a checkpoint. Unset, it changes nothing, so the same params then resume the interrupted run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym


class CtrlC(gym.Wrapper):
    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        when = os.environ.get("RLCORE_TEST_CTRL_C", "")
        if when.startswith("step:") and self.steps >= int(when.removeprefix("step:")):
            raise KeyboardInterrupt
        if when == "checkpoint" and any(Path.cwd().glob("runs/*/checkpoints/step_*.pt")):
            raise KeyboardInterrupt
        return self.env.step(action)
