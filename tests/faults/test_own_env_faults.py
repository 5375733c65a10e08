"""An own env named by import path (``env.id: module:Name``, docs/own-project.md) under bad input: every problem is one
``error:`` line naming ``env.id`` or ``env.kwargs`` that says what to do, exit status 2, nothing written or removed (a
finished run stays byte for byte what it was); what the user's code raised names the user's file and line, its
traceback in the error log. The modules sit in the project folder only: the command run there imports them."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import pytest
from cli_support import assert_refused, run_in_process
from conftest import PROJECT

from .run_support import checkpoint_name

OWN_ENVS = """import gymnasium as gym
import numpy as np

CONSTANT = 42


class Helper:
    pass


class Reach(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, step_size=0.2):
        self.step_size = step_size
        self.scale = 1.0 / (step_size - 0.5)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


def make_dict():
    return {"not": "an env"}
"""
"""``Reach(step_size=0.5)`` divides by zero in its constructor, at line 17."""

MODULES = {
    "own_envs": OWN_ENVS,
    "registers_nothing": "VALUE = 1\n",
    "needs_missing": "import not_installed_xyz\n",
    "hangs_on_import": "import time\n\ntime.sleep(3600)\n",
    "ends_on_import": "import os\n\nos._exit(3)\n",
}

BAD = [
    ("env.id=reach_envv:ReachEnv", ("env.id: no module named 'reach_envv': not in <root>", "put reach_envv.py in")),
    ("env.id=own_envs:Rech", ("env.id: own_envs has no 'Rech'", "(did you mean 'Reach'?)", "classes: Reach")),
    (
        "env.id=registers_nothing:Reach-v0",
        ("env.id: registers_nothing has no 'Reach-v0', defines no gymnasium.Env class and registers no env",),
    ),
    ("env.id=own_envs:Helper", ("env.id: own_envs.Helper is a class that is not a gymnasium.Env subclass",)),
    (
        "env.id=own_envs:CONSTANT",
        ("env.id: own_envs.CONSTANT is not a gymnasium.Env class or a function returning one: it is 42 (of type int)",),
    ),
    (
        "env.id=own_envs:make_dict",
        ("env.id: own_envs:make_dict returned dict ({'not': 'an env'}), not a gymnasium.Env",),
    ),
    (
        "env.id=own_envs:Reach env.kwargs.step_size=0.5",
        (
            "env.id: own_envs:Reach raised when built: ZeroDivisionError: float division by zero (at own_envs.py:17)",
            "(traceback in runs/error.log)",
        ),
    ),
    (
        "env.id=own_envs:Reach env.kwargs.stepsize=0.1",
        ("env.kwargs: own_envs:Reach does not accept them:", "unexpected keyword argument 'stepsize'"),
    ),
    (
        "env.id=needs_missing:Env",
        (
            "env.id: importing module 'needs_missing' raised ModuleNotFoundError: No module named 'not_installed_xyz' "
            "(at needs_missing.py:1)",
            "(traceback in runs/error.log)",
        ),
    ),
    # The first import of the module runs in a child bounded by env.user_code_timeout_seconds, as opponents and
    # wrappers do: a hang is refused within the bound, a module that ends its process does not end rlcore's.
    (
        "env.id=hangs_on_import:Env env.user_code_timeout_seconds=1",
        (
            "env.id: hangs_on_import:Env did not finish within 1 s (env.user_code_timeout_seconds) while importing "
            "its module hangs_on_import",
        ),
    ),
    (
        "env.id=ends_on_import:Env",
        ("env.id: ends_on_import:Env ended its process (exit status 3, no result sent) while importing its module",),
    ),
]


def _finished_project(root: Path) -> Path:
    """params.yaml, the modules, and a finished run of its name a refused command must not touch."""
    (root / "params.yaml").write_text((PROJECT / "params.yaml").read_text())
    for module, text in MODULES.items():
        (root / f"{module}.py").write_text(text)
        assert importlib.util.find_spec(module) is None  # only the command run in root imports it
    run = root / "runs" / "ppo-cartpole"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / checkpoint_name(4096)).write_bytes(os.urandom(256))
    (run / "train_summary.json").write_text(json.dumps({"env_steps": 4096}))
    (root / "reports").mkdir()
    (root / "reports" / "evaluations.json").write_text("{}")
    return root


def _snapshot(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "/"
        for path in sorted(root.rglob("*"))
        if "__pycache__" not in path.parts and path.name != "error.log"
    }


def _sets(overrides: str) -> list[str]:
    return [arg for item in overrides.split(" ") for arg in ("--set", item)]


@pytest.mark.parametrize("overrides,fragments", BAD, ids=[overrides for overrides, _ in BAD])
def test_a_bad_own_env_is_refused_in_one_line_that_says_what_to_do_and_nothing_is_written(
    tmp_path: Path, overrides: str, fragments: tuple[str, ...]
) -> None:
    root = _finished_project(tmp_path)
    before = _snapshot(root)
    line = assert_refused(run_in_process(["train", *_sets(overrides)], root))
    for fragment in fragments:
        assert fragment.replace("<root>", str(root.resolve())) in line, line
    assert _snapshot(root) == before
    if "traceback in runs/error.log" in line:
        assert "Traceback (most recent call last)" in (root / "runs" / "error.log").read_text()


@pytest.mark.parametrize("stage", ["evaluate", "select", "export", "collect"])
def test_every_stage_names_the_folder_it_searched_for_a_missing_env_module(tmp_path: Path, stage: str) -> None:
    root = _finished_project(tmp_path)
    before = _snapshot(root)
    outcome = run_in_process([stage, "--set", "env.id=reach_envv:ReachEnv"], root)
    assert_refused(outcome, f"env.id: no module named 'reach_envv': not in {root.resolve()}")
    assert _snapshot(root) == before
