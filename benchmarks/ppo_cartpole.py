"""Benchmark: PPO on CartPole-v1 — wall seconds and env steps to first reach eval >= 475, and training throughput.

Prints one JSON line. Medians over seeds. With the optional ``bench`` extra (stable-baselines3)
installed, SB3's PPO with the RL Zoo CartPole hyperparameters runs in the same process for comparison (``sb3``,
``speedup_vs_sb3``); where ``params.yaml``'s discount and GAE lambda differ from RL Zoo's (0.98, 0.8), SB3 runs a
second time with RL Zoo's settings but the preset's pair (``sb3_at_preset_discount``,
``speedup_vs_sb3_at_preset_discount``), so the ratio is also given with the two libraries learning the same problem.

    python benchmarks/ppo_cartpole.py [--seeds 0 1 2 ... 9] [--no-peer]

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
)

from rlcore.params import load_params  # noqa: E402

TARGET = 475.0


ZOO_DISCOUNT = (0.98, 0.8)
"""RL Zoo's CartPole-v1 PPO gamma and gae_lambda."""


def sb3_run(
    seed: int, eval_every: int, throughput: bool = True, discount: tuple[float, float] = ZOO_DISCOUNT
) -> dict[str, Any]:
    """SB3 PPO with RL Zoo's CartPole-v1 hyperparameters (``discount``: its gamma and gae_lambda instead of RL Zoo's):
    time to target, then (``throughput``) throughput on a fresh model."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    def linear(initial: float):
        return lambda progress_remaining: progress_remaining * initial

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    gamma, gae_lambda = discount
    zoo = {"n_steps": 32, "batch_size": 256, "gae_lambda": gae_lambda, "gamma": gamma, "n_epochs": 20, "ent_coef": 0.0}
    model = PPO("MlpPolicy", env, **zoo, learning_rate=linear(0.001), clip_range=linear(0.2), seed=seed, device="cpu")
    result = sb3_time_to_target(model, "CartPole-v1", seed, eval_every, TARGET, total_timesteps=300_000)
    if not throughput:
        return result
    started = time.perf_counter()
    throughput_model = PPO("MlpPolicy", env, **zoo, seed=seed, device="cpu")
    throughput_model.learn(total_timesteps=20_000)
    result["env_steps_per_second"] = 20_000 / (time.perf_counter() - started)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    # Ten seeds: on three, a median moved 2x between two discounts that differ 3x over ten (benchmarks/README.md).
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--eval-every", type=int, default=2048)
    parser.add_argument("--throughput-steps", type=int, default=100_000)
    parser.add_argument("--no-peer", action="store_true", help="skip Stable-Baselines3 even if installed")
    args = parser.parse_args()
    torch.set_num_threads(1)

    runs = [
        rlcore_time_to_target(ROOT / "params.yaml", seed, TARGET, args.eval_every, ["train.max_steps=300000"])
        for seed in args.seeds
    ]
    throughput = [rlcore_throughput(ROOT / "params.yaml", seed, args.throughput_steps) for seed in args.seeds]
    result: dict[str, Any] = {
        "benchmark": "ppo_cartpole",
        "target_return": TARGET,
        "seeds": args.seeds,
        "torch_threads": 1,
        "median_seconds_to_target": median([r["seconds"] for r in runs]),
        "median_env_steps_to_target": median([r["env_steps"] for r in runs]),
        "median_train_env_steps_per_second": round(statistics.median(throughput), 1),
        "per_seed": [{**r, "env_steps_per_second": round(t, 1)} for r, t in zip(runs, throughput, strict=True)],
        "targets": {"median_seconds_to_target": 5.0, "median_train_env_steps_per_second": 20000},
    }
    if not args.no_peer:
        if sb3_available():
            peer = [sb3_run(seed, args.eval_every) for seed in args.seeds]
            add_peer(result, peer, {"median_env_steps_per_second": "env_steps_per_second"})
            algo = load_params(ROOT / "params.yaml", []).algo.model_dump()
            discount = (algo["gamma"], algo["gae_lambda"])
            if discount != ZOO_DISCOUNT:
                same = {"median_seconds_to_target": result["median_seconds_to_target"]}
                add_peer(same, [sb3_run(seed, args.eval_every, False, discount) for seed in args.seeds])
                result["sb3_at_preset_discount"] = {"gamma": discount[0], "gae_lambda": discount[1], **same["sb3"]}
                if "speedup_vs_sb3" in same:
                    result["speedup_vs_sb3_at_preset_discount"] = same["speedup_vs_sb3"]
        else:
            result["sb3"] = SB3_MISSING
    emit(result)


if __name__ == "__main__":
    main()
