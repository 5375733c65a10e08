"""Benchmark: PPO on CartPole-v1 — wall seconds and env steps to first reach eval >= 475, and training throughput.

Prints one JSON line. Medians over seeds. With the optional ``bench`` extra (stable-baselines3)
installed, SB3's PPO with the RL Zoo CartPole hyperparameters runs in the same process for comparison.

    python benchmarks/ppo_cartpole.py [--seeds 0 1 2] [--no-peer]

Time to 475 counts everything a user waits for during training, periodic evaluations included
(10 deterministic episodes every ``eval_every`` env steps). Throughput is measured on a separate
fixed-budget run with no periodic evaluation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlcore.config import load_params  # noqa: E402
from rlcore.trainers import train  # noqa: E402

TARGET = 475.0


def rlcore_time_to_target(seed: int, eval_every: int) -> dict[str, Any]:
    params = load_params(
        ROOT / "params.yaml",
        [
            f"seed={seed}",
            f"train.target_return={TARGET}",
            f"train.eval_every={eval_every}",
            "train.max_steps=300000",
            "train.max_wall_seconds=null",
            "train.progress_bar=off",
        ],
    )
    with tempfile.TemporaryDirectory() as tmp:
        summary = train(params, Path(tmp) / "run")
    reached = next((e for e in summary["evaluations"] if e["mean_return"] >= TARGET), None)
    return {
        "seconds": reached["wall_seconds"] if reached else None,
        "env_steps": reached["env_steps"] if reached else None,
    }


def rlcore_throughput(seed: int, steps: int) -> float:
    params = load_params(
        ROOT / "params.yaml",
        [
            f"seed={seed}",
            "train.target_return=null",
            f"train.max_steps={steps}",
            f"train.eval_every={steps}",
            "train.eval_episodes=1",
            "train.max_wall_seconds=null",
            "train.progress_bar=off",
        ],
    )
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        summary = train(params, Path(tmp) / "run")
        elapsed = time.perf_counter() - started
    return summary["env_steps"] / elapsed


def sb3_time_to_target(seed: int, eval_every: int) -> dict[str, Any] | None:
    """SB3 PPO with RL Zoo's CartPole-v1 hyperparameters; None when SB3 is not installed."""
    try:
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.evaluation import evaluate_policy
    except ImportError:
        return None

    def linear(initial: float):
        return lambda progress_remaining: progress_remaining * initial

    class StopAtTarget(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=seed + 1000)
            self.next_eval = eval_every
            self.reached: dict[str, Any] | None = None
            self.started = time.perf_counter()

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += eval_every
            mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=10, deterministic=True)
            if mean >= TARGET:
                self.reached = {"seconds": time.perf_counter() - self.started, "env_steps": self.num_timesteps}
                return False
            return True

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(0.001),
        clip_range=linear(0.2),
        seed=seed,
        device="cpu",
    )
    callback = StopAtTarget()
    model.learn(total_timesteps=300_000, callback=callback)
    started = time.perf_counter()
    throughput_model = PPO(
        "MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, seed=seed, device="cpu"
    )
    throughput_model.learn(total_timesteps=20_000)
    result = callback.reached or {"seconds": None, "env_steps": None}
    result["env_steps_per_second"] = 20_000 / (time.perf_counter() - started)
    return result


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if len(present) == len(values) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-every", type=int, default=2048)
    parser.add_argument("--throughput-steps", type=int, default=100_000)
    parser.add_argument("--no-peer", action="store_true", help="skip Stable-Baselines3 even if installed")
    args = parser.parse_args()
    torch.set_num_threads(1)

    runs = [rlcore_time_to_target(seed, args.eval_every) for seed in args.seeds]
    throughput = [rlcore_throughput(seed, args.throughput_steps) for seed in args.seeds]
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
        peer = [sb3_time_to_target(seed, args.eval_every) for seed in args.seeds]
        if all(p is not None for p in peer):
            sb3_seconds = median([p["seconds"] for p in peer])  # type: ignore[index]
            result["sb3"] = {
                "median_seconds_to_target": sb3_seconds,
                "median_env_steps_to_target": median([p["env_steps"] for p in peer]),  # type: ignore[index]
                "median_env_steps_per_second": round(statistics.median(p["env_steps_per_second"] for p in peer), 1),  # type: ignore[index]
            }
            if sb3_seconds and result["median_seconds_to_target"]:
                result["speedup_vs_sb3"] = round(sb3_seconds / result["median_seconds_to_target"], 2)
        else:
            result["sb3"] = "not installed (pip install -e '.[bench]')"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
