"""Benchmark: the pixel and MuJoCo presets (issue 14), rlcore beside SB3 where SB3 has the algorithm.

Prints one JSON line per case. Each rlcore run is the pipeline's own train -> evaluate -> select on the preset with
``--steps`` env steps (no early stop; a checkpoint every ``--steps / 5``), scored on ``--test-episodes`` test
episodes of the selected checkpoint; wall seconds are training's (periodic evaluations included).

    python benchmarks/pixels.py ppo-minatar   [--steps 1000000] [--seeds 0] [--no-peer]
    python benchmarks/pixels.py dqn-minatar   [--steps 1000000]
    python benchmarks/pixels.py sac-halfcheetah [--steps 100000]  # or two processes: --no-peer and --peer-only
    python benchmarks/pixels.py ppo-hopper    [--steps 1000000]
    python benchmarks/pixels.py ppo-pong      [--steps 16384]      # throughput only: env-steps/s, no evaluation
    python benchmarks/pixels.py frames-dataset [--steps 10000]     # Parquet size and speed of Atari frame stacks

``--curve-points 20 --figure benchmarks/figures/<case>.png`` also draws each run's periodic-evaluation curve (the
``curve`` field of the JSON line).

SB3 peers (the ``bench`` extra), same process, one thread:
- ``ppo-minatar``: SB3 PPO with the preset's hyperparameters and the same network (MinAtar CNN, 16 3x3 filters and
  128 units, heads [64]: SB3's NatureCNN needs 36x36 images), 16 envs; 100 deterministic test episodes.
- ``sac-halfcheetah``: SB3 SAC with RL Zoo's HalfCheetah hyperparameters (learning_starts 10,000, SB3's defaults
  otherwise: [256, 256], lr 3e-4, batch 256, one gradient step per env step).
- ``ppo-hopper``: SB3 PPO with the preset's settings (SB3's defaults + ``VecNormalize``, linear lr, value clip), tested
  with the training's frozen observation statistics.
- ``ppo-pong``: SB3 PPO ``CnnPolicy`` with RL Zoo's Atari hyperparameters, ``make_atari_env`` + ``VecFrameStack(4)``,
  8 envs: training env-steps/s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, SB3_MISSING, emit, sb3_available, stdout_to_stderr  # noqa: E402

PRESETS = {
    "ppo-minatar": "ppo-minatar-breakout",
    "dqn-minatar": "dqn-minatar-breakout",
    "sac-halfcheetah": "sac-halfcheetah",
    "ppo-hopper": "ppo-hopper",
    "ppo-pong": "ppo-atari-pong",
}


def rlcore_run(
    preset: str, seed: int, steps: int, test_episodes: int, evaluate: bool, curve_points: int = 5
) -> dict[str, Any]:
    """Train (and unless ``evaluate`` is false, evaluate and select) the preset on a fixed budget, with a periodic
    evaluation (and a checkpoint) every ``steps / curve_points`` env steps: the learning curve."""
    import torch

    from rlcore.common.files import read_json
    from rlcore.params import load_params
    from rlcore.stages import evaluate_stage, select_stage, train_stage

    every = steps if not evaluate else max(steps // curve_points, 1)
    params = load_params(
        ROOT / "configs" / f"{preset}.yaml",
        [
            f"seed={seed}",
            f"train.max_steps={steps}",
            f"train.eval_every={every}",
            "train.target_return=null",
            "train.max_wall_seconds=null",
            "train.progress_bar=off",
            f"eval.test_episodes={test_episodes}",
            # throughput only: the one periodic evaluation at the end capped at 10 steps, so it costs nothing
            *([] if evaluate else ["train.eval_episodes=1", "eval.max_episode_steps=10"]),
        ],
    )
    torch.set_num_threads(params.torch_threads)
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():
        root = Path(tmp)
        train_stage(params, root)
        summary = read_json(root / "runs" / params.name / "train_summary.json")
        result: dict[str, Any] = {
            "env_steps": summary["env_steps"],
            "train_wall_seconds": round(summary["wall_seconds"], 1),
            "env_steps_per_second": round(summary["env_steps_per_second"], 1),
            # periodic evaluations (their own seed block, never the test episodes): [env steps, mean return]
            "curve": [[row["env_steps"], round(row["mean_return"], 2)] for row in summary["evaluations"]],
        }
        if evaluate:
            evaluate_stage(params, root)
            select_stage(params, root)
            metrics = read_json(root / "reports" / params.name / "metrics.json")
            result.update(
                test_mean_return=round(metrics["mean_return"], 2),
                test_ci95=[round(metrics["ci95_low"], 2), round(metrics["ci95_high"], 2)],
                test_episodes=metrics["episodes"],
                selected_env_steps=metrics["env_steps"],
            )
    return result


def sb3_learn(model: Any, steps: int) -> dict[str, Any]:
    """Train an SB3 ``model`` for ``steps`` env steps (its output to stderr): the training's wall seconds."""
    started = time.perf_counter()
    with stdout_to_stderr():
        model.learn(total_timesteps=steps)
    seconds = time.perf_counter() - started
    return {
        "env_steps": steps,
        "train_wall_seconds": round(seconds, 1),
        "env_steps_per_second": round(steps / seconds, 1),
    }


def sb3_evaluate(
    model: Any, env_id: str, seed: int, episodes: int, normalized_like: Any = None, **make_kwargs: Any
) -> dict[str, Any]:
    """``episodes`` deterministic test episodes from seed ``seed + 10_000``: their mean return with its 95 %
    bootstrap interval (rlcore's, ``bootstrap_interval``); ``normalized_like``: the training's ``VecNormalize``, whose
    observation statistics the test env uses, frozen (rewards raw)."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    from rlcore.evaluation.evaluator import bootstrap_interval

    env = make_vec_env(env_id, n_envs=1, seed=seed + 10_000, **make_kwargs)
    if normalized_like is not None:
        env = VecNormalize(env, training=False, norm_reward=False, clip_obs=normalized_like.clip_obs)
        env.obs_rms = normalized_like.obs_rms
    returns, _ = evaluate_policy(model, env, n_eval_episodes=episodes, deterministic=True, return_episode_rewards=True)
    env.close()
    low, high = bootstrap_interval(returns)
    return {
        "test_mean_return": round(statistics.mean(returns), 2),
        "test_ci95": [round(low, 2), round(high, 2)],
        "test_episodes": len(returns),
    }


def sb3_ppo_minatar(seed: int, steps: int, test_episodes: int) -> dict[str, Any]:
    model = sb3_ppo_minatar_model(seed)
    return {
        **sb3_learn(model, steps),
        **sb3_evaluate(model, "MinAtar/Breakout-v1", seed, test_episodes, env_kwargs={"max_episode_steps": 10_000}),
    }


def sb3_ppo_minatar_model(seed: int) -> Any:
    """SB3 PPO with the preset's hyperparameters and rlcore's MinAtar CNN, on 16 env copies seeded from ``seed``."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    from rlcore.envs.ids import env_spec

    env_spec("MinAtar/Breakout-v1")  # registers MinAtar's ids (seeds below 2**32 here: SB3 seeds from seed)

    class MinAtarCNN(BaseFeaturesExtractor):  # type: ignore[misc]
        """conv 16 3x3 + 128 units on (10, 10, C) bool frames, as rlcore's SmallCNN."""

        def __init__(self, observation_space: gym.spaces.Box) -> None:
            super().__init__(observation_space, 128)
            height, width, channels = observation_space.shape
            self.net = nn.Sequential(
                nn.Conv2d(channels, 16, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16 * (height - 2) * (width - 2), 128),
                nn.ReLU(),
            )  # fmt: skip

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.net(obs.permute(0, 3, 1, 2).float())

    env = make_vec_env("MinAtar/Breakout-v1", n_envs=16, seed=seed)
    return PPO(
        "MlpPolicy",
        env,
        learning_rate=lambda progress: 5e-4 * progress,
        n_steps=128,
        batch_size=256,
        n_epochs=4,
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        ent_coef=0.01,
        vf_coef=0.5,
        max_grad_norm=0.5,
        policy_kwargs={
            "features_extractor_class": MinAtarCNN,
            "net_arch": {"pi": [64], "vf": [64]},
            "activation_fn": nn.ReLU,
            "normalize_images": False,
        },
        seed=seed,
        device="cpu",
    )


def sb3_sac_halfcheetah(seed: int, steps: int, test_episodes: int) -> dict[str, Any]:
    from stable_baselines3 import SAC

    model = SAC("MlpPolicy", "HalfCheetah-v5", learning_starts=10_000, seed=seed, device="cpu")
    return {
        **sb3_learn(model, steps),
        **sb3_evaluate(model, "HalfCheetah-v5", seed, test_episodes),
    }


def sb3_ppo_hopper(seed: int, steps: int, test_episodes: int) -> dict[str, Any]:
    """SB3 PPO with ``configs/ppo-hopper.yaml``'s settings (CleanRL's continuous PPO): SB3's PPO defaults ([64, 64]
    tanh actor and critic, orthogonal init, log-std 0, 2048-step rollouts, 10 epochs of 64) with ``VecNormalize`` of
    observations and rewards (gamma 0.99, clips 10), the learning rate annealed linearly to 0, value clipping 0.2."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env("Hopper-v5", n_envs=1, seed=seed), gamma=0.99)
    model = PPO(
        "MlpPolicy", env, learning_rate=lambda remaining: 3e-4 * remaining, clip_range_vf=0.2, seed=seed, device="cpu"
    )
    return {**sb3_learn(model, steps), **sb3_evaluate(model, "Hopper-v5", seed, test_episodes, normalized_like=env)}


def sb3_ppo_pong(seed: int, steps: int) -> dict[str, Any]:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from rlcore.envs.ids import env_spec

    env_spec("ALE/Pong-v5")
    kwargs = {"frameskip": 1, "repeat_action_probability": 0.0}
    env = VecFrameStack(make_atari_env("ALE/Pong-v5", n_envs=8, seed=seed, env_kwargs=kwargs), n_stack=4)
    model = PPO(
        "CnnPolicy", env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=2.5e-4, clip_range=0.1,
        vf_coef=0.5, ent_coef=0.01, seed=seed, device="cpu",
    )  # fmt: skip
    return sb3_learn(model, steps)


def frames_dataset(transitions: int, seed: int) -> dict[str, Any]:
    """Dataset size and speed for Atari frame stacks: ``transitions`` random-policy steps of the Pong preset's env
    ((4, 84, 84) uint8) written by ``collect`` (frames as fixed_size_binary), read back whole; beside it the same
    frames as fixed_size_list<uint8>, written and read with the same Parquet options, for the layout decision."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlcore.data.collection import CollectionPlan, collect_dataset
    from rlcore.data.reader import load_dataset
    from rlcore.envs.vector import make_vector_env
    from rlcore.params import load_params

    params = load_params(ROOT / "configs" / "ppo-atari-pong.yaml", [])
    probe = make_vector_env(params.env, 1)
    spaces = probe.single_observation_space, probe.single_action_space
    probe.close()
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():
        path = Path(tmp) / "frames.parquet"
        plan = CollectionPlan(8, transitions, None, 0.0, False, seed, 4096)
        started = time.perf_counter()
        collect_dataset(path, params.env, None, {"kind": "random"}, plan)
        collect_seconds = time.perf_counter() - started
        started = time.perf_counter()
        data = load_dataset(path, *spaces, params.env.id)
        read_seconds = time.perf_counter() - started
        frame = int(np.prod(data.obs.shape[1:]))

        def as_list(values: np.ndarray) -> pa.Array:
            return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), pa.uint8()), frame)

        table = pa.table({"observation": as_list(data.obs), "next_observation": as_list(data.next_obs)})
        listed = Path(tmp) / "lists.parquet"
        started = time.perf_counter()
        pq.write_table(table, listed, compression="zstd", use_dictionary=False, row_group_size=4096)
        list_write = time.perf_counter() - started
        started = time.perf_counter()
        pq.read_table(listed).column("observation").combine_chunks().flatten().to_numpy()
        list_read = time.perf_counter() - started
        raw = 2 * len(data) * frame
        return {
            "transitions": len(data),
            "raw_frames_mb": round(raw / 2**20, 1),
            "binary_file_mb": round(path.stat().st_size / 2**20, 1),
            "collect_seconds": round(collect_seconds, 1),
            "read_seconds": round(read_seconds, 2),
            "uint8_list_frames_only_file_mb": round(listed.stat().st_size / 2**20, 1),
            "uint8_list_write_seconds": round(list_write, 2),
            "uint8_list_read_one_column_seconds": round(list_read, 2),
        }


def plot_curves(runs: dict[int, dict[str, Any]], title: str, path: Path) -> None:
    """One line per seed: periodic-evaluation mean return against env steps."""
    from rlcore.evaluation.plots import new_figure

    with new_figure(path, figsize=(6, 3.5), dpi=100) as (_, axes):
        for seed, run in runs.items():
            steps, returns = zip(*run["curve"], strict=True)
            axes.plot(steps, returns, marker="o", label=f"seed {seed}")
        axes.set(xlabel="env steps", ylabel="mean return (10 episodes)", title=title)
        axes.grid(alpha=0.3)
        axes.legend()


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=[*sorted(PRESETS), "frames-dataset"])
    parser.add_argument("--steps", type=int, default=None, help="env-step budget (default: the preset's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--test-episodes", type=int, default=100)
    sides = parser.add_mutually_exclusive_group()
    sides.add_argument("--no-peer", action="store_true", help="skip SB3")
    sides.add_argument(
        "--peer-only", action="store_true", help="SB3 only (run it beside a --no-peer process: same load on both)"
    )
    parser.add_argument("--curve-points", type=int, default=5, help="periodic evaluations (and checkpoints) per run")
    parser.add_argument("--figure", type=Path, default=None, help="write the learning curves to this PNG")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.case == "frames-dataset":
        emit({"benchmark": args.case, **frames_dataset(args.steps or 10_000, args.seeds[0])})
        return
    preset = PRESETS[args.case]
    defaults = {"ppo-pong": 16_384, "sac-halfcheetah": 100_000}
    steps = args.steps or defaults.get(args.case, 1_000_000)
    evaluate = args.case != "ppo-pong"
    result: dict[str, Any] = {"benchmark": args.case, "preset": f"configs/{preset}.yaml", "steps": steps}
    if not args.peer_only:
        result["rlcore"] = {
            seed: rlcore_run(preset, seed, steps, args.test_episodes, evaluate, args.curve_points)
            for seed in args.seeds
        }
        if args.figure is not None and evaluate:
            plot_curves(result["rlcore"], f"{preset} (periodic evaluations)", args.figure)
    peers = {"ppo-minatar": sb3_ppo_minatar, "sac-halfcheetah": sb3_sac_halfcheetah, "ppo-hopper": sb3_ppo_hopper}
    if not args.no_peer and (args.case in peers or args.case == "ppo-pong"):
        if not sb3_available():
            result["sb3"] = SB3_MISSING
        elif args.case == "ppo-pong":
            result["sb3"] = {seed: sb3_ppo_pong(seed, steps) for seed in args.seeds}
        else:
            result["sb3"] = {seed: peers[args.case](seed, steps, args.test_episodes) for seed in args.seeds}
    emit(result)


if __name__ == "__main__":
    main()
