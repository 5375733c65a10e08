"""Benchmark: recurrent PPO on CartPole without velocities — wall seconds and env steps to first reach eval >= 450.

Prints one JSON line. Medians over seeds. rlcore trains ``configs/ppo-lstm-cartpole-po.yaml`` (an LSTM of 64 shared
by actor and critic); the same preset without memory runs beside it as the control (it never reaches the target).
With the optional ``bench`` extra (sb3-contrib) installed, sb3-contrib's ``RecurrentPPO`` with RL Zoo's
hyperparameters for CartPoleNoVel-v1 (8 envs, n_steps 32, batch 256, 20 epochs, lr 1e-3 and clip 0.2 linear over
1e5 steps, gamma 0.98, lambda 0.8, ReLU heads [64], LSTM of 64, a separate critic LSTM) runs in the same process on
the same partially observable env (``rlcore.envs.partial_observation.KeepObservations``, position and angle).

    python benchmarks/recurrent_ppo.py [--seeds 0 1 2] [--peer-seeds 0] [--no-peer]

Time to 450 counts everything a user waits for during training, periodic evaluations included (10 deterministic
episodes every ``eval_every`` env steps, the memory carried through each episode).
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

TARGET = 450.0
PRESET = ROOT / "configs" / "ppo-lstm-cartpole-po.yaml"
ZOO_TIMESTEPS = 100_000
"""RL Zoo's ``n_timesteps`` for RecurrentPPO on CartPoleNoVel-v1: the peer's budget and schedule horizon, and
rlcore's (the preset's ``train.max_steps``)."""
KEEP = {"indices": [0, 2]}


def sb3_run(seed: int, eval_every: int) -> dict[str, Any]:
    """sb3-contrib RecurrentPPO with RL Zoo's CartPoleNoVel-v1 hyperparameters, to the target or its budget."""
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from torch import nn

    from rlcore.envs.partial_observation import KeepObservations

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed, wrapper_class=KeepObservations, wrapper_kwargs=KEEP)
    model = RecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=32,
        batch_size=256,
        n_epochs=20,
        gamma=0.98,
        gae_lambda=0.8,
        ent_coef=0.0,
        learning_rate=lambda remaining: 1e-3 * remaining,
        clip_range=lambda remaining: 0.2 * remaining,
        policy_kwargs={
            "ortho_init": False,
            "activation_fn": nn.ReLU,
            "lstm_hidden_size": 64,
            "enable_critic_lstm": True,
            "net_arch": {"pi": [64], "vf": [64]},
        },
        seed=seed,
        device="cpu",
    )
    wrapper = {"wrapper_class": KeepObservations, "wrapper_kwargs": KEEP}
    result = sb3_time_to_target(model, "CartPole-v1", seed, eval_every, TARGET, ZOO_TIMESTEPS, **wrapper)
    env.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--peer-seeds", type=int, nargs="+", default=None, help="default: --seeds")
    parser.add_argument("--eval-every", type=int, default=4096)
    parser.add_argument("--no-peer", action="store_true", help="skip sb3-contrib even if installed")
    args = parser.parse_args()
    torch.set_num_threads(1)

    budget = [f"train.max_steps={ZOO_TIMESTEPS}"]
    runs = [rlcore_time_to_target(PRESET, seed, TARGET, args.eval_every, budget) for seed in args.seeds]
    control = [
        rlcore_time_to_target(PRESET, seed, TARGET, args.eval_every, [*budget, "policy.memory=null"])
        for seed in args.seeds
    ]
    result: dict[str, Any] = {
        "benchmark": "recurrent_ppo",
        "params": "configs/ppo-lstm-cartpole-po.yaml",
        "env": "CartPole-v1 without velocities (KeepObservations indices [0, 2])",
        "target_return": TARGET,
        "budget_env_steps": ZOO_TIMESTEPS,
        "seeds": args.seeds,
        "torch_threads": 1,
        "median_seconds_to_target": median([r["seconds"] for r in runs]),
        "median_env_steps_to_target": median([r["env_steps"] for r in runs]),
        "per_seed": runs,
        "without_memory_reached": [r["env_steps"] is not None for r in control],
    }
    if not args.no_peer:
        if sb3_available("sb3_contrib"):
            peer = [sb3_run(seed, args.eval_every) for seed in args.peer_seeds or args.seeds]
            add_peer(result, peer)
            result["sb3"]["per_seed"] = peer
            result["sb3"]["seeds"] = args.peer_seeds or args.seeds
        else:
            result["sb3"] = SB3_MISSING
    emit(result)


if __name__ == "__main__":
    main()
