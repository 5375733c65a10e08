"""Benchmark: A2C on CartPole-v1 — wall seconds and env steps to first reach eval >= 475, and training throughput.

Prints one JSON line. Medians over seeds. rlcore trains ``configs/a2c-cartpole.yaml``; with the optional
``bench`` extra (stable-baselines3) installed, SB3's A2C with the RL Zoo CartPole-v1 hyperparameters (8 envs,
ent_coef 0, everything else SB3's defaults: n_steps 5, lr 7e-4, RMSprop, GAE lambda 1.0) runs in the same
process for comparison. Both use separate actor and critic MLPs of [64, 64] tanh units (SB3's default for
MlpPolicy), so the networks are the same size.

    python benchmarks/a2c_cartpole.py [--seeds 0 1 2 ... 9] [--no-peer]

Time to 475 counts everything a user waits for during training, periodic evaluations included
(10 deterministic episodes every ``eval_every`` env steps). Throughput is measured on a separate
fixed-budget run with no periodic evaluation.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    ROOT,
    SB3_MISSING,
    add_peer,
    emit,
    median,
    rlcore_throughput,
    rlcore_time_to_target,
    sb3_available,
    sb3_time_to_target,
    stdout_to_stderr,
)

TARGET = 475.0
PRESET = ROOT / "configs" / "a2c-cartpole.yaml"
ZOO_TIMESTEPS = 500_000
"""RL Zoo's ``n_timesteps`` for A2C on CartPole-v1: the SB3 peer's budget."""


def sb3_run(seed: int, eval_every: int, throughput_steps: int) -> dict[str, Any]:
    """SB3 A2C with RL Zoo's CartPole-v1 hyperparameters: time to target, then throughput on a fresh model."""
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = A2C("MlpPolicy", env, ent_coef=0.0, seed=seed, device="cpu")
    result = sb3_time_to_target(model, "CartPole-v1", seed, eval_every, TARGET, total_timesteps=ZOO_TIMESTEPS)
    throughput_model = A2C("MlpPolicy", env, ent_coef=0.0, seed=seed, device="cpu")
    started = time.perf_counter()
    with stdout_to_stderr():
        throughput_model.learn(total_timesteps=throughput_steps)
    result["env_steps_per_second"] = throughput_steps / (time.perf_counter() - started)
    env.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))  # see ppo_cartpole.py
    parser.add_argument("--eval-every", type=int, default=2048)
    parser.add_argument("--throughput-steps", type=int, default=50_000)
    parser.add_argument("--peer-throughput-steps", type=int, default=20_000)
    parser.add_argument("--no-peer", action="store_true", help="skip Stable-Baselines3 even if installed")
    args = parser.parse_args()
    torch.set_num_threads(1)

    runs = [
        rlcore_time_to_target(PRESET, seed, TARGET, args.eval_every, ["train.max_steps=300000"]) for seed in args.seeds
    ]
    throughput = [rlcore_throughput(PRESET, seed, args.throughput_steps) for seed in args.seeds]
    result: dict[str, Any] = {
        "benchmark": "a2c_cartpole",
        "params": "configs/a2c-cartpole.yaml",
        "target_return": TARGET,
        "seeds": args.seeds,
        "torch_threads": 1,
        "median_seconds_to_target": median([r["seconds"] for r in runs]),
        "median_env_steps_to_target": median([r["env_steps"] for r in runs]),
        "median_train_env_steps_per_second": round(statistics.median(throughput), 1),
        "per_seed": [{**r, "env_steps_per_second": round(t, 1)} for r, t in zip(runs, throughput, strict=True)],
        "targets": {"median_seconds_to_target": 5.0},
    }
    if not args.no_peer:
        if sb3_available():
            peer = [sb3_run(seed, args.eval_every, args.peer_throughput_steps) for seed in args.seeds]
            add_peer(result, peer, {"median_env_steps_per_second": "env_steps_per_second"})
        else:
            result["sb3"] = SB3_MISSING
    emit(result)


if __name__ == "__main__":
    main()
