"""Benchmark: PPO with one policy shared by 3 agents on MPE simple_spread_v3, rlcore's preset beside PettingZoo's own
peer recipe (SB3 PPO on SuperSuit's ``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1``) on the same budget.

Prints one JSON line: per seed and side, the final policy's test score and its training wall and CPU seconds, and
uniformly random actions' score. Every side is scored by the same evaluation: rlcore's ``Evaluator`` on the preset's
100 test episodes (``rlcore.common.seeds.test_seeds``, the preset's env kwargs, max_cycles 25), greedy actions, an
episode's score the mean over agents of their returns (``eval.return_reduction: mean``), with the 95 % bootstrap
interval of the mean over episodes. The peer's observations carry no agent id (the recipe's); rlcore's do.

Sides (``--sides``): ``rlcore`` (the preset), ``sb3_supersuit`` (the recipe as PettingZoo's tutorial writes it) and
``sb3_supersuit_bootstrap`` (the recipe with one fix: SuperSuit's SB3 wrapper folds MPE's time-limit truncation at
max_cycles into ``dones`` without SB3's ``TimeLimit.truncated`` info, so SB3 takes every 25-step cut for a terminal
state of value 0 and never bootstraps there; the fix passes the truncation on, as rlcore does). The peer's side also
prints its training curve: the mean return per agent of the last 100 training episodes after each 10th rollout.

    python benchmarks/simple_spread.py [--seeds 0 1 2] [--steps 150000] [--sides rlcore sb3_supersuit ...]

The peer uses the preset's hyperparameters (8 env copies x 3 agents, 50 steps per rollout, minibatches of 600,
10 epochs, lr 1e-3 linearly to 0, gamma 0.99, lambda 0.95, no entropy bonus, 64x64 tanh networks). Budgets count
agent steps (rows) on both sides, SB3's ``total_timesteps`` as the vector env's rows. Seeding: SB3 2.x's
``PPO(seed=...)`` calls ``env.seed()``, which SuperSuit's ``ConcatVecEnv`` does not have (AttributeError), so the
peer seeds torch/numpy with ``set_random_seed`` and its env copies by resetting SuperSuit's vector env with the seed
(copy ``i`` gets ``seed + i``) before ``learn``, whose own unseeded reset continues those generators.

Measured 2026-11-26 (150k agent steps, seeds 0-2, a 2-core machine under load average 12-20; benchmarks/README.md):
rlcore -21.2 / -20.3 / -21.1 (24.5 CPU s per run); the recipe as written -31.3 / -29.8 / -30.6, below uniformly
random actions' -27.4 (40 CPU s); with the truncation passed on -21.1 / -20.2 / -21.7 (39 CPU s).
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
from rlcore.params import Params, load_params  # noqa: E402
from rlcore.registry import policy_from_checkpoint  # noqa: E402
from rlcore.trainers import train  # noqa: E402

PRESET = ROOT / "configs" / "ppo-simple-spread.yaml"
SIDES = ("rlcore", "sb3_supersuit", "sb3_supersuit_bootstrap")
CURVE_EVERY = 10
"""Rollouts between two points of the peer's training curve."""


class ActingFunction:
    """What ``Evaluator.evaluate`` calls of a policy, around ``act(observations (B, obs_dim) numpy) -> (B,)``."""

    def __init__(self, act: Any) -> None:
        self._act = act

    def initial_state(self, batch: int) -> None:
        return None

    def act(
        self, obs: torch.Tensor, state: None, deterministic: bool, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, None]:
        return torch.as_tensor(np.asarray(self._act(obs.numpy()))), None


def scored(params: Params, env: EnvConfig, policy: Any) -> dict[str, Any]:
    """The mean over the preset's test episodes of the mean over agents of the returns, with its 95 % interval."""
    seeds = test_seeds(params.eval.seed, params.eval.test_episodes)
    evaluator = Evaluator(
        env,
        len(seeds),
        seeds.start,
        max_parallel_envs=params.eval.max_parallel_envs,
        return_reduction=params.eval.return_reduction,
    )
    result = evaluator.evaluate(policy)
    evaluator.close()
    return {
        "test_mean_return": round(result.mean_return, 3),
        "ci95": [round(result.ci95_low, 3), round(result.ci95_high, 3)],
        "episodes": result.episodes,
    }


def rlcore_run(params: Params, seed: int, steps: int) -> dict[str, Any]:
    overrides = [f"seed={seed}", f"train.max_steps={steps}", f"train.eval_every={steps}", "train.progress_bar=false"]
    run_params = load_params(PRESET, overrides)
    cpu = time.process_time()
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():
        summary = train(run_params, Path(tmp) / "run")
        cpu = time.process_time() - cpu
        policy = policy_from_checkpoint(load_checkpoint(Path(tmp) / "run" / "checkpoints" / summary["checkpoints"][-1]))
    score = scored(params, params.env, policy)
    return {**score, "wall_seconds": summary["wall_seconds"], "cpu_seconds": round(cpu, 1)}


def sb3_run(params: Params, seed: int, steps: int, bootstrap: bool) -> dict[str, Any]:
    import supersuit
    from mpe2 import simple_spread_v3
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.utils import set_random_seed
    from stable_baselines3.common.vec_env import VecMonitor
    from supersuit.vector.sb3_vector_wrapper import SB3VecEnvWrapper

    class TruncationBootstrap(SB3VecEnvWrapper):  # type: ignore[misc]
        """SuperSuit's SB3 wrapper, but a truncated (not terminated) row says so: ``TimeLimit.truncated``."""

        def step_wait(self) -> tuple[Any, Any, Any, Any]:
            observations, rewards, terminations, truncations, infos = self.venv.step_wait()
            for row, info in enumerate(infos):
                if truncations[row] and not terminations[row]:
                    info["TimeLimit.truncated"] = True
            return observations, rewards, np.logical_or(terminations, truncations), infos

    class Curve(BaseCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.points: list[tuple[int, float]] = []
            self.rollouts = 0

        def _on_rollout_end(self) -> None:
            self.rollouts += 1
            if self.rollouts % CURVE_EVERY == 0 and self.model.ep_info_buffer:
                mean = float(np.mean([info["r"] for info in self.model.ep_info_buffer]))
                self.points.append((self.num_timesteps, round(mean, 2)))

        def _on_step(self) -> bool:
            return True

    torch.set_num_threads(1)
    set_random_seed(seed)
    vec = supersuit.pettingzoo_env_to_vec_env_v1(simple_spread_v3.parallel_env(**params.env.kwargs))
    vec = supersuit.concat_vec_envs_v1(vec, params.env.num_envs, num_cpus=0, base_class="stable_baselines3")
    if bootstrap:
        vec = TruncationBootstrap(vec.venv)
    vec.venv.reset(seed=seed)  # copy i: seed + i (ConcatVecEnv); SB3's seed() would fail (module docstring)
    monitored = VecMonitor(vec)
    model = PPO(
        "MlpPolicy",
        monitored,
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
    curve = Curve()
    start, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=steps, callback=curve)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    monitored.close()
    plain = params.env.model_copy(update={"agent_id": False})  # the recipe's observations: no agent id
    policy = ActingFunction(lambda obs: model.predict(obs, deterministic=True)[0])
    score = scored(params, plain, policy)
    return {**score, "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1), "train_curve": curve.points}


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=150_000, help="agent steps (rows) of training")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    args = parser.parse_args()
    params = load_params(PRESET)
    peer = sb3_available() and sb3_available("supersuit")
    rng = np.random.default_rng(0)
    probe = make_vector_env(params.env, 1)
    moves = int(probe.single_action_space.n)
    probe.close()
    uniform = ActingFunction(lambda obs: rng.integers(0, moves, len(obs)))
    result: dict[str, Any] = {
        "benchmark": "simple_spread",
        "agent_steps": args.steps,
        "random": scored(params, params.env, uniform),
    }
    for seed in args.seeds:
        for side in args.sides:
            if side == "rlcore":
                result[f"rlcore_seed_{seed}"] = rlcore_run(params, seed, args.steps)
            elif peer:
                result[f"{side}_seed_{seed}"] = sb3_run(params, seed, args.steps, side.endswith("bootstrap"))
    emit(result)


if __name__ == "__main__":
    main()
