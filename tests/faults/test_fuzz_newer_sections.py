"""Fuzzing the newer params sections and hostile user code: every example is refused cleanly (exit status 2, one
``error: ...`` line naming the key or the env, no traceback, no hang) and leaves the project as it was (a finished
run of the same name byte for byte, nothing else written but the failed run's log).

Sections: ``env.parameters``, ``env.curriculum``, ``eval.settings``, ``algo.reward_signals``, ``policy.memory``,
``train.init_from``, ``train.seeds``, actor and worker counts (IMPALA's ``algo.num_actors``, ES's
``algo.num_workers``), and ``env.wrappers`` naming user code that raises at import, has a syntax error, raises in
``__init__``, is not a wrapper, or misbehaves mid-episode (raises in ``step`` after a few steps, returns NaN/inf or
wrongly shaped observations, NaN rewards). Load-time cases are refused before anything starts; mid-episode ones
end the run with one line naming the env and the step. User code that exits (``sys.exit``), hangs, or ends or kills
its process (``os._exit``, SIGKILL), as a wrapper (in ``__init__``, ``reset`` or ``step``) or as an opponent of a
two-player game (``env.opponent``, ``env.self_play.fixed_opponents``, ``eval.opponents``): refused at load naming its
key (``rlcore.envs.user_code``; hangs under ``env.user_code_timeout_seconds: 1``).

``RLCORE_FUZZ_EXAMPLES`` sets the number of examples (the suite runs 300; the issue's bar is 0 failures at 1,000:
``RLCORE_FUZZ_EXAMPLES=1000 pytest tests/faults/test_fuzz_newer_sections.py``).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import assert_refused, run_in_process
from conftest import PROJECT
from hypothesis import given, settings
from hypothesis import strategies as st

from faults.test_params_cases import FUZZ, base_tree, fake_finished_run, modules, snapshot, template  # noqa: F401 (fixtures: the project is built on theirs)

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("RLCORE_FUZZ_EXAMPLES", "300"))
FUZZ_FILE = "fuzz.yaml"

# --- hostile user code ----------------------------------------------------------------------------------------------

HOSTILE_MODULES = {
    "hostile_import": 'raise RuntimeError("hostile_import: boom at import")\n',
    "hostile_syntax": "def broken(:\n    pass\n",
    "hostile_wrappers": '''
import gymnasium as gym
import numpy as np

CONSTANT = 5


def not_an_env(env, **kwargs):
    return 5


class RaisesInInit(gym.Wrapper):
    def __init__(self, env):
        raise ValueError("RaisesInInit: refuses to wrap")


class Misbehaves(gym.Wrapper):
    """After ``after`` steps of a sub-env: raise, or return NaN/inf/wrongly shaped observations or NaN rewards."""

    def __init__(self, env, after=5, how="raise"):
        super().__init__(env)
        self.after, self.how, self.steps = after, how, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps >= self.after:
            if self.how == "raise":
                raise RuntimeError(f"Misbehaves: step {self.steps} failed")
            if self.how == "nan_obs":
                obs = np.full_like(obs, np.nan)
            elif self.how == "inf_obs":
                obs = np.full_like(obs, np.inf)
            elif self.how == "wrong_shape":
                obs = np.zeros(obs.shape[0] + 3, dtype=obs.dtype)
            elif self.how == "nan_reward":
                reward = float("nan")
        return obs, reward, terminated, truncated, info
''',
}
MISBEHAVIOURS = ("raise", "nan_obs", "inf_obs", "wrong_shape", "nan_reward")
HOSTILE_MODULES["hostile_process"] = '''
import os
import signal
import sys
import time

import gymnasium as gym


def misbehave(how):
    if how == "exit":
        sys.exit(3)
    if how == "exit_none":
        sys.exit()
    if how == "hang":
        time.sleep(3600)
    if how == "os_exit":
        os._exit(0)
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)


class Wrapper(gym.Wrapper):
    """Misbehaves (``how``) in ``where``: ``init``, ``reset`` or ``step``."""

    def __init__(self, env, how="exit", where="reset"):
        super().__init__(env)
        self.how, self.where = how, where
        if where == "init":
            misbehave(how)

    def reset(self, **kwargs):
        if self.where == "reset":
            misbehave(self.how)
        return self.env.reset(**kwargs)

    def step(self, action):
        if self.where == "step":
            misbehave(self.how)
        return self.env.step(action)


def _opponent(how):
    def play(observation, rng):
        misbehave(how)
    return play


exit = _opponent("exit")
exit_none = _opponent("exit_none")
hang = _opponent("hang")
os_exit = _opponent("os_exit")
sigkill = _opponent("sigkill")
'''
PROCESS_MISBEHAVIOURS = ("exit", "exit_none", "hang", "os_exit", "sigkill")
"""What hostile_process's code does to its process: sys.exit(3), sys.exit(), sleep an hour, os._exit(0), SIGKILL."""
PROCESS_WORDS = {
    "exit": "called sys.exit(3)",
    "exit_none": "called sys.exit(None)",
    "hang": "did not finish within 1 s",
    "os_exit": "ended its process (exit status 0",
    "sigkill": "crashed its process (killed by SIGKILL)",
}


# --- invalid values, section by section ---------------------------------------------------------------------------

BAD_NAMES = ["a/b", "../x", "x|y " + "z" * 200, "", "a" * 65, "tab\there", "new\nline", "semi;colon", "é"]
NON_FINITE = [math.nan, math.inf, -math.inf]


def bad_parameter_values() -> st.SearchStrategy[dict[str, Any]]:
    """``env.parameters``-shaped mappings for CartPole that must be refused."""
    name = st.sampled_from(["length", "masspole", "masscart"])
    positive_only = st.one_of(st.sampled_from([0, 0.0, -0.1, -1e9]), st.floats(max_value=0, allow_nan=False))
    bad_value = st.one_of(
        positive_only,
        st.sampled_from([*NON_FINITE, "abc", "0.5", [1, 2], None, {"a": 1}]),
        st.sampled_from(
            [
                {"sampler": "uniform", "low": 1.0, "high": 0.5},
                {"sampler": "uniform", "low": -1.0, "high": 1.0},
                {"sampler": "uniform", "low": 0.5},
                {"sampler": "gaussian", "mean": 0.5, "std": -1},
                {"sampler": "gaussian", "mean": math.nan, "std": 0.1},
                {"sampler": "multirange_uniform", "intervals": []},
                {"sampler": "multirange_uniform", "intervals": [[1.0, 0.5]]},
                {"sampler": "multirange_uniform", "intervals": [[-2.0, -1.0]]},
                {"sampler": "bogus", "value": 1},
                {"sampler": "constant", "value": 0.5, "extra": 1},
                {"sampler": "constant", "value": -0.5},
                {"value": 0.5},
            ]
        ),
    )
    good = st.fixed_dictionaries({}, optional={"length": st.floats(0.3, 1.0), "masscart": st.floats(0.5, 2.0)})
    unknown = st.sampled_from([{"nosuchparam_zz": 1.0}, {"a b": 1.0}, {"../x": 1.0}, {"__class__": 1.0}, {"1x": 2}])
    one_bad = st.tuples(name, bad_value).map(lambda kv: {kv[0]: kv[1]})
    return st.one_of(
        st.tuples(good, one_bad).map(lambda pair: {**pair[0], **pair[1]}),
        unknown,
        st.sampled_from([5, "text", [1, 2], True]),
    )


HALFWAY = {"measure": "progress", "threshold": 0.5}


def bad_curriculum() -> st.SearchStrategy[Any]:
    last = {"name": "hard", "parameters": {}}
    bad_until = st.sampled_from(
        [
            {"measure": "eval_return", "threshold": "450"},
            {"measure": "bogus", "threshold": 1},
            {"measure": "progress", "threshold": 2},
            {"measure": "progress", "threshold": 0},
            {"measure": "eval_return", "threshold": math.nan},
            {"measure": "eval_return", "threshold": 100, "smoothing": 1},
            {"measure": "eval_return", "threshold": 100, "min_lesson_steps": -1},
            {"measure": "eval_return"},
            {"threshold": 1},
            5,
        ]
    )
    return st.one_of(
        st.sampled_from(BAD_NAMES).map(lambda n: [{"name": n, "until": HALFWAY}, last]),
        bad_parameter_values().map(lambda p: [{"name": "easy", "parameters": p, "until": HALFWAY}, last]),
        bad_until.map(lambda u: [{"name": "easy", "until": u}, last]),
        st.just([{"name": "easy", "until": HALFWAY}, {"name": "easy"}]),  # two lessons named alike
        st.just([{"name": "easy"}, last]),  # a lesson before the last without until
        st.just([{"name": "easy", "bogus_key": 1}]),
        st.sampled_from([5, "text", {"name": "x"}, [5], [None]]),
    )


def bad_settings() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(BAD_NAMES).map(lambda n: [{"name": n, "parameters": {"length": 1.0}}]),
        st.just([{"name": "mean", "parameters": {}}]),
        st.just([{"name": "same", "parameters": {}}, {"name": "same", "parameters": {"length": 1.0}}]),
        st.just([{"name": f"s{i}", "parameters": {"length": 0.5}} for i in range(10_000)]),
        bad_parameter_values().map(lambda p: [{"name": "setting", "parameters": p}]),
        st.sampled_from([5, "text", {"name": "x"}, [5], [{"parameters": {}}], [{"name": "x", "bogus": 1}]]),
    )


def bad_reward_signals() -> st.SearchStrategy[Any]:
    return st.sampled_from(
        [
            {"bogus_signal": {}},
            {"extrinsic": {"strength": -1}},
            {"extrinsic": {"strength": "abc"}},
            {"extrinsic": {"strength": math.nan}},
            {"extrinsic": {"strength": 1, "gamma": 0}},
            {"rnd": {"strength": -0.1}},
            {"rnd": {"gamma": 1.5}},
            {"rnd": {"lr": 0}},
            {"rnd": {"lr": math.inf}},
            {"rnd": {"hidden_sizes": []}},
            {"rnd": {"hidden_sizes": [10**9]}},
            {"rnd": {"output_size": 0}},
            {"rnd": {"obs_clip": 0}},
            {"rnd": {"update_proportion": 0}},
            {"rnd": {"batch_size": 1}},
            {"rnd": {"epochs": 0}},
            {"curiosity": {"forward_weight": 2}},
            {"curiosity": {"encoding_size": -1}},
            {"gail": {}},
            {"gail": {"demonstrations": "no/such/demos.parquet"}},
            {"gail": {"demonstrations": "/dev/zero"}},
            {"gail": {"demonstrations": "params.yaml"}},
            {"gail": {"demonstrations": "data/dataset.parquet", "gradient_penalty": -1}},
            5,
            "rnd",
            [1, 2],
        ]
    )


def bad_memory() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(
            [
                {"type": "bogus"},
                {"type": "lstm", "size": 0},
                {"type": "lstm", "size": 10**6},
                {"type": "gru", "sequence_length": 0},
                {"type": "lstm", "sequence_length": 1000},
                {"type": "lstm", "sequence_length": 33},
                {"type": "lstm", "sequence_length": 16, "burn_in": 16},
                {"type": "lstm", "burn_in": -1},
                {"type": "lstm", "size": "big"},
                {"type": "lstm", "bogus": 1},
                5,
                "lstm",
                [1],
            ]
        ),
        st.integers(min_value=33, max_value=4096).map(lambda n: {"type": "lstm", "sequence_length": n}),
    )


def bad_init_from() -> st.SearchStrategy[Any]:
    return st.sampled_from(
        [
            "no/such/checkpoint.pt",
            "/dev/zero",
            "runs",
            "params.yaml",
            "data/dataset.parquet",
            "garbage.pt",
            "models/best/policy.pt",  # a policy of another shape (4x2 zeros)
            "runs/ppo-cartpole/checkpoints/step_0000004096.pt",  # inside the run it would replace
            "",
            5,
            [1],
        ]
    )


def bad_seeds() -> st.SearchStrategy[Any]:
    """``train.seeds``: none, out of [0, 2**32), repeated, not integers, not a list, more than 64."""
    return st.one_of(
        st.sampled_from([[], [1.5], ["0"], [True], [None], [[0]], 3, "0, 1", {"a": 1}, list(range(65))]),
        st.integers(max_value=-1).map(lambda seed: [0, seed]),
        st.integers(min_value=2**32, max_value=2**70).map(lambda seed: [seed]),
        st.integers(min_value=0, max_value=2**32 - 1).map(lambda seed: [seed, 7, seed]),
    )


def bad_worker_count() -> st.SearchStrategy[tuple[str, str, Any]]:
    """(algo, key, value): counts a type or a bound refuses, and counts no 24 GiB machine holds (~170 MiB each)."""
    count = st.one_of(st.sampled_from([0, -1, 1.5, "two", None, 10**9]), st.integers(min_value=160, max_value=256))
    return st.tuples(st.sampled_from([("impala", "num_actors"), ("es", "num_workers")]), count).map(
        lambda pair: (pair[0][0], pair[0][1], pair[1])
    )


def bad_wrappers() -> st.SearchStrategy[tuple[Any, bool]]:
    """(env.wrappers value, refused at load?)."""
    at_load = st.sampled_from(
        [
            [{"wrapper": "hostile_import:Anything"}],
            [{"wrapper": "hostile_syntax:Anything"}],
            [{"wrapper": "hostile_wrappers:RaisesInInit"}],
            [{"wrapper": "hostile_wrappers:CONSTANT"}],
            [{"wrapper": "hostile_wrappers:not_an_env"}],
            [{"wrapper": "hostile_wrappers:NoSuchName"}],
            [{"wrapper": "gymnasium.wrappers.ClipReward", "kwargs": {"bogus_kwarg": 1}}],
            [{"wrapper": "gymnasium.wrappers.ClipReward"}, {"wrapper": "hostile_wrappers:RaisesInInit"}],
        ]
    )
    mid_episode = st.tuples(st.integers(1, 40), st.sampled_from(MISBEHAVIOURS)).map(
        lambda pair: [{"wrapper": "hostile_wrappers:Misbehaves", "kwargs": {"after": pair[0], "how": pair[1]}}]
    )
    return st.one_of(at_load.map(lambda w: (w, True)), mid_episode.map(lambda w: (w, False)))


TICTACTOE = {
    "id": "pettingzoo:pettingzoo.classic.tictactoe_v3",
    "opponent": "rlcore.envs.opponents:random_legal",
    "action_mask": "observation",
}


def process_misbehaviour() -> st.SearchStrategy[tuple[dict[str, Any], dict[str, Any], str]]:
    """(env section, eval section, the key the refusal names): user code that exits, hangs, or ends or kills its
    process, as a wrapper or as an opponent under each of its keys."""
    how = st.sampled_from(PROCESS_MISBEHAVIOURS)
    wrapper = st.tuples(how, st.sampled_from(["init", "reset", "step"]), st.booleans()).map(
        lambda draw: (
            {
                "wrappers": [
                    *([{"wrapper": "gymnasium.wrappers.ClipReward", "kwargs": {"max_reward": 1}}] if draw[2] else []),
                    {"wrapper": "hostile_process:Wrapper", "kwargs": {"how": draw[0], "where": draw[1]}},
                ]
            },
            {},
            f"env.wrappers.{int(draw[2])}.wrapper: hostile_process:Wrapper {PROCESS_WORDS[draw[0]]}",
        )
    )
    opponent = st.tuples(how, st.sampled_from(["env.opponent", "fixed", "eval"])).map(
        lambda draw: (
            {**TICTACTOE, "opponent": f"hostile_process:{draw[0]}"}
            if draw[1] == "env.opponent"
            else {**TICTACTOE, "self_play": {"fixed_opponents": {f"hostile_process:{draw[0]}": 0.5}}}
            if draw[1] == "fixed"
            else TICTACTOE,
            {"max_episode_steps": 9, "opponents": {"bad": f"hostile_process:{draw[0]}"}} if draw[1] == "eval" else {},
            {"env.opponent": "env.opponent", "fixed": "env.self_play.fixed_opponents", "eval": "eval.opponents.bad"}[
                draw[1]
            ]
            + f": hostile_process:{draw[0]} {PROCESS_WORDS[draw[0]]}",
        )
    )
    return st.one_of(wrapper, opponent)


# --- the project ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_modules(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The hostile wrapper modules, importable while the tests run (as a user's own module on PYTHONPATH is)."""
    folder = tmp_path_factory.mktemp("hostile")
    for name, source in HOSTILE_MODULES.items():
        (folder / f"{name}.py").write_text(source)
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    for name in HOSTILE_MODULES:
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def project(template: Path, tmp_path_factory: pytest.TempPathFactory, hostile_modules: Path) -> Path:  # noqa: F811
    """The params-case fuzzer's project (presets, finished runs, a selected model, a dataset), with finished runs of
    the IMPALA and ES presets too and a file of random bytes."""
    root = shutil.copytree(template, tmp_path_factory.mktemp("newer") / "project")
    for name in ("impala-cartpole", "es-cartpole"):
        fake_finished_run(root / "runs" / name)
    (root / "garbage.pt").write_bytes(os.urandom(2048))
    return root


LOGS = (".log", "/.lock")
"""What a refused run may leave: its log (the full traceback of an error from user code) and the run folder's
``flock`` file (``rlcore.trainers.run_directory.RunLock``: an empty file every run of the folder uses)."""


def changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(
        name
        for name in set(before) ^ set(after) | {n for n in set(before) & set(after) if before[n] != after[n]}
        if not name.endswith(LOGS) and name != FUZZ_FILE
    )


def refused(root: Path, tree: dict[str, Any], *fragments: str, started: bool = False) -> str:
    """Run ``train`` on ``tree``: refused (exit 2, one ``error:`` line holding ``fragments``, no traceback), the
    project as it was but for the error log. A run that ``started`` (a wrapper misbehaving mid-episode) may have
    logged what it did before the error (``starting a fresh run``): only its ``error:`` line is counted there."""
    (root / FUZZ_FILE).write_text(yaml.safe_dump(tree, sort_keys=False, allow_unicode=True))
    before = snapshot(root)
    outcome = run_in_process(["train", "--params", FUZZ_FILE], root, limit=60)
    if started:
        assert not outcome.hung and outcome.returncode == 2, outcome
        assert "Traceback" not in outcome.stderr + outcome.stdout, outcome
        errors = [line for line in outcome.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, outcome
        line = errors[0]
        assert all(fragment in line for fragment in fragments), line
    else:
        line = assert_refused(outcome, *fragments)
    after = snapshot(root)
    changed = changed_files(before, after)
    # A failed run may leave an empty folder for its log; nothing else.
    assert all(after.get(name) == "<folder>" for name in changed), f"{line}\nchanged: {changed[:10]}"
    return line


# --- the fuzzers ---------------------------------------------------------------------------------------------------

SECTION_VALUES = {
    "env.parameters": bad_parameter_values,
    "env.curriculum": bad_curriculum,
    "eval.settings": bad_settings,
    "algo.reward_signals": bad_reward_signals,
    "policy.memory": bad_memory,
    "train.init_from": bad_init_from,
    "train.seeds": bad_seeds,
}
"""Sections of PPO's params whose bad values are refused at load, naming the section."""
SECTIONS = (*SECTION_VALUES, "workers", "env.wrappers", "user code")


def small_budget(tree: dict[str, Any]) -> dict[str, Any]:
    """A budget a mid-episode failure is reached in (a wrapper misbehaves within its first 40 steps)."""
    tree.setdefault("train", {}).update({"max_steps": 2048, "eval_every": 1024, "eval_episodes": 2})
    tree["train"]["target_return"] = None
    return tree


@settings(FUZZ, max_examples=EXAMPLES)
@given(data=st.data())
def test_fuzz_newer_sections_are_refused_cleanly(project: Path, data: st.DataObject) -> None:
    section = data.draw(st.sampled_from(SECTIONS), label="section")
    if section in SECTION_VALUES:
        tree = small_budget(base_tree("ppo"))
        section_name, key = section.split(".")
        tree[section_name][key] = data.draw(SECTION_VALUES[section](), label="value")
        refused(project, tree, section)
    elif section == "workers":
        algo, key, value = data.draw(bad_worker_count(), label="count")
        tree = small_budget(yaml.safe_load((PROJECT / f"configs/{algo}-cartpole.yaml").read_text()))
        tree["algo"][key] = value
        refused(project, tree, f"algo.{key}")
    elif section == "user code":
        env, evaluation, line = data.draw(process_misbehaviour(), label="user code")
        tree = small_budget(base_tree("ppo"))
        tree["env"] = {**tree["env"], **env, "user_code_timeout_seconds": 1}
        tree["eval"] = {**tree.get("eval", {}), **evaluation}
        refused(project, tree, line)
    else:
        wrappers, at_load = data.draw(bad_wrappers(), label="wrappers")
        algo = data.draw(st.sampled_from(["ppo", "dqn"]), label="algo")
        tree = small_budget(base_tree(algo))
        tree["env"]["wrappers"] = wrappers
        line = refused(project, tree, started=not at_load)
        if at_load:
            assert "env.wrappers" in line, line
        else:  # the env and the step it failed at (the wrapper's own message where it raised)
            assert "CartPole-v1" in line and "step" in line, line
