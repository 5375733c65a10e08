"""Why GAIL does or does not imitate on Pendulum-v1: its discriminator and reward at each checkpoint of a run.

For each checkpoint of a run made by ``benchmarks/gail_pendulum.py`` (PPO + GAIL, ``extrinsic.strength: 0``), the
GAIL signal is rebuilt from the checkpoint (discriminator, its observation statistics) and the policy rolls out
``--episodes`` episodes as it does in training (sampled actions, kept unclipped as the rollout stores them). Reported:

- ``accuracy_expert`` / ``accuracy_policy``: share of the expert's demonstration pairs with D > 1/2 and of the
  policy's own pairs with D < 1/2 (the discriminator's accuracy on each side);
- ``reward_true_corr_policy``: Pearson correlation of GAIL's reward -log(1 - D) with Pendulum's reward over the
  policy's own transitions (what PPO's advantages are made of); ``reward_true_corr_pooled`` over expert, policy and
  random-policy transitions together;
- ``out_of_bounds_actions``: share of the policy's sampled actions outside [-2, 2], and ``D_policy_clipped`` vs
  ``D_policy``: D's mean on the policy's pairs with the actions clipped to the bounds (what the env executed) and
  as stored; a gap says the discriminator tells the policy apart by actions the expert cannot have.

Prints one JSON line.

    python benchmarks/gail_diagnostics.py --params P.yaml --run DIR --expert E.parquet --random R.parquet
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import stdout_to_stderr


def rollout(policy: Any, episodes: int, seed: int) -> dict[str, np.ndarray]:
    """``episodes`` Pendulum episodes with sampled actions: obs, stored (unclipped) actions, true rewards."""
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    generator = torch.Generator().manual_seed(seed)
    obs_list, action_list, reward_list = [], [], []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        done = False
        while not done:
            with torch.no_grad():
                action = policy.sample_action(torch.as_tensor(obs, dtype=torch.float32)[None], generator)[0].numpy()
            next_obs, reward, terminated, truncated, _ = env.step(np.clip(action, -2.0, 2.0))
            obs_list.append(obs)
            action_list.append(action)
            reward_list.append(reward)
            obs, done = next_obs, terminated or truncated
    return {
        "obs": np.asarray(obs_list, np.float32),
        "actions": np.asarray(action_list, np.float32),
        "rewards": np.asarray(reward_list, np.float64),
    }


def main() -> None:
    import gymnasium as gym

    from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
    from rlcore.data.reader import load_dataset
    from rlcore.params import load_params
    from rlcore.registry import policy_from_checkpoint
    from rlcore.reward_signals.gail import GAIL, load_demonstrations

    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, required=True)
    parser.add_argument("--run", type=Path, required=True, help="runs/<name> of a PPO + GAIL run")
    parser.add_argument("--expert", type=Path, required=True)
    parser.add_argument("--random", type=Path, required=True)
    parser.add_argument("--set", action="append", default=[], help="params override the run was made with")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--every", type=int, default=2, help="diagnose every n-th checkpoint (and the last)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    params = load_params(args.params, [f"algo.reward_signals.gail.dataset={args.expert}", *args.set])
    gail_config = params.algo.reward_signals.gail  # type: ignore[union-attr]
    env = gym.make("Pendulum-v1")
    spaces = (env.observation_space, env.action_space)
    expert = load_dataset(args.expert, *spaces, "Pendulum-v1")
    random = load_dataset(args.random, *spaces, "Pendulum-v1")
    checkpoints = list_checkpoints(args.run / "checkpoints")
    chosen = [c for i, c in enumerate(checkpoints) if i % args.every == args.every - 1 or i == len(checkpoints) - 1]
    rows = []
    for step, path in chosen:
        with stdout_to_stderr():
            checkpoint = load_checkpoint(path)
            policy = policy_from_checkpoint(checkpoint)
            signal = GAIL(gail_config, *spaces, policy.new_encoder, load_demonstrations(gail_config, *spaces))
            signal.load_state_dict(checkpoint.tensors["algorithm"]["reward_signals"]["gail"]["networks"])
        played = rollout(policy, args.episodes, seed=10_000 + step)

        def d_and_reward(obs: np.ndarray, actions: np.ndarray, signal: GAIL = signal) -> tuple[np.ndarray, np.ndarray]:
            with torch.no_grad():
                logits = signal.logits(*signal._inputs(torch.as_tensor(obs), torch.as_tensor(actions)))
            return torch.sigmoid(logits).numpy(), torch.nn.functional.softplus(logits).numpy()

        d_expert, r_expert = d_and_reward(expert.obs, expert.actions)
        d_policy, r_policy = d_and_reward(played["obs"], played["actions"])
        d_clipped, _ = d_and_reward(played["obs"], np.clip(played["actions"], -2.0, 2.0))
        _, r_random = d_and_reward(random.obs, random.actions)
        pooled_reward = np.concatenate([r_expert, r_policy, r_random])
        pooled_true = np.concatenate([expert.rewards, played["rewards"], random.rewards])
        rows.append(
            {
                "env_steps": step,
                "policy_return": round(float(played["rewards"].sum() / args.episodes), 1),
                "accuracy_expert": round(float((d_expert > 0.5).mean()), 3),
                "accuracy_policy": round(float((d_policy < 0.5).mean()), 3),
                "D_expert": round(float(d_expert.mean()), 3),
                "D_policy": round(float(d_policy.mean()), 3),
                "D_policy_clipped": round(float(d_clipped.mean()), 3),
                "out_of_bounds_actions": round(float((np.abs(played["actions"]) > 2.0).mean()), 3),
                "reward_true_corr_policy": round(float(np.corrcoef(r_policy, played["rewards"])[0, 1]), 3),
                "reward_true_corr_pooled": round(float(np.corrcoef(pooled_reward, pooled_true)[0, 1]), 3),
            }
        )
        print(json.dumps(rows[-1]), file=__import__("sys").stderr, flush=True)
    print(json.dumps({"benchmark": "gail_diagnostics", "run": str(args.run), "set": args.set, "checkpoints": rows}))


if __name__ == "__main__":
    main()
