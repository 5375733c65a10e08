"""Benchmark: behavioural cloning gradient steps/s at batch 256, CartPole-shaped and Pendulum-shaped data.

Prints one JSON line. Medians over seeds, 1 torch thread. The policy is ``offline.yaml``'s (MLP [64, 64],
tanh; BC lr 1e-3, loss nll): a ``CategoricalActor`` on CartPole-v1's spaces (cross-entropy) and a
``GaussianActor`` on Pendulum-v1's (Gaussian negative log-likelihood). The data is synthetic and shaped
like each env's (``--rows`` transitions, default 20,000 as ``offline.yaml``'s ``collect.steps``), held as
``OfflineData.tensors()``. One step is what ``rlcore/trainers/offline.py`` does per gradient step: draw
``batch_size`` random row indices with the NumPy generator, index every tensor with them, then
``BC.update(batch, progress)``. ``--warmup`` steps run untimed, then ``--updates`` are timed.

    python benchmarks/bc_throughput.py [--seeds 0 1 2] [--updates 2000] [--warmup 100] [--rows 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit  # noqa: E402

from rlcore.data.reader import OfflineData  # noqa: E402
from rlcore.params import load_params  # noqa: E402
from rlcore.registry import algorithm_class  # noqa: E402

BATCH_SIZE = 256
PARAMS = ROOT / "offline.yaml"
ENVS = ("CartPole-v1", "Pendulum-v1")


def synthetic_data(env_id: str, rows: int, rng: np.random.Generator) -> tuple[Any, Any, OfflineData]:
    """(observation_space, action_space, data): observations and actions drawn inside the env's spaces."""
    import gymnasium as gym

    env = gym.make(env_id)
    observation_space, action_space = env.observation_space, env.action_space
    env.close()
    if env_id == "CartPole-v1":
        obs = rng.normal(0.0, [0.5, 0.5, 0.05, 0.5], size=(rows + 1, 4)).astype(np.float32)
        actions = rng.integers(0, action_space.n, size=rows, dtype=np.int64)
    else:
        theta = rng.uniform(-np.pi, np.pi, size=rows + 1)
        speed = rng.uniform(-8.0, 8.0, size=rows + 1)
        obs = np.stack([np.cos(theta), np.sin(theta), speed], axis=1).astype(np.float32)
        actions = rng.uniform(-2.0, 2.0, size=(rows, 1)).astype(np.float32)
    episode_id = np.arange(rows, dtype=np.int64) // 200
    last = np.r_[episode_id[1:] != episode_id[:-1], True]
    data = OfflineData(
        obs=obs[:-1],
        actions=actions,
        rewards=np.ones(rows, dtype=np.float32),
        next_obs=obs[1:],
        terminated=np.zeros(rows, dtype=bool),
        truncated=last,
        episode_id=episode_id,
        metadata={},
    )
    return observation_space, action_space, data


def steps_per_second(env_id: str, seed: int, rows: int, warmup: int, updates: int) -> float:
    params = load_params(PARAMS, [f"seed={seed}", f"algo.batch_size={BATCH_SIZE}"])
    cfg = params.algo
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    observation_space, action_space, data = synthetic_data(env_id, rows, rng)
    algo_cls = algorithm_class(cfg.name)
    policy = algo_cls.make_policy(observation_space, action_space, params.policy, cfg)
    algorithm = algo_cls(policy, cfg, observation_space, action_space)
    tensors = data.tensors()
    n = len(data)

    def step() -> None:  # as in rlcore/trainers/offline.py
        index = torch.from_numpy(rng.integers(0, n, size=BATCH_SIZE))
        batch = {name: values[index] for name, values in tensors.items()}
        algorithm.update(batch, 0.0)

    for _ in range(warmup):
        step()
    started = time.perf_counter()
    for _ in range(updates):
        step()
    return updates / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args()
    torch.set_num_threads(1)

    result: dict[str, Any] = {
        "benchmark": "bc_throughput",
        "batch_size": BATCH_SIZE,
        "seeds": args.seeds,
        "torch_threads": 1,
        "rows": args.rows,
        "updates": args.updates,
        "warmup": args.warmup,
    }
    for env_id in ENVS:
        rates = [steps_per_second(env_id, seed, args.rows, args.warmup, args.updates) for seed in args.seeds]
        key = env_id.split("-")[0].lower()
        result[f"{key}_median_steps_per_second"] = round(statistics.median(rates), 1)
        result[f"{key}_per_seed"] = [round(rate, 1) for rate in rates]
    emit(result)


if __name__ == "__main__":
    main()
