"""Benchmark: one vector step of the presets' envs, gymnasium's vector env against envpool's C++ pool, microseconds.

Prints one JSON line. For each env and number of copies: gymnasium's vector env as rlcore builds it for
``vectorization: auto`` (CartPole's own ``vector_entry_point``, a ``SyncVectorEnv`` otherwise) and
``envpool.make_gymnasium`` with the same copies, each stepped with fixed actions after a warm-up; the median of
``--repeats`` interleaved blocks of ``--steps`` steps (microseconds per vector step, one process, one thread). Issue
40 asked whether envpool pays for the classic-control and MuJoCo presets; it is not a dependency of rlcore: run this
where envpool is installed (``pip install envpool``; its 1.x wheels need Python >= 3.12, and the 0.x line for 3.11
imports the old ``gym`` package). Without envpool the line says so and measures gymnasium only.

    python benchmarks/envpool_stepping.py [--copies 1 3 8 16] [--envs CartPole-v1 Pendulum-v1 HalfCheetah-v5 Hopper-v5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

StepFn = Callable[[np.ndarray], Any]


def actions_of(space: gym.Space, copies: int) -> np.ndarray:
    """Fixed actions for ``copies`` envs: action 0 (Discrete), the middle of the box (Box)."""
    if isinstance(space, gym.spaces.Discrete):
        return np.zeros(copies, dtype=np.int64)
    assert isinstance(space, gym.spaces.Box)
    middle = ((space.low + space.high) / 2).astype(np.float32)
    return np.repeat(middle[None], copies, axis=0)


def block_microseconds(step: StepFn, actions: np.ndarray, steps: int) -> float:
    started = time.perf_counter()
    for _ in range(steps):
        step(actions)
    return (time.perf_counter() - started) / steps * 1e6


def gymnasium_env(env_id: str, copies: int) -> gym.vector.VectorEnv:
    """What rlcore's ``vectorization: auto`` builds: the env's own vector entry point where it has one."""
    try:
        return gym.make_vec(env_id, num_envs=copies, vectorization_mode="vector_entry_point")
    except (gym.error.Error, ValueError):
        return gym.make_vec(env_id, num_envs=copies, vectorization_mode="sync")


def measure(env_id: str, copies: int, steps: int, repeats: int, with_envpool: bool) -> dict[str, Any]:
    gym_env = gymnasium_env(env_id, copies)
    gym_env.reset(seed=0)
    actions = actions_of(gym_env.single_action_space, copies)
    sides: dict[str, StepFn] = {"gymnasium": gym_env.step}
    if with_envpool:
        import envpool

        # One thread, as each rlcore process steps its envs (envpool would otherwise take a thread per copy up to
        # the machine's cores).
        pool = envpool.make_gymnasium(env_id, num_envs=copies, seed=0, num_threads=1)
        pool.reset()
        sides["envpool"] = pool.step
    blocks: dict[str, list[float]] = {side: [] for side in sides}
    for step in sides.values():  # warm-up
        block_microseconds(step, actions, max(steps // 10, 10))
    for _ in range(repeats):
        for side, step in sides.items():
            blocks[side].append(block_microseconds(step, actions, steps))
    gym_env.close()
    row: dict[str, Any] = {"env": env_id, "copies": copies}
    for side, values in blocks.items():
        row[f"{side}_us_per_step"] = round(statistics.median(values), 1)
    if with_envpool:
        row["envpool_speedup"] = round(row["gymnasium_us_per_step"] / row["envpool_us_per_step"], 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "Pendulum-v1", "HalfCheetah-v5", "Hopper-v5"])
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 3, 8, 16])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with_envpool = importlib.util.find_spec("envpool") is not None
    result: dict[str, Any] = {"benchmark": "envpool_stepping", "envpool": None, "rows": []}
    if with_envpool:
        with warnings.catch_warnings():  # envpool 0.x imports the old gym package, which warns on import
            warnings.simplefilter("ignore")
            import envpool
        result["envpool"] = envpool.__version__
    else:
        result["envpool_missing"] = "not installed: pip install envpool (gymnasium measured alone)"
    for env_id in args.envs:
        for copies in args.copies:
            result["rows"].append(measure(env_id, copies, args.steps, args.repeats, with_envpool))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
