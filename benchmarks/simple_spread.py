"""Benchmark: PPO with one policy shared by 3 agents on MPE simple_spread_v3, rlcore's preset beside PettingZoo's own
peer recipe (SB3 PPO on SuperSuit's ``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1``) on the same budget.

Prints one JSON line: per seed, each side's final policy's test score (the mean over agents of an episode's returns,
averaged over rlcore's 100 test episodes, greedy actions), its training wall seconds, and uniformly random actions'
score on the same episodes. With ``--no-peer`` (or without the ``bench`` extra) only rlcore runs.

    python benchmarks/simple_spread.py [--seeds 0 1 2] [--steps 150000] [--no-peer]

The peer uses the preset's hyperparameters (8 env copies x 3 agents, 50 steps per rollout, minibatches of 600,
10 epochs, lr 1e-3 linearly to 0, gamma 0.99, lambda 0.95, no entropy bonus, 64x64 tanh networks) and, as the recipe
does, no agent id in the observation.

Measured 2026-11-26 (150k agent steps, seeds 0-2, a 2-core machine shared with other jobs, so wall times are loose):
rlcore -20.0, -20.9, -20.5 (82, 119, 64 s of training); SB3 + SuperSuit -27.5, -29.1, -28.8 (90, 80, 42 s);
uniformly random actions -26.6. SuperSuit's SB3 wrapper cannot be seeded under SB3 2.x (its envs start unseeded).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit, sb3_available, stdout_to_stderr  # noqa: E402

from rlcore.common.checkpoints import load_checkpoint  # noqa: E402
from rlcore.common.seeds import test_seeds  # noqa: E402
from rlcore.envs.config import EnvConfig  # noqa: E402
from rlcore.envs.vector import make_vector_env  # noqa: E402
from rlcore.evaluation.evaluator import Evaluator  # noqa: E402
from rlcore.params import load_params  # noqa: E402
from rlcore.registry import policy_from_checkpoint  # noqa: E402
from rlcore.trainers import train  # noqa: E402

PRESET = ROOT / "configs" / "ppo-simple-spread.yaml"
CYCLES = 25


def rlcore_run(seed: int, steps: int) -> dict[str, Any]:
    overrides = [f"seed={seed}", f"train.max_steps={steps}", f"train.eval_every={steps}", "train.progress_bar=false"]
    params = load_params(PRESET, overrides)
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():
        summary = train(params, Path(tmp) / "run")
        policy = policy_from_checkpoint(load_checkpoint(Path(tmp) / "run" / "checkpoints" / summary["checkpoints"][-1]))
    seeds = test_seeds(params.eval.seed, params.eval.test_episodes)
    evaluator = Evaluator(params.env, len(seeds), seeds.start, max_parallel_envs=params.eval.max_parallel_envs)
    score = evaluator.evaluate(policy).mean_return
    evaluator.close()
    return {"test_mean_return": score, "wall_seconds": summary["wall_seconds"]}


def scored(env: EnvConfig, act: Any, episodes: int, seed: int) -> float:
    """Mean over ``episodes`` (seeds ``seed + k``) of the mean over agents of the return, every episode
    ``max_cycles`` long; ``act(obs) -> actions`` for every row."""
    vector_env = make_vector_env(env, episodes)
    obs, _ = vector_env.reset(seed=seed)
    totals = np.zeros(vector_env.num_envs)
    for _ in range(CYCLES):
        obs, rewards, _, _, _ = vector_env.step(act(obs))
        totals += rewards
    vector_env.close()
    return float(totals.reshape(episodes, -1).mean(axis=1).mean())


def sb3_run(seed: int, steps: int, env: EnvConfig, episodes: int, first_seed: int) -> dict[str, Any]:
    import supersuit
    from mpe2 import simple_spread_v3
    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import set_random_seed

    torch.set_num_threads(1)
    set_random_seed(seed)  # SuperSuit's wrapper takes no seed from SB3 2.x (it has no seed()): its envs start unseeded
    vec = supersuit.pettingzoo_env_to_vec_env_v1(simple_spread_v3.parallel_env(**env.kwargs))
    vec = supersuit.concat_vec_envs_v1(vec, 8, num_cpus=0, base_class="stable_baselines3")
    model = PPO(
        "MlpPolicy",
        vec,
        n_steps=50,
        batch_size=600,
        n_epochs=10,
        learning_rate=lambda remaining: remaining * 1e-3,
        gamma=0.99,
        gae_lambda=0.95,
        ent_coef=0.0,
        policy_kwargs={"net_arch": [64, 64], "activation_fn": torch.nn.Tanh},
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - start
    vec.close()
    plain = env.model_copy(update={"agent_id": False})  # the recipe's observations: no agent id
    score = scored(plain, lambda obs: model.predict(obs, deterministic=True)[0], episodes, first_seed)
    return {"test_mean_return": score, "wall_seconds": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=150_000, help="agent steps (rows) of training")
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args()
    params = load_params(PRESET)
    seeds = test_seeds(params.eval.seed, params.eval.test_episodes)
    rng = np.random.default_rng(0)
    space = make_vector_env(params.env, 1).single_action_space
    random_score = scored(params.env, lambda obs: rng.integers(0, int(space.n), len(obs)), len(seeds), seeds.start)
    peer = not args.no_peer and sb3_available() and sb3_available("supersuit")
    result: dict[str, Any] = {"benchmark": "simple_spread", "agent_steps": args.steps, "random": random_score}
    for seed in args.seeds:
        result[f"rlcore_seed_{seed}"] = rlcore_run(seed, args.steps)
        if peer:
            result[f"sb3_supersuit_seed_{seed}"] = sb3_run(seed, args.steps, params.env, len(seeds), seeds.start)
    emit(result)


if __name__ == "__main__":
    main()
