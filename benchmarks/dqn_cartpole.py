"""Benchmark: DQN on CartPole-v1 — wall seconds and env steps to first reach eval >= 475.

Prints one JSON line. Medians over seeds. rlcore trains ``configs/dqn-cartpole.yaml`` as it is (its
``train.max_steps`` of 50,000 is the budget and also the length the exploration schedule is
annealed over), stopping at the first evaluation >= 475. With the optional ``bench`` extra
(stable-baselines3) installed, SB3's DQN with the RL Zoo CartPole-v1 hyperparameters (n_timesteps
50,000, which sets its exploration schedule too) runs in the same process for comparison.

    python benchmarks/dqn_cartpole.py [--seeds 0 1 2 ... 9] [--no-peer]

Time to 475 counts everything a user waits for during training, periodic evaluations included
(10 deterministic episodes every ``eval_every`` env steps, on a separate env).
"""

from __future__ import annotations

import argparse
import sys
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
    rlcore_time_to_target,
    sb3_available,
    sb3_time_to_target,
)

TARGET = 475.0
PARAMS = ROOT / "configs" / "dqn-cartpole.yaml"
ZOO_TIMESTEPS = 50_000


def sb3_run(seed: int, eval_every: int) -> dict[str, Any]:
    """SB3 DQN with RL Zoo's CartPole-v1 hyperparameters (one env)."""
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)
    model = DQN(
        "MlpPolicy",
        env,
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        policy_kwargs={"net_arch": [256, 256]},
        seed=seed,
        device="cpu",
    )
    result = sb3_time_to_target(model, "CartPole-v1", seed, eval_every, TARGET, total_timesteps=ZOO_TIMESTEPS)
    env.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))  # see ppo_cartpole.py
    parser.add_argument("--eval-every", type=int, default=2048)
    parser.add_argument("--no-peer", action="store_true", help="skip Stable-Baselines3 even if installed")
    args = parser.parse_args()
    torch.set_num_threads(1)

    runs = [rlcore_time_to_target(PARAMS, seed, TARGET, args.eval_every) for seed in args.seeds]
    result: dict[str, Any] = {
        "benchmark": "dqn_cartpole",
        "params": str(PARAMS.relative_to(ROOT)),
        "target_return": TARGET,
        "seeds": args.seeds,
        "torch_threads": 1,
        "median_seconds_to_target": median([r["seconds"] for r in runs]),
        "median_env_steps_to_target": median([r["env_steps"] for r in runs]),
        "per_seed": runs,
        "targets": {"median_seconds_to_target": 10.0},
    }
    if not args.no_peer:
        if sb3_available():
            torch.set_num_threads(1)
            add_peer(result, [sb3_run(seed, args.eval_every) for seed in args.seeds])
        else:
            result["sb3"] = SB3_MISSING
    emit(result)


if __name__ == "__main__":
    main()
