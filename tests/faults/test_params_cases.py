"""Bad params input, refused cleanly: exit status 2, one ``error: ...`` line naming the key or file, no traceback,
no hang, and nothing written or removed (a finished run stays byte for byte what it was).

- Every one of the 72 cases a probe found not refused cleanly (``params-cases.jsonl``, a copy of
  ``../shared/faults/params-cases.jsonl``), run in-process through ``flows.cli.main`` (what the ``rlcore`` command
  runs), or named as valid input with the reason (:data:`VALID`).
- A sample of them through the real ``rlcore`` command.
- A hypothesis fuzzer: invalid values for every key of every algorithm's params tree (wrong types, signs and
  bounds, non-finite floats, sizes that cannot be allocated), unknown keys at every level, and malformed files
  (broken YAML, alias bombs, binary, other encodings): 500 examples, derandomized.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import os
import shlex
import shutil
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import pytest
import yaml
from cli_support import TIME_LIMIT, assert_refused, run_in_process
from conftest import PROJECT, one_line_error, preset_text, rlcore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from rlcore.params import load_params, params_model

HERE = Path(__file__).parent
CASES: list[dict[str, Any]] = [
    json.loads(line) for line in (HERE / "params-cases.jsonl").read_text().splitlines() if line.strip()
]
FINISHED_RUNS = ("ppo-cartpole", "dqn-cartpole", "sac-pendulum", "bc-cartpole", "default", "quick")
PRESETS = {
    "ppo": "params.yaml",
    "dqn": "configs/dqn-cartpole.yaml",
    "sac": "configs/sac-pendulum.yaml",
    "bc": "offline.yaml",
    "td3bc": "offline.yaml",
    "iql": "offline.yaml",
}
"""The params file each algorithm's fuzzing starts from (td3bc and iql: offline.yaml with their own algo)."""

# --- what each case must say ------------------------------------------------------------------------------------

VALID = {
    "UTF-8 BOM + params": "a UTF-8 byte-order mark is fine: the same params as without it",
    "missing section policy": "sections other than env and algo default (README, Errors): policy's defaults",
    "missing section train": "train defaults: 200,000 env steps, the documented budget",
    "missing section eval": "eval defaults",
    "missing section select": "select defaults (mean_return)",
    "missing section export": "export defaults (ONNX and torch.export)",
    "missing section sweep": "sweep is read only by `rlcore sweep`; it defaults",
    "missing section deploy": "deploy is read only by the Prefect commands; it defaults",
    "missing key seed": "seed defaults to 0 (reproducible)",
    "missing key name": "name defaults to `default`: runs/default/",
    "missing key torch_threads": "torch_threads defaults to 1",
    "--set env.kwargs={render_mode: human}": "a render mode CartPole lists; rlcore never calls render()",
    "--set env.id=HalfCheetah-v5": "the envs extra (in dev) installs gymnasium[mujoco] since "
    "issue 14, so PPO trains on it; without MuJoCo the refusal names gymnasium[mujoco], as the box2d cases show",
    "--set algo.batch_size=1000000000": "a PPO minibatch larger than the rollout is the whole rollout "
    "(RolloutBuffer.minibatches); nothing of that size is allocated",
}
"""Cases of params-cases.jsonl that are valid input, and why."""

_UTF8 = "not a UTF-8 text params file"
REFUSED: dict[str, tuple[str, ...]] = {
    "empty file (0 bytes)": ("cases/case000.yaml", "params file is empty"),
    "whitespace only": ("cases/case001.yaml", "params file is empty"),
    "comment only": ("cases/case002.yaml", "params file is empty"),
    "top-level null": ("cases/case006.yaml", "params file is empty"),
    "billion laughs as seed": ("cases/case019.yaml", "alias bomb"),
    "billion laughs as name": ("cases/case020.yaml", "alias bomb"),
    "billion laughs as hidden_sizes": ("cases/case022.yaml", "alias bomb"),
    "billion laughs as sweep choices": ("cases/case023.yaml", "alias bomb"),
    "binary garbage 4KB": ("cases/case025.yaml", _UTF8),
    "binary garbage with NULs": ("cases/case026.yaml", _UTF8),
    "non-UTF-8 latin-1 name": ("cases/case027.yaml", _UTF8),
    "non-UTF-8 latin-1 comment": ("cases/case028.yaml", _UTF8),
    "UTF-16 with BOM": ("cases/case029.yaml", _UTF8, "UTF-16"),
    "params path is a binary (.pt file)": ("models/best/policy.pt", _UTF8),
    "params path is the parquet dataset": ("data/dataset.parquet", _UTF8),
    "missing section env": ("cases/case039.yaml", "env: required section is missing"),
    "missing section algo": ("cases/case041.yaml", "algo: required section is missing"),
    "sac-pendulum preset without algo section": ("cases/case051.yaml", "algo: required section is missing"),
    "--set seed=-1": ("seed:",),
    "--set seed=18446744073709551616": ("seed:",),
    "--set seed=true": ("seed:", "boolean"),
    "--set name='" + "a" * 300 + "'": ("name:", "100"),
    "--set name='..'": ("name:",),
    "--set name='.'": ("name:",),
    "--set name='-rf'": ("name:",),
    "--set torch_threads=1000000000": ("torch_threads:",),
    "--set env.id=raisingmod:X-v0": ("env.id:", "raisingmod", "RuntimeError"),
    "--set env.id=syntaxmod:X-v0": ("env.id:", "syntaxmod", "SyntaxError"),
    "--set env.id=CarRacing-v3": ("env.id:", "gymnasium[box2d]"),
    "--set env.id=LunarLander-v3": ("env.id:", "gymnasium[box2d]"),
    "--set env.id=GymV26Environment-v0": ("env.id:", "shimmy"),
    "--set env.id=phys2d/CartPole-v1": ("env.id:", "jax"),
    "--set env.id=tabular/Blackjack-v0": ("env.id:", "jax"),
    "--set env.kwargs={render_mode: bogus}": ("env.kwargs.render_mode",),
    "--set env.kwargs={max_episode_steps: -1}": ("env.kwargs.max_episode_steps",),
    "--set env.kwargs={max_episode_steps: abc}": ("env.kwargs.max_episode_steps",),
    "--set env.kwargs={sutton_barto_reward: [1]}": ("env.kwargs.sutton_barto_reward",),
    "--set env.kwargs={max_episode_steps: 0}": ("env.kwargs.max_episode_steps",),
    "--set env.num_envs=1000000000": ("env.num_envs:",),
    "--set policy.hidden_sizes=[1000000000]": ("policy.hidden_sizes", "memory"),
    "--set policy.hidden_sizes=[100000, 100000]": ("policy.hidden_sizes", "memory"),
    "--set policy.log_std_init=.nan": ("policy.log_std_init:",),
    "--set policy.log_std_init=.inf": ("policy.log_std_init:",),
    "--set policy.log_std_init=1e308": ("policy.log_std_init:",),
    "--set algo.lr=.inf": ("algo.lr:",),
    "--set algo.lr=1e308": ("algo.lr:",),
    "--set algo.n_steps=1000000000": ("algo.n_steps:", "memory"),
    "--set algo.clip_range=.inf": ("algo.clip_range:",),
    "--set algo.ent_coef=.inf": ("algo.ent_coef:",),
    "--set algo.vf_coef=.inf": ("algo.vf_coef:",),
    "--set train.eval_episodes=1000000000": ("train.eval_episodes:",),
    "--set train.target_return=.nan": ("train.target_return:",),
    "--set eval.seed=-1": ("eval.seed:",),
    "DQN huge buffer_size": ("algo.buffer_size:", "memory"),
    "DQN gradient_steps_per_sample 1e9": ("algo.gradient_steps_per_sample:",),
    "SAC ent_coef -1": ("algo.ent_coef:",),
    "SAC target_entropy nan": ("algo.target_entropy:",),
    "SAC env.kwargs g=abc": ("env.kwargs.g:",),
}
"""Cases refused, with what their one line must hold (the key or the file, and what was wrong)."""

SECOND_ROUND: dict[str, tuple[list[str], tuple[str, ...]]] = {
    # A run named sweep wrote its reports into reports/sweep/, the sweep's results, and one named sweeps its run
    # folder over runs/sweeps/, the sweep's trials.
    "a run named sweep": (["--set", "name=sweep"], ("name: 'sweep' is not a run's name (reports/sweep/ holds",)),
    "a run named sweeps": (["--set", "name=sweeps"], ("name: 'sweeps' is not a run's name (runs/sweeps/ holds",)),
    "lesson name a/b": (
        ["--set", "env.curriculum=[{name: a/b, parameters: {length: 0.5}}]"],
        ("env.curriculum.0.name:", "'a/b'"),
    ),
    "setting name ../x": (
        ["--set", "eval.settings=[{name: ../x, parameters: {length: 0.5}}]"],
        ("eval.settings.0.name:", "'../x'"),
    ),
    "setting name of 200 characters with | and spaces": (
        ["--set", "eval.settings=[{name: 'x|y " + "z" * 196 + "', parameters: {length: 0.5}}]"],
        ("eval.settings.0.name:",),
    ),
    "65 eval.settings": (
        ["--set", "eval.settings=[" + ", ".join(f"{{name: s{i}}}" for i in range(65)) + "]"],
        ("eval.settings:", "at most 64 settings", "got 65"),
    ),
    "65 curriculum lessons": (
        [
            "--set",
            "env.curriculum=["
            + ", ".join(f"{{name: l{i}, until: {{measure: progress, threshold: 0.5}}}}" for i in range(64))
            + ", {name: last}]",
        ],
        ("env.curriculum:", "at most 64 lessons", "got 65"),
    ),
    "quoted curriculum threshold '450'": (
        [
            "--set",
            "env.curriculum=[{name: a, until: {measure: eval_return, threshold: '450'}}, {name: b}]",
        ],
        ("env.curriculum.0.until.threshold:", "got a string ('450')"),
    ),
    "quoted train.target_return '450'": (["--set", "train.target_return='450'"], ("train.target_return:", "string")),
    "quoted item of policy.hidden_sizes": (["--set", "policy.hidden_sizes=['64', 64]"], ("policy.hidden_sizes:",)),
    "train.init_from a params file": (
        ["--set", "train.init_from=params.yaml"],
        ("train.init_from: params.yaml: not a readable checkpoint",),
    ),
    "train.init_from /dev/zero": (["--set", "train.init_from=/dev/zero"], ("/dev/zero: not a regular file",)),
    "--params /dev/zero": (["--params", "/dev/zero"], ("/dev/zero: not a regular file", "params file")),
    "--resume-from /dev/zero": (["--resume-from", "/dev/zero"], ("/dev/zero: not a regular file", "checkpoint")),
    "sequence_length 1000 over a 32-step rollout": (
        ["--set", "algo.n_steps=32", "--set", "policy.memory={type: lstm, size: 16, sequence_length: 1000}"],
        ("policy.memory.sequence_length: 1000", "algo.n_steps: 32"),
    ),
}
"""Bad input found by the second probe (issue 26): ``rlcore train ARGS``, and what its one line must hold."""

SEEDS_CASES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "train.seeds []": (["--set", "train.seeds=[]"], ("train.seeds:", "1 to 64 seeds", "got 0")),
    "train.seeds negative": (["--set", "train.seeds=[0, -3]"], ("train.seeds:", "[0, 2**32)", "got -3")),
    "train.seeds 2**32": (["--set", "train.seeds=[4294967296]"], ("train.seeds:", "[0, 2**32)", "4294967296")),
    "train.seeds duplicated": (["--set", "train.seeds=[3, 1, 3]"], ("train.seeds:", "distinct", "got 3 twice")),
    "train.seeds non-integer": (["--set", "train.seeds=[0, 1.5]"], ("train.seeds.1:", "integer")),
    "train.seeds quoted": (["--set", "train.seeds=['0']"], ("train.seeds:", "string")),
    "train.seeds a number": (["--set", "train.seeds=4"], ("train.seeds:", "list")),
    "train.seeds 65 seeds": (
        ["--set", "train.seeds=[" + ", ".join(str(seed) for seed in range(65)) + "]"],
        ("train.seeds:", "1 to 64 seeds", "got 65"),
    ),
    "train.seeds with --resume-from": (
        ["--set", "train.seeds=[0, 1]", "--resume-from", "runs/quick/checkpoints/step_0000004096.pt"],
        ("--resume-from:", "train.seeds"),
    ),
    "train.batch_seeds maybe": (["--set", "train.batch_seeds=maybe"], ("train.batch_seeds:", "boolean", "'maybe'")),
    "train.batch_seeds 2": (["--set", "train.batch_seeds=2"], ("train.batch_seeds:", "boolean", "got 2")),
    "train.batch_seeds a list": (["--set", "train.batch_seeds=[true]"], ("train.batch_seeds:", "boolean")),
    "train.batch_seeds null": (["--set", "train.batch_seeds=null"], ("train.batch_seeds:", "boolean", "None")),
    "train.seed_processes 0": (
        ["--set", "train.seed_processes=0"],
        ("train.seed_processes:", ">= 1 or 'auto'", "got 0"),
    ),
    "train.seed_processes many": (
        ["--set", "train.seed_processes=many"],
        ("train.seed_processes:", "integer or 'auto'", "got 'many'"),
    ),
    "train.seed_processes 1.5": (["--set", "train.seed_processes=1.5"], ("train.seed_processes:", "got 1.5")),
    "train.seed_processes true": (["--set", "train.seed_processes=true"], ("train.seed_processes:", "boolean")),
}
"""``train.seeds``, ``train.batch_seeds`` (issue 28) and ``train.seed_processes``: ``rlcore train ARGS``, refused before
anything is written (seeds more than the memory allows: ``tests/test_seeds_batched.py``, and with their processes:
``tests/test_seeds_contract.py``)."""

SIMPLE_SPREAD = ["--set", "env.id=pettingzoo:mpe2.simple_spread_v3", "--set", "env.kwargs={N: 3, max_cycles: 25}"]
MULTIAGENT_CASES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "unknown PettingZoo env module": (
        ["--set", "env.id=pettingzoo:mpe2.simple_spred_v3"],
        ("env.id:", "mpe2.simple_spred_v3"),
    ),
    "PettingZoo module without parallel_env": (["--set", "env.id=pettingzoo:mpe2"], ("env.id:", "parallel_env")),
    "PettingZoo env refuses its kwargs": (
        ["--set", "env.id=pettingzoo:mpe2.simple_spread_v3", "--set", "env.kwargs={agents: 3}"],
        ("env.kwargs:", "agents"),
    ),
    "return_reduction naming a missing agent": (
        [*SIMPLE_SPREAD, "--set", "eval.return_reduction=agent_7"],
        ("eval.return_reduction:", "agent_7", "agent_0, agent_1, agent_2"),
    ),
    "return_reduction naming an agent of a single-agent env": (
        ["--set", "eval.return_reduction=agent_0"],
        ("eval.return_reduction:", "agent_0"),
    ),
    "heterogeneous agents": (
        ["--set", "env.id=pettingzoo:mpe2.simple_adversary_v3", "--set", "env.kwargs={}"],
        ("env.id:", "different observation spaces"),
    ),
    "algorithm that is not PPO, A2C, DQN or BC": (
        ["--params", "configs/sac-discrete-cartpole.yaml", *SIMPLE_SPREAD],
        ("algo.name:", "sac", "a2c, bc, dqn, ppo"),
    ),
    "env.agent_id on a single-agent env": (["--set", "env.agent_id=true"], ("env.agent_id:", "PettingZoo")),
    "env.wrappers on a PettingZoo env": (
        [*SIMPLE_SPREAD, "--set", "env.wrappers=[{wrapper: gymnasium.wrappers.ClipReward}]"],
        ("env.wrappers:", "PettingZoo"),
    ),
}
"""Multi-agent envs (issue 29): ``rlcore train ARGS``, refused before anything is written."""


@pytest.mark.parametrize("label", list(MULTIAGENT_CASES))
def test_multiagent_case_is_refused_in_one_line_and_writes_nothing(label: str, project: Path) -> None:
    args, fragments = MULTIAGENT_CASES[label]
    before = snapshot(project)
    assert_refused(run_in_process(["train", *args], project), *fragments)
    assert snapshot(project) == before, "a refused command changed the project"


ADVERSARY = ["--set", "env.id=pettingzoo:mpe2.simple_adversary_v3", "--set", "env.kwargs={N: 2, max_cycles: 25}"]
TEAMS = "policy.groups={adversaries: [adversary_*], good: [agent_*]}"
GROUPS_CASES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "group pattern matching no agent": (
        [*ADVERSARY, "--set", "policy.groups={adversaries: [adversary_*], good: [agents_*]}"],
        ("policy.groups.good:", "'agents_*'", "no agent"),
    ),
    "agent in no group": (
        [*ADVERSARY, "--set", "policy.groups={adversaries: [adversary_*], good: [agent_0]}"],
        ("policy.groups:", "agent_1", "no group"),
    ),
    "agent in two groups": (
        [*ADVERSARY, "--set", "policy.groups={adversaries: [adversary_*], all: ['*']}"],
        ("policy.groups:", "two groups"),
    ),
    "agents with different observations in one group": (
        [*ADVERSARY, "--set", "policy.groups={all: ['*']}"],
        ("policy.groups.all:", "different"),
    ),
    "groups on a single-agent env": (["--set", "policy.groups={all: ['*']}"], ("policy.groups:", "one agent")),
    "return_reduction naming an unknown group": (
        [*ADVERSARY, "--set", TEAMS, "--set", "eval.return_reduction=goood"],
        ("eval.return_reduction:", "goood", "adversaries, good"),
    ),
    "groups with an algorithm that has no grouped trainer": (
        ["--params", "configs/dqn-cartpole.yaml", *ADVERSARY, "--set", TEAMS],
        ("policy.groups:", "dqn", "a2c, ppo"),
    ),
    "centralized critic on a single-agent env": (
        ["--set", "policy.critic=centralized"],
        ("policy.critic:", "one agent"),
    ),
    "centralized critic with an algorithm that has no grouped trainer": (
        ["--params", "configs/dqn-cartpole.yaml", *SIMPLE_SPREAD, "--set", "policy.critic=centralized"],
        ("policy.critic:", "dqn", "a2c, ppo"),
    ),
}


@pytest.mark.parametrize("label", list(GROUPS_CASES))
def test_groups_case_is_refused_in_one_line_and_writes_nothing(label: str, project: Path) -> None:
    args, fragments = GROUPS_CASES[label]
    before = snapshot(project)
    assert_refused(run_in_process(["train", *args], project), *fragments)
    assert snapshot(project) == before, "a refused command changed the project"


GAMES = """
import os
import signal
import sys
import time

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.classic.tictactoe.tictactoe import raw_env


def always_zero(observation, rng):
    return 0


def raises(observation, rng):
    raise RuntimeError("raises: no move today")


def exits(observation, rng):
    sys.exit(3)


def hangs(observation, rng):
    time.sleep(3600)


def ends_its_process(observation, rng):
    os._exit(0)


def kills_its_process(observation, rng):
    os.kill(os.getpid(), signal.SIGKILL)


class MaskedPair(ParallelEnv):
    \"\"\"Two agents choosing 0-2 (2 is never legal) for 5 steps; the mask in each observation, or in each info.\"\"\"

    metadata = {"name": "masked_pair"}

    def __init__(self, mask_in="observation"):
        self.possible_agents = ["a", "b"]
        self.mask_in = mask_in

    def observation_space(self, agent):
        board = spaces.Box(0.0, 1.0, (2,), np.float32)
        if self.mask_in == "observation":
            return spaces.Dict({"observation": board, "action_mask": spaces.MultiBinary(3)})
        return board

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _observe(self):
        board = np.zeros(2, np.float32)
        mask = np.array([1, 1, 0], np.int8)
        if self.mask_in == "observation":
            return {a: {"observation": board, "action_mask": mask} for a in self.agents}, {a: {} for a in self.agents}
        infos = {a: ({"action_mask": mask} if self.mask_in == "info" else {}) for a in self.agents}
        return {a: board for a in self.agents}, infos

    def reset(self, seed=None, options=None):
        self.agents, self.steps = list(self.possible_agents), 0
        return self._observe()

    def step(self, actions):
        self.steps += 1
        observations, infos = self._observe()
        done = self.steps >= 5
        rewards = {a: 0.0 for a in self.agents}
        ended = {a: done for a in self.agents}
        if done:
            self.agents = []
        return observations, rewards, ended, {a: False for a in ended}, infos


def masked_pair(mask_in="observation"):
    return MaskedPair(mask_in)


def rock(observation, rng):
    return 0


class Generous(raw_env):
    def step(self, action):
        super().step(action)
        if any(self.terminations.values()):
            for name in self.rewards:
                self.rewards[name] = 1.0


def generous():
    return Generous()
"""
TICTACTOE = ["--set", "env.id=pettingzoo:pettingzoo.classic.tictactoe_v3", "--set", "env.action_mask=observation"]
RANDOM_OPPONENT = ["--set", "env.opponent=rlcore.envs.opponents:random_legal"]
SELF_PLAY = ["--set", "env.self_play={save_steps: 64}"]
GAME_CAP = ["--set", "eval.max_episode_steps=9"]
PERFECT = "rlcore.envs.opponents:perfect_tictactoe"
QUICK_BOUND = ["--set", "env.user_code_timeout_seconds=1"]
INFO_MASKS = ["--set", "env.action_mask=info"]
OBS_MASKS = ["--set", "env.action_mask=observation"]
TURN_BASED_CASES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "an AEC game without env.opponent": (TICTACTOE, ("env.opponent: missing", "only an AEC env")),
    "an opponent that does not import": (
        [*TICTACTOE, "--set", "env.opponent=rlcore.envs.opponents:nobody"],
        ("env.opponent:", "nobody"),
    ),
    "an opponent that is not a function": (
        [*TICTACTOE, "--set", "env.opponent=rlcore.envs.turn_based:OPPONENT_STREAM"],
        ("env.opponent:", "not a function"),
    ),
    "an opponent that plays an illegal move": (
        [*TICTACTOE, "--set", "env.opponent=gamemod:always_zero"],
        ("env.opponent:", "illegal move 0"),
    ),
    "an AEC env with more than two agents": (
        ["--set", "env.id=pettingzoo:mpe2.simple_spread_v3", *RANDOM_OPPONENT],
        ("env.opponent:", "3 agents", "exactly two"),
    ),
    "a game that is not zero-sum": (
        ["--set", "env.id=pettingzoo:gamemod:generous", "--set", "env.action_mask=observation", *RANDOM_OPPONENT],
        ("env.opponent:", "not zero-sum"),
    ),
    "an opponent on a gymnasium env": (RANDOM_OPPONENT, ("env.opponent:", "CartPole-v1")),
    "env.agent_id on a turn-based game": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.agent_id=true"],
        ("env.agent_id:", "one agent"),
    ),
    "env.wrappers on a turn-based game": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.wrappers=[{wrapper: gymnasium.wrappers.ClipReward}]"],
        ("env.wrappers:", "PettingZoo"),
    ),
    "self-play on a single-agent env": (["--set", "env.self_play={}"], ("env.self_play:", "CartPole-v1")),
    "self-play on a game that is not zero-sum": (
        [
            "--set",
            "env.id=pettingzoo:gamemod:generous",
            "--set",
            "env.action_mask=observation",
            *RANDOM_OPPONENT,
            *SELF_PLAY,
        ],
        ("env.opponent:", "not zero-sum"),
    ),
    "self-play window < 1": ([*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.self_play={window: 0}"], ("window",)),
    "self-play ratio above 1": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.self_play={play_against_latest_model_ratio: 1.5}"],
        ("play_against_latest_model_ratio",),
    ),
    "self-play ratio below 0": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.self_play={play_against_latest_model_ratio: -0.1}"],
        ("play_against_latest_model_ratio",),
    ),
    "self-play save_steps < 1": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.self_play={save_steps: 0}"],
        ("save_steps",),
    ),
    "self-play swap_steps < 1": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.self_play={swap_steps: 0}"],
        ("swap_steps",),
    ),
    "self-play snapshot_actions neither greedy nor sample": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.self_play={snapshot_actions: argmax}"],
        ("snapshot_actions",),
    ),
    "self-play initial_elo negative": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.self_play={initial_elo: -5}"],
        ("initial_elo",),
    ),
    **{
        f"self-play elo_k {shown}": (
            [*TICTACTOE, *RANDOM_OPPONENT, "--set", f"env.self_play={{elo_k: {value}}}"],
            ("env.self_play.elo_k", expected),
        )
        for shown, value, expected in (
            ("0", "0", "must be > 0"),
            ("negative", "-16", "must be > 0"),
            ("above 400", "1000", "must be <= 400"),
            ("a word", "fast", "number"),
            ("quoted", "'16'", "string"),
            ("nan", ".nan", "finite"),
            ("a boolean", "true", "boolean"),
        )
    },
    "self-play with async vectorization": (
        [*TICTACTOE, *RANDOM_OPPONENT, *SELF_PLAY, "--set", "env.vectorization=async"],
        ("env.self_play:", "async"),
    ),
    "self-play with an algorithm that cannot": (
        [*TICTACTOE, *RANDOM_OPPONENT, *SELF_PLAY, "--set", "algo={name: dqn}"],
        ("env.self_play:", "dqn", "ppo and a2c"),
    ),
    "self-play fixed opponent that does not import": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.self_play={fixed_opponents: {rlcore.envs.opponents:nobody: 0.2}}"],
        ("fixed_opponents", "nobody"),
    ),
    "an opponent that fails on the game's observations": (
        [
            "--set",
            "env.id=pettingzoo:pettingzoo.classic.rps_v2",
            "--set",
            "env.opponent=rlcore.envs.opponents:one_step_lookahead",
        ],
        ("env.opponent:", "one_step_lookahead failed playing", "rps_v2"),
    ),
    "self-play board frames on a game without known frames": (
        [
            "--set",
            "env.id=pettingzoo:pettingzoo.classic.rps_v2",
            "--set",
            "env.opponent=gamemod:rock",
            "--set",
            "env.self_play={board_frames: true}",
        ],
        ("env.self_play.board_frames:", "rps_v2", "(3, 3, 2)"),
    ),
    "self-play opening_moves negative": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.self_play={opening_moves: -1}"],
        ("opening_moves",),
    ),
    "self-play fixed opponent probability 0": (
        [
            *TICTACTOE,
            *RANDOM_OPPONENT,
            "--set",
            "env.self_play={fixed_opponents: {rlcore.envs.opponents:random_legal: 0}}",
        ],
        ("fixed_opponents", "random_legal", "(0, 1]"),
    ),
    "self-play fixed opponents' probabilities above 1": (
        [
            *TICTACTOE,
            *RANDOM_OPPONENT,
            "--set",
            "env.self_play={fixed_opponents: {rlcore.envs.opponents:random_legal: 0.6, "
            "rlcore.envs.opponents:one_step_lookahead: 0.6}}",
        ],
        ("fixed_opponents", "sum to 1.2"),
    ),
    "eval.opponents on a gymnasium env": (
        ["--set", "eval.opponents={perfect: rlcore.envs.opponents:perfect_tictactoe}"],
        ("eval.opponents:", "turn-based", "CartPole-v1"),
    ),
    "eval.opponents not a mapping": (
        [*TICTACTOE, *RANDOM_OPPONENT, *GAME_CAP, "--set", "eval.opponents=[rlcore.envs.opponents:random_legal]"],
        ("eval.opponents:", "dictionary"),
    ),
    "an eval.opponents name that is empty": (
        [*TICTACTOE, *RANDOM_OPPONENT, *GAME_CAP, "--set", "eval.opponents={'': rlcore.envs.opponents:random_legal}"],
        ("eval.opponents:", "'' is not a name"),
    ),
    "an eval.opponents name that is not an identifier": (
        [
            *TICTACTOE,
            *RANDOM_OPPONENT,
            *GAME_CAP,
            "--set",
            "eval.opponents={'a-b': rlcore.envs.opponents:random_legal}",
        ],
        ("eval.opponents:", "'a-b' is not a name"),
    ),
    "an eval.opponents path that does not import": (
        [*TICTACTOE, *RANDOM_OPPONENT, *GAME_CAP, "--set", "eval.opponents={perfect: rlcore.envs.opponents:nobody}"],
        ("eval.opponents.perfect:", "nobody"),
    ),
    "an eval.opponents path that is not a function": (
        [
            *TICTACTOE,
            *RANDOM_OPPONENT,
            *GAME_CAP,
            "--set",
            "eval.opponents={n: rlcore.envs.turn_based:OPPONENT_STREAM}",
        ],
        ("eval.opponents.n:", "not a function"),
    ),
    "one eval.opponents path under two names": (
        [*TICTACTOE, *RANDOM_OPPONENT, *GAME_CAP, "--set", f"eval.opponents={{a: {PERFECT}, b: {PERFECT}}}"],
        ("eval.opponents.b:", "eval.opponents.a already"),
    ),
    "an eval.opponents opponent that plays an illegal move": (
        [*TICTACTOE, *RANDOM_OPPONENT, *GAME_CAP, "--set", "eval.opponents={zero: gamemod:always_zero}"],
        ("eval.opponents.zero:", "illegal move 0"),
    ),
    "an eval.opponents opponent of another game": (
        [
            "--set",
            "env.id=pettingzoo:pettingzoo.classic.connect_four_v3",
            "--set",
            "env.action_mask=observation",
            *RANDOM_OPPONENT,
            "--set",
            "eval.max_episode_steps=21",
            "--set",
            f"eval.opponents={{perfect: {PERFECT}}}",
        ],
        ("eval.opponents.perfect:", "ValueError", "connect_four_v3"),
    ),
    # issue 37: user code that misbehaves in its test game, under each key an opponent is given
    "an opponent that calls sys.exit": (
        [*TICTACTOE, "--set", "env.opponent=gamemod:exits"],
        ("env.opponent: gamemod:exits called sys.exit(3) while playing its test game of",),
    ),
    "an opponent that hangs": (
        [*TICTACTOE, "--set", "env.opponent=gamemod:hangs", *QUICK_BOUND],
        ("env.opponent: gamemod:hangs did not finish within 1 s (env.user_code_timeout_seconds)",),
    ),
    "an opponent that ends its process": (
        [*TICTACTOE, "--set", "env.opponent=gamemod:ends_its_process"],
        ("env.opponent: gamemod:ends_its_process ended its process (exit status 0, no result sent)",),
    ),
    "an opponent that kills its process": (
        [*TICTACTOE, "--set", "env.opponent=gamemod:kills_its_process"],
        ("env.opponent: gamemod:kills_its_process crashed its process (killed by SIGKILL)",),
    ),
    "a self-play fixed opponent that raises": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.self_play={fixed_opponents: {gamemod:raises: 0.2}}"],
        ("env.self_play.fixed_opponents: gamemod:raises failed playing", "RuntimeError: raises: no move today"),
    ),
    "a self-play fixed opponent that plays an illegal move": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.self_play={fixed_opponents: {gamemod:always_zero: 0.2}}"],
        ("env.self_play.fixed_opponents: gamemod:always_zero played the illegal move 0",),
    ),
    "a self-play fixed opponent that calls sys.exit": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.self_play={fixed_opponents: {gamemod:exits: 0.2}}"],
        ("env.self_play.fixed_opponents: gamemod:exits called sys.exit(3)",),
    ),
    "an eval.opponents opponent that hangs": (
        [*TICTACTOE, *RANDOM_OPPONENT, *GAME_CAP, *QUICK_BOUND, "--set", "eval.opponents={slow: gamemod:hangs}"],
        ("eval.opponents.slow: gamemod:hangs did not finish within 1 s",),
    ),
    "an eval.opponents opponent that ends its process": (
        [*TICTACTOE, *RANDOM_OPPONENT, *GAME_CAP, "--set", "eval.opponents={gone: gamemod:ends_its_process}"],
        ("eval.opponents.gone: gamemod:ends_its_process ended its process",),
    ),
    "env.user_code_timeout_seconds zero": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.user_code_timeout_seconds=0"],
        ("env.user_code_timeout_seconds:", "must be > 0"),
    ),
    "env.user_code_timeout_seconds above an hour": (
        [*TICTACTOE, *RANDOM_OPPONENT, "--set", "env.user_code_timeout_seconds=3601"],
        ("env.user_code_timeout_seconds:", "3600"),
    ),
    "env.user_code_timeout_seconds a string": (
        ["--set", "env.user_code_timeout_seconds=soon"],
        ("env.user_code_timeout_seconds:",),
    ),
    "env.action_mask null on a game whose observations carry a mask": (
        ["--set", "env.id=pettingzoo:pettingzoo.classic.tictactoe_v3", *RANDOM_OPPONENT],
        ("env.action_mask: null, but pettingzoo:pettingzoo.classic.tictactoe_v3's observations carry", "observation"),
    ),
    "env.action_mask null on a Parallel env whose observations carry a mask": (
        ["--set", "env.id=pettingzoo:gamemod:masked_pair"],
        ("env.action_mask: null, but pettingzoo:gamemod:masked_pair's observations carry",),
    ),
    "env.action_mask info on a Parallel env whose infos carry no mask": (
        ["--set", "env.id=pettingzoo:gamemod:masked_pair", "--set", "env.kwargs={mask_in: none}", *INFO_MASKS],
        ("env.action_mask: info, but pettingzoo:gamemod:masked_pair gave no infos['a']['action_mask']", "first reset"),
    ),
    "env.action_mask info on a Parallel env whose infos carry masks": (
        ["--set", "env.id=pettingzoo:gamemod:masked_pair", "--set", "env.kwargs={mask_in: info}", *INFO_MASKS],
        ("env.action_mask: info:", "observations only"),
    ),
    "env.action_mask observation on a Parallel env whose observations carry none": (
        ["--set", "env.id=pettingzoo:gamemod:masked_pair", "--set", "env.kwargs={mask_in: info}", *OBS_MASKS],
        ("env.action_mask: observation, but pettingzoo:gamemod:masked_pair's agents observe",),
    ),
}
"""Two-player turn-based games (``env.opponent``, issue 29) and PettingZoo action masks: ``rlcore train ARGS``, refused
before anything is written."""


@pytest.mark.parametrize("label", list(TURN_BASED_CASES))
def test_turn_based_case_is_refused_in_one_line_and_writes_nothing(label: str, project: Path, modules: Path) -> None:
    """Nothing written but ``runs/error.log``, the traceback of an opponent's code that raised."""
    args, fragments = TURN_BASED_CASES[label]
    before = snapshot(project, ignore=("runs/error.log",))
    assert_refused(run_in_process(["train", *args], project), *fragments)
    assert snapshot(project, ignore=("runs/error.log",)) == before, "a refused command changed the project"


HOSTILE_WRAPPERS = """
import gymnasium as gym

CONSTANT = 3


def not_an_env(env):
    return "not an env"


class RaisesInInit(gym.Wrapper):
    def __init__(self, env, level=1):
        super().__init__(env)
        raise KeyError("hostilemod: no such level")
"""
HOSTILE_CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "wrapper module raises at import": ("{wrapper: raisingmod.Wrap}", ("env.wrappers.0.wrapper:", "RuntimeError")),
    "wrapper module has a syntax error": ("{wrapper: syntaxmod.Wrap}", ("env.wrappers.0.wrapper:", "SyntaxError")),
    "wrapper path names a constant": ("{wrapper: hostilemod.CONSTANT}", ("env.wrappers.0.wrapper:", "not a wrapper")),
    "wrapper returns a non-env": ("{wrapper: hostilemod.not_an_env}", ("env.wrappers.0.wrapper:", "not a gymnasium")),
    "wrapper raises in __init__": ("{wrapper: hostilemod.RaisesInInit}", ("env.wrappers.0.wrapper:", "KeyError")),
    "wrapper kwarg it does not take": (
        "{wrapper: hostilemod.RaisesInInit, kwargs: {levle: 2}}",
        ("env.wrappers.0.kwargs:", "'levle'"),
    ),
}
"""Hostile user code in ``env.wrappers`` (issue 26): what the one line of ``rlcore train`` must hold."""


@pytest.mark.parametrize("label", list(HOSTILE_CASES))
def test_hostile_wrapper_is_refused_in_one_line_and_writes_only_its_error_log(
    label: str, project: Path, modules: Path
) -> None:
    """The traceback of the user's code goes to ``error.log`` (of the run, or ``runs/`` before the params load):
    the one file a refusal may write; nothing else changes."""
    wrapper, fragments = HOSTILE_CASES[label]
    logs = ("runs/error.log", *(f"runs/{name}/error.log" for name in FINISHED_RUNS))
    before = snapshot(project, ignore=logs)
    assert_refused(run_in_process(["train", "--set", f"env.wrappers=[{wrapper}]"], project), *fragments)
    assert snapshot(project, ignore=logs) == before, "a refused command changed the project"


@pytest.mark.parametrize("label", [*SECOND_ROUND, *SEEDS_CASES])
def test_second_round_case_is_refused_in_one_line_and_writes_nothing(label: str, project: Path) -> None:
    args, fragments = SECOND_ROUND[label] if label in SECOND_ROUND else SEEDS_CASES[label]
    locks = tuple(f"runs/{name}/.lock" for name in FINISHED_RUNS)  # an empty lock file: --resume-from takes the lock
    before = snapshot(project, ignore=locks)
    line = assert_refused(run_in_process(["train", *args], project), *fragments)
    assert "weights_only" not in line  # torch's advice to load unsafely is never passed on
    assert snapshot(project, ignore=locks) == before, "a refused command changed the project"


# --- action masks (issue 29): env.action_mask ---------------------------------------------------------------------

MASK_WRAPPERS = """
import gymnasium as gym
import numpy as np


class _Mask(gym.Wrapper):
    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "action_mask": self.mask(info["action_mask"])}


class ShortMask(_Mask):
    def mask(self, mask):
        return mask[:5]


class FloatMask(_Mask):
    def mask(self, mask):
        return mask.astype(np.float32)


class NoLegalAction(_Mask):
    def mask(self, mask):
        return np.zeros_like(mask)
"""
TAXI_MASKED = ["--set", "env.id=Taxi-v4", "--set", "env.action_mask=info"]
MASK_CASES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "masks on a Box action space": (
        ["--set", "env.id=Pendulum-v1", "--set", "env.action_mask=info"],
        ("env.action_mask:", "Pendulum-v1", "Box action space", "Discrete"),
    ),
    "info masks from an env that gives none": (
        ["--set", "env.action_mask=info"],
        ("env.action_mask:", "CartPole-v1", "no info['action_mask']"),
    ),
    "observation masks from a non-Dict observation": (
        ["--set", "env.id=Taxi-v4", "--set", "env.action_mask=observation"],
        ("env.action_mask:", "Taxi-v4", "without an 'action_mask' key"),
    ),
    "a mask of the wrong shape": (
        [*TAXI_MASKED, "--set", "env.wrappers=[{wrapper: maskmod.ShortMask}]"],
        ("env.action_mask:", "Taxi-v4", "shape (5,)", "expected (6,)"),
    ),
    "a float mask": (
        [*TAXI_MASKED, "--set", "env.wrappers=[{wrapper: maskmod.FloatMask}]"],
        ("env.action_mask:", "Taxi-v4", "dtype float32"),
    ),
    "an all-false mask": (
        [*TAXI_MASKED, "--set", "env.wrappers=[{wrapper: maskmod.NoLegalAction}]"],
        ("env.action_mask:", "Taxi-v4", "no legal action"),
    ),
    "masks with the env's own batched implementation": (
        ["--set", "env.vectorization=vector_entry_point", "--set", "env.action_mask=info"],
        ("env.vectorization:", "env.action_mask"),
    ),
    "masks for an algorithm that does not apply them": (
        ["--params", "configs/sac-discrete-cartpole.yaml", "--set", "env.action_mask=info"],
        ("env.action_mask:", "sac does not apply action masks", "ppo"),
    ),
}
"""``env.action_mask``: ``rlcore train ARGS``, refused in one line before anything is written."""


@pytest.mark.parametrize("label", list(MASK_CASES))
def test_action_mask_case_is_refused_in_one_line_and_writes_nothing(label: str, project: Path, modules: Path) -> None:
    args, fragments = MASK_CASES[label]
    before = snapshot(project)
    assert_refused(run_in_process(["train", *args], project), *fragments)
    assert snapshot(project) == before, "a refused command changed the project"


SUBPROCESS_SAMPLE = (
    "billion laughs as seed",  # hung 60 s
    "binary garbage 4KB",  # UnicodeDecodeError traceback
    "--set env.id=LunarLander-v3",  # DependencyNotInstalled traceback
    "DQN huge buffer_size",  # refused by the memory estimate, after the env is built
)


# --- the project a case runs in ---------------------------------------------------------------------------------


def _bomb(levels: int = 9) -> str:
    """A "billion laughs" YAML flow sequence: 9**levels strings, a few hundred bytes."""
    items = [f"&a0 [{', '.join(['lol'] * 9)}]"]
    items += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "[" + ", ".join(items) + "]"


def _params_text(preset: str = "params.yaml") -> str:
    return preset_text(preset)


def _with_value(path: tuple[str, ...], yaml_text: str, preset: str = "params.yaml") -> str:
    """``preset`` with the value at ``path`` replaced by the YAML text ``yaml_text`` (verbatim)."""
    tree = yaml.safe_load(_params_text(preset))
    node = tree
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = "PLACEHOLDER_VALUE"
    return yaml.safe_dump(tree, sort_keys=False).replace("PLACEHOLDER_VALUE", yaml_text)


def generated_file(label: str) -> bytes:
    """The params files the probe did not keep, made again from their label."""
    text = _params_text()
    bombs = {
        "billion laughs as seed": ("seed",),
        "billion laughs as name": ("name",),
        "billion laughs as hidden_sizes": ("policy", "hidden_sizes"),
    }
    if label in bombs:
        return _with_value(bombs[label], _bomb()).encode()
    if label == "billion laughs as sweep choices":
        space = "{algo.ent_coef: {type: categorical, choices: " + _bomb() + "}}"
        return _with_value(("sweep", "space"), space).encode()
    if label == "non-UTF-8 latin-1 name":
        tree = yaml.safe_load(text)
        tree["name"] = "caf\u00e9"
        return yaml.safe_dump(tree, sort_keys=False, allow_unicode=True).encode("latin-1")
    if label == "non-UTF-8 latin-1 comment":
        return ("# caf\u00e9\n" + text).encode("latin-1", errors="replace")
    if label == "UTF-16 with BOM":
        return text.encode("utf-16")
    if label == "UTF-8 BOM + params":
        return b"\xef\xbb\xbf" + text.encode()
    raise AssertionError(f"no file for {label!r}")


def case_args(case: dict[str, Any], root: Path) -> list[str]:
    """The case's command line (without ``rlcore``), with its params file written under ``root``."""
    args = shlex.split(case["cmd"])[1:]
    if "--params" in args:
        name = args[args.index("--params") + 1]
        if name.startswith("cases/"):
            path = root / name
            path.parent.mkdir(exist_ok=True)
            if case.get("file_text") is not None:
                path.write_text(case["file_text"])
            elif case.get("file_base64") is not None:
                path.write_bytes(base64.b64decode(case["file_base64"]))
            else:
                path.write_bytes(generated_file(case["label"]))
    return args


def fake_finished_run(run_dir: Path) -> None:
    """What a finished run leaves that a refused command must not touch: checkpoints, the summary, the curve."""
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "dvclive").mkdir()
    for step in (4096, 8192):
        (run_dir / "checkpoints" / f"step_{step:010d}.pt").write_bytes(os.urandom(512))
    (run_dir / "train_summary.json").write_text(json.dumps({"env_steps": 8192, "stop_reason": "budget"}))
    (run_dir / "dvclive" / "metrics.json").write_text(json.dumps({"step": 8192, "eval": {"mean_return": 500.0}}))


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Env modules named by ``env.id=module:Env-v0`` whose import raises, and hostile wrappers (``hostilemod``),
    importable while the tests run."""
    folder = tmp_path_factory.mktemp("modules")
    (folder / "raisingmod.py").write_text('raise RuntimeError("raisingmod: boom at import")\n')
    (folder / "syntaxmod.py").write_text("def broken(:\n    pass\n")
    (folder / "hostilemod.py").write_text(HOSTILE_WRAPPERS)
    (folder / "maskmod.py").write_text(MASK_WRAPPERS)
    (folder / "gamemod.py").write_text(GAMES)
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, modules: Path) -> Path:
    """A project with the presets, finished runs for every preset's name, a selected model and a dataset."""
    root = tmp_path_factory.mktemp("template") / "project"
    root.mkdir()
    for name in ("params.yaml", "offline.yaml", "dvc.yaml", ".dvcignore", "prefect.toml"):
        shutil.copy(PROJECT / name, root / name)
    shutil.copytree(PROJECT / "configs", root / "configs")
    for name in FINISHED_RUNS:
        fake_finished_run(root / "runs" / name)
    (root / "models" / "best").mkdir(parents=True)
    import torch

    torch.save({"policy": {"weight": torch.zeros(4, 2)}, "meta": {"algo": "ppo"}}, root / "models/best/policy.pt")
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "data").mkdir()
    pq.write_table(pa.table({"episode_id": [0, 0], "reward": [1.0, 1.0]}), root / "data/dataset.parquet")
    return root


@pytest.fixture
def project(template: Path, tmp_path: Path) -> Path:
    return shutil.copytree(template, tmp_path / "project")


def snapshot(root: Path, ignore: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every file under ``root`` (hidden ones too), and every folder."""
    found = {}
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        if name in ignore:
            continue
        found[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "<folder>"
    return found


# --- the 72 cases -------------------------------------------------------------------------------------------------


def test_every_case_is_either_refused_or_named_valid() -> None:
    labels = [case["label"] for case in CASES]
    assert len(labels) == 72 == len(set(labels))
    assert set(labels) == set(REFUSED) | set(VALID)
    assert not set(REFUSED) & set(VALID)


@pytest.mark.parametrize("case", [c for c in CASES if c["label"] in REFUSED], ids=lambda c: c["label"][:60])
def test_case_is_refused_in_one_line_and_writes_nothing(case: dict[str, Any], project: Path) -> None:
    args = case_args(case, project)
    logs = ("runs/error.log",)  # the traceback of an env module that raised at import: the one file a refusal writes
    before = snapshot(project, ignore=logs)
    outcome = run_in_process(args, project)
    assert_refused(outcome, *REFUSED[case["label"]])
    assert snapshot(project, ignore=logs) == before, "a refused command changed the project"


@pytest.mark.parametrize("case", [c for c in CASES if c["label"] in VALID], ids=lambda c: c["label"][:60])
def test_case_is_valid_input(case: dict[str, Any], project: Path) -> None:
    """Valid input (see :data:`VALID` for why): the params load; a missing section or key has its defaults."""
    args = case_args(case, project)
    params_file = args[args.index("--params") + 1] if "--params" in args else "params.yaml"
    overrides = [args[i + 1] for i, arg in enumerate(args) if arg == "--set"]
    with contextlib.chdir(project):
        params = load_params(params_file, overrides)
        reference = load_params("params.yaml")
    label = case["label"]
    if label.startswith("missing section ") or label.startswith("missing key "):
        key = label.split()[-1]
        defaults = params_model(params.algo.name).model_fields[key].get_default(call_default_factory=True)
        assert getattr(params, key) == defaults
        assert key not in yaml.safe_load(case["file_text"])
    elif label == "UTF-8 BOM + params":
        assert params == reference
    elif label == "--set algo.batch_size=1000000000":
        import gymnasium as gym

        from rlcore.trainers.memory_estimate import check_resources

        env = gym.make(params.env.id)
        check_resources(params, env.observation_space, env.action_space)  # nothing of that size is allocated
    elif label == "--set env.id=HalfCheetah-v5":
        pytest.importorskip("mujoco")
        import gymnasium as gym

        from rlcore.envs.vector import check_spaces
        from rlcore.trainers.memory_estimate import check_resources

        env = gym.make(params.env.id)
        check_spaces(params.env.id, env.observation_space, env.action_space)
        check_resources(params, env.observation_space, env.action_space)
    else:
        assert params.env.kwargs == {"render_mode": "human"}


@pytest.mark.parametrize(
    "label",
    # One real process in the fast suite; the in-process test above refuses every case, these included.
    [
        label if label == SUBPROCESS_SAMPLE[0] else pytest.param(label, marks=pytest.mark.slow)
        for label in SUBPROCESS_SAMPLE
    ],
)
def test_a_sample_through_the_real_command(label: str, project: Path, modules: Path) -> None:
    case = next(c for c in CASES if c["label"] == label)
    args = case_args(case, project)
    before = snapshot(project)
    started = time.monotonic()
    result = rlcore(*args, cwd=project, check=False, timeout=TIME_LIMIT + 30)
    assert time.monotonic() - started < TIME_LIMIT + 30
    one_line_error(result, *REFUSED[label])
    assert snapshot(project) == before


# --- the fuzzer ---------------------------------------------------------------------------------------------------


def _members(annotation: Any) -> list[Any]:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        return [member for arg in get_args(annotation) for member in _members(arg)]
    return [annotation]


def _bounds(field: Any) -> dict[str, float]:
    """gt/ge/lt/le of a field, from its own metadata and from an ``Annotated`` member of a union."""
    metadata = list(field.metadata)
    for arg in get_args(field.annotation):
        if get_origin(arg) is Annotated:
            for extra in get_args(arg)[1:]:
                metadata.extend(getattr(extra, "metadata", [extra]))
    found: dict[str, float] = {}
    for item in metadata:
        for name in ("gt", "ge", "lt", "le"):
            if isinstance(item, getattr(annotated_types, name.capitalize())):
                found[name] = getattr(item, name)
    return found


def leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every key of the params tree with its pydantic field; a section is a key too (its value must be a mapping)."""
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        annotation = field.annotation
        yield path, field
        for member in _members(annotation):  # a section, or an optional one (``policy.memory``: a section or null)
            if isinstance(member, type) and issubclass(member, BaseModel):
                yield from leaves(member, path)


NAME_LIKE = {
    ("name",): ["..", ".", "-rf", "a" * 101, "a/b", "", "x y", "sweep", "sweeps"],
    ("env", "id"): ["NoSuchEnv-v0", "nosuchmodule:X-v0", "LunarLander-v3", "CartPole-v99"],
    ("env", "kwargs"): [
        {"bogus_kwarg_zz": 1},
        {"max_episode_steps": 0},
        {"max_episode_steps": "abc"},
        {"max_episode_steps": 1.5},
        {"render_mode": "bogus"},
    ],
    ("env", "wrappers"): [
        [{"wrapper": "no.such.Wrapper"}],
        [{"wrapper": "gymnasium.wrappers.ClipReward", "x": 1}],
        "x",
    ],
    ("policy", "hidden_sizes"): [[], [0], [-3], [10**12], [100_000, 100_000], [1] * 101, ["wide"], ["64"]],
    ("policy", "groups"): [{"a": ["*"]}, {"../x": ["*"]}, {"a": []}, {"a": [""]}, {}, "x", [1]],
    ("eval", "settings"): [
        [{"name": "../x"}],
        [{"name": "x|y z"}],
        [{"name": "a" * 65}],
        [{"name": f"s{i}"} for i in range(65)],
    ],
    ("env", "curriculum"): [[{"name": "a/b"}], [{"name": "x\ny"}]],
    ("algo", "name"): ["bogus", 5, ["ppo"], None],
    ("train", "seeds"): [[], [-1], [0, 0], [2**32], [0, 1.5], [1.0, 2.0], [True], list(range(65))],
    ("dataset", "agents"): [[]],
    ("dataset", "groups"): [[]],
}
"""Invalid values of keys whose type alone does not say what is invalid."""
HUGE = {"n_steps": 10**12, "buffer_size": 10**12}
"""Sizes that cannot be allocated (refused by the memory estimate, once the env's spaces are known)."""


def invalid_values(path: tuple[str, ...], field: Any) -> st.SearchStrategy[Any]:
    """Values ``path`` must refuse, from its type and bounds."""
    choices: list[Any] = list(NAME_LIKE.get(path, []))
    strategies: list[st.SearchStrategy[Any]] = []
    members = _members(field.annotation)
    literal = [m for m in members if get_origin(m) is Literal]
    numeric = [m for m in members if m in (int, float)]
    if path[-1] in HUGE and path[0] == "algo":
        choices.append(HUGE[path[-1]])
    if any(isinstance(member, type) and issubclass(member, BaseModel) for member in members):
        choices += [5, "text", [1, 2]]
    elif numeric:
        choices += ["abc", [1, 2], {"a": 1}]
        if str not in members:
            choices.append("450")  # a quoted number: a string, never converted
        if bool not in members:
            choices.append(True)
        if float in numeric:
            choices += [math.nan, math.inf, -math.inf, "nan", "1e999"]
        else:
            choices += [1.5, 2.0]  # a whole float is not an integer either (seeds: [1.0, 2.0] are not seeds 1 and 2)
        bounds = _bounds(field)
        if "ge" in bounds:
            strategies.append(st.integers(max_value=math.ceil(bounds["ge"]) - 1, min_value=-(10**30)))
        if "gt" in bounds:
            strategies.append(st.integers(max_value=math.floor(bounds["gt"]), min_value=-(10**30)))
        if "le" in bounds:
            strategies.append(st.integers(min_value=math.floor(bounds["le"]) + 1, max_value=10**30))
        if "lt" in bounds:
            strategies.append(st.integers(min_value=math.ceil(bounds["lt"]), max_value=10**30))
    elif literal:
        choices += ["bogus-choice", 7, [1]]
    elif bool in members:
        choices += ["maybe", 2, [True], {"a": 1}]
    elif str in members:
        choices += [[1], {"a": 1}, 12345]
    else:
        origins = {get_origin(m) for m in members}
        if list in origins or dict in origins:
            choices += [5, "text"] + ([{"a": 1}] if list in origins else [[1, 2]])
            for member in members:
                item = get_args(member)[0] if get_origin(member) is list and get_args(member) else None
                if item in (int, float):
                    choices.append(["x"])
                if item is int:
                    choices.append([1.0, 2.0])
                elif item is str:
                    choices.append([12345])
    if choices:
        strategies.append(st.sampled_from(choices))
    assert strategies, f"no invalid value for {'.'.join(path)}"
    return st.one_of(strategies)


FIELDS = [(algo, path, field) for algo in PRESETS for path, field in leaves(params_model(algo))]


def base_tree(algo: str) -> dict[str, Any]:
    tree = yaml.safe_load(_params_text(PRESETS[algo]))
    if algo == "td3bc":
        tree["env"] = {"id": "Pendulum-v1"}
    if algo in ("td3bc", "iql"):
        tree["algo"] = {"name": algo}
    return tree


def set_path(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path[-1]] = value


def yaml_text(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**9).removesuffix("\n...\n").strip()


@pytest.fixture(scope="module")
def fuzz_project(template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shutil.copytree(template, tmp_path_factory.mktemp("fuzz") / "project")


FUZZ_FILE = "fuzz.yaml"
FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def refused_and_untouched(root: Path, args: list[str], content: bytes | None = None) -> str:
    """Write the fuzz params file (if any), run ``args``, assert the refusal and that nothing else changed."""
    if content is not None:
        (root / FUZZ_FILE).write_bytes(content)
    before = snapshot(root, ignore=(FUZZ_FILE,))
    outcome = run_in_process(args, root)
    after = snapshot(root, ignore=(FUZZ_FILE,))
    assert after == before, f"{outcome!r}\nchanged: {sorted(set(after.items()) ^ set(before.items()))[:10]}"
    return assert_refused(outcome)


@settings(FUZZ, max_examples=300)
@given(data=st.data())
def test_fuzz_invalid_values_are_refused(fuzz_project: Path, data: st.DataObject) -> None:
    algo, path, field = data.draw(st.sampled_from(FIELDS), label="key")
    value = data.draw(invalid_values(path, field), label="value")
    as_override = data.draw(st.booleans(), label="as --set")
    tree = base_tree(algo)
    key = ".".join(path)
    if as_override and algo in ("ppo", "dqn", "sac", "bc"):
        args = ["train", "--params", PRESETS[algo], "--set", f"{key}={yaml_text(value)}"]
        line = refused_and_untouched(fuzz_project, args)
    else:
        set_path(tree, path, value)
        content = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True).encode()
        line = refused_and_untouched(fuzz_project, ["train", "--params", FUZZ_FILE], content)
    assert path[0] in line, line  # the key, or its section (a check across keys names the section's other key)


STAGES = ["train", "evaluate", "select", "export", "collect"]


@settings(FUZZ, max_examples=100)
@given(data=st.data())
def test_fuzz_unknown_keys_are_refused_at_every_level(fuzz_project: Path, data: st.DataObject) -> None:
    algo = data.draw(st.sampled_from(sorted(PRESETS)), label="algo")
    sections = [()] + [path for path, field in leaves(params_model(algo)) if _is_section(field)]
    section = data.draw(st.sampled_from(sections), label="section")
    name = data.draw(st.sampled_from(["bogus_key", "lrr", "n_step_s", "Seed", "env_id", "x" * 50]), label="name")
    tree = base_tree(algo)
    set_path(tree, (*section, name), data.draw(st.sampled_from([1, "a", None, [1], {"b": 2}]), label="value"))
    stage = data.draw(st.sampled_from(STAGES), label="stage")
    content = yaml.safe_dump(tree, sort_keys=False).encode()
    line = refused_and_untouched(fuzz_project, [stage, "--params", FUZZ_FILE], content)
    assert "unknown key" in line and name in line, line


def _is_section(field: Any) -> bool:
    return isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)


BREAKERS = [
    "bogus_zz: [unclosed\n",
    "bogus_zz: {a: 1\n",
    "\tbogus_zz: 1\n",
    "bogus_zz: *undefined_alias\n",
    "bogus_zz: 'unterminated\n",
    "bogus_zz: &loop [*loop]\n",
    "bogus_zz: !!python/object/apply:os.system [ls]\n",
    f"bogus_zz: {_bomb()}\n",
    "- a list item among keys\n",
    "bogus_zz: a: b\n",
    "? [unhashable, key]\n: 1\n",
    'bogus_zz: "\\q"\n',
    "bogus_zz: " + "[" * 200 + "]" * 200 + "\n",
    "bogus_zz: \x07\n",
    "%YAML 9.9\n---\n",
    "bogus_zz: 2001-13-45\n",
    "bogus_zz: !!int abc\n",
    "bogus_zz: !!timestamp bogus\n",
    "--- !!map\n---\n",
]


@st.composite
def malformed_files(draw: st.DrawFn) -> bytes:
    """A params file that is broken: YAML that does not parse or holds an unknown key, binary, other encodings."""
    kind = draw(st.sampled_from(["breaker", "binary", "text", "encoding", "empty"]))
    text = _params_text(draw(st.sampled_from(sorted(set(PRESETS.values())))))
    if kind == "breaker":
        lines = text.splitlines(keepends=True)
        at = draw(st.integers(0, len(lines)))
        return "".join([*lines[:at], draw(st.sampled_from(BREAKERS)), *lines[at:]]).encode()
    if kind == "binary":
        return draw(st.binary(max_size=4096))
    if kind == "text":
        return draw(st.text(max_size=500)).encode("utf-8", errors="surrogatepass")
    if kind == "encoding":
        encoding = draw(st.sampled_from(["utf-16", "utf-16-be", "utf-32", "cp1252"]))
        return ("# r\u00e9sum\u00e9\n" + text).encode(encoding, errors="replace")
    return draw(st.sampled_from([b"", b"\n\n", b"# only a comment\n", b"null\n", b"~\n", b"---\n...\n"]))


@settings(FUZZ, max_examples=100)
@given(content=malformed_files(), stage=st.sampled_from(STAGES))
def test_fuzz_malformed_files_are_refused(fuzz_project: Path, content: bytes, stage: str) -> None:
    line = refused_and_untouched(fuzz_project, [stage, "--params", FUZZ_FILE], content)
    assert FUZZ_FILE in line, line


DATASET_AGENTS_CASES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "dataset.agents empty": (["--set", "dataset.agents=[]"], ("dataset.agents",)),
    "dataset.agents not a list of names": (["--set", "dataset.agents=agent_0"], ("dataset.agents",)),
    "dataset.groups empty": (["--set", "dataset.groups=[]"], ("dataset.groups",)),
    "dataset.groups not a list of names": (["--set", "dataset.groups=good"], ("dataset.groups",)),
    "dataset.groups not names": (["--set", "dataset.groups=[{a: 1}]"], ("dataset.groups",)),
    "dataset.agents and dataset.groups both set": (
        ["--set", "dataset.agents=[agent_0]", "--set", "dataset.groups=[good]"],
        ("dataset.groups:", "at most one of dataset.agents and dataset.groups"),
    ),
}
"""``dataset.agents`` and ``dataset.groups`` (issue 29, multi-agent datasets): ``rlcore train ARGS``, refused before
anything is written. An agent or group absent from the dataset, or a dataset without agents or groups, is refused
when the dataset is read (tests/faults/test_dataset_cases.py, tests/test_multiagent_datasets.py)."""


@pytest.mark.parametrize("label", list(DATASET_AGENTS_CASES))
def test_dataset_agents_and_groups_case_is_refused_in_one_line_and_writes_nothing(label: str, project: Path) -> None:
    args, fragments = DATASET_AGENTS_CASES[label]
    before = snapshot(project)
    assert_refused(run_in_process(["train", *args], project), *fragments)
    assert snapshot(project) == before, "a refused command changed the project"
