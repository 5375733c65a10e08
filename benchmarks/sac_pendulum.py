"""Benchmark: SAC on Pendulum-v1 — wall seconds and env steps to first reach eval >= -200, and gradient updates/s.

Prints one JSON line. Medians over seeds. rlcore trains ``configs/sac-pendulum.yaml`` with
``train.target_return=-200`` (budget: its ``train.max_steps``, 20,000). With the optional ``bench``
extra (stable-baselines3) installed, SB3's SAC with the RL Zoo Pendulum-v1 hyperparameters (SB3's
defaults, among them net_arch [256, 256], except learning_rate 1e-3; n_timesteps 20,000) runs in the
same process for comparison.

    python benchmarks/sac_pendulum.py [--seeds 0 1 2 ... 9] [--updates 2000] [--no-peer]

Time to -200 counts everything a user waits for during training, periodic evaluations included
(10 deterministic episodes every ``eval_every`` env steps, on a separate env).

Gradient updates/s, batch 256: a replay buffer is filled with ``--fill`` real Pendulum transitions
(uniformly random actions), then ``--warmup`` updates run untimed and ``--updates`` are timed. One
update is one replay sample plus one SAC gradient step (critics, actor, entropy coefficient, target
networks), as in training: rlcore's ``SAC.update(replay.sample(256))`` and SB3's
``model.train(gradient_steps=N, batch_size=256)``, whose buffer is filled by a ``learn()`` of
``--fill`` random steps (``learning_starts=fill``, so no update happens there).
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

from rlcore.data.replay import ReplayBuffer  # noqa: E402
from rlcore.params import load_params  # noqa: E402
from rlcore.registry import algorithm_class  # noqa: E402

TARGET = -200.0
PARAMS = ROOT / "configs" / "sac-pendulum.yaml"
BATCH_SIZE = 256
ZOO_TIMESTEPS = 20_000


def rlcore_updates_per_second(seed: int, fill: int, warmup: int, updates: int) -> float:
    """SAC gradient updates per second (sample + update) on a replay buffer of real Pendulum transitions."""
    import gymnasium as gym

    params = load_params(PARAMS, [f"seed={seed}", f"algo.batch_size={BATCH_SIZE}"])
    cfg = params.algo
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    env = gym.make(params.env.id)
    observation_space, action_space = env.observation_space, env.action_space
    algo_cls = algorithm_class(cfg.name)
    policy = algo_cls.make_policy(observation_space, action_space, params.policy, cfg)
    algorithm = algo_cls(policy, cfg)
    replay = ReplayBuffer(
        cfg.buffer_size, observation_space.shape, action_space.shape, np.float32, 1, cfg.gamma, cfg.n_step
    )
    obs, _ = env.reset(seed=seed)
    for _ in range(fill):
        action = rng.uniform(action_space.low, action_space.high).astype(np.float32)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        replay.add(
            obs[None],
            action[None],
            np.array([reward], dtype=np.float32),
            next_obs[None],
            np.array([terminated]),
            np.array([truncated]),
            np.array([True]),
        )
        obs = env.reset()[0] if terminated or truncated else next_obs
    env.close()

    for _ in range(warmup):
        algorithm.update(replay.sample(BATCH_SIZE, rng), 0.0)
    started = time.perf_counter()
    for _ in range(updates):
        algorithm.update(replay.sample(BATCH_SIZE, rng), 0.0)
    return updates / (time.perf_counter() - started)


def sb3_model(seed: int, **overrides: Any) -> Any:
    """SB3 SAC with RL Zoo's Pendulum-v1 hyperparameters (SB3 defaults but learning_rate 1e-3), one env."""
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed)
    return SAC("MlpPolicy", env, learning_rate=1e-3, seed=seed, device="cpu", **overrides)


def sb3_run(seed: int, eval_every: int, fill: int, warmup: int, updates: int) -> dict[str, Any]:
    model = sb3_model(seed)
    result = sb3_time_to_target(model, "Pendulum-v1", seed, eval_every, TARGET, total_timesteps=ZOO_TIMESTEPS)
    model.env.close()

    model = sb3_model(seed, learning_starts=fill)
    model.learn(total_timesteps=fill)  # random actions into the buffer; sets up the logger train() writes to
    model.train(gradient_steps=warmup, batch_size=BATCH_SIZE)
    started = time.perf_counter()
    model.train(gradient_steps=updates, batch_size=BATCH_SIZE)
    result["updates_per_second"] = updates / (time.perf_counter() - started)
    model.env.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))  # see ppo_cartpole.py
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--fill", type=int, default=2000, help="real transitions in the replay buffer")
    parser.add_argument("--warmup", type=int, default=100, help="untimed updates before the timed ones")
    parser.add_argument("--updates", type=int, default=2000, help="timed updates")
    parser.add_argument("--no-peer", action="store_true", help="skip Stable-Baselines3 even if installed")
    args = parser.parse_args()
    torch.set_num_threads(1)

    runs = [rlcore_time_to_target(PARAMS, seed, TARGET, args.eval_every) for seed in args.seeds]
    torch.set_num_threads(1)
    rates = [rlcore_updates_per_second(seed, args.fill, args.warmup, args.updates) for seed in args.seeds]
    result: dict[str, Any] = {
        "benchmark": "sac_pendulum",
        "params": str(PARAMS.relative_to(ROOT)),
        "target_return": TARGET,
        "seeds": args.seeds,
        "torch_threads": 1,
        "hidden_sizes": load_params(PARAMS).policy.hidden_sizes,
        "batch_size": BATCH_SIZE,
        "timed_updates": args.updates,
        "median_seconds_to_target": median([r["seconds"] for r in runs]),
        "median_env_steps_to_target": median([r["env_steps"] for r in runs]),
        "median_updates_per_second": round(statistics.median(rates), 1),
        "per_seed": [{**r, "updates_per_second": round(u, 1)} for r, u in zip(runs, rates, strict=True)],
        "targets": {"median_seconds_to_target": 30.0},
    }
    if not args.no_peer:
        if sb3_available():
            torch.set_num_threads(1)
            peer = [sb3_run(seed, args.eval_every, args.fill, args.warmup, args.updates) for seed in args.seeds]
            add_peer(result, peer, {"median_updates_per_second": "updates_per_second"})
            result["sb3"]["net_arch"] = [256, 256]
            result["update_speedup_vs_sb3"] = round(
                result["median_updates_per_second"] / result["sb3"]["median_updates_per_second"], 2
            )
        else:
            result["sb3"] = SB3_MISSING
    emit(result)


if __name__ == "__main__":
    main()
