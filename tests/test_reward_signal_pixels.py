"""RND on pixel observations (issue 25, finding 7): frames are normalized per pixel by the signal's running
statistics (mean 0, std 1 on the frames they were computed from, clipped to [-5, 5]), the CNNs read them unscaled,
the statistics are saved in checkpoints and load back bitwise, and a run trains on real frames."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import PROJECT

from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.config.sections import PolicyConfig
from rlcore.envs.config import EnvConfig
from rlcore.envs.stepping import VectorStepper
from rlcore.envs.vector import make_vector_env
from rlcore.nets.encoders import Flatten, ImageEncoder
from rlcore.nets.policies import ActorCritic
from rlcore.params import load_params
from rlcore.reward_signals.rnd import RND
from rlcore.stages import train_stage

sys.path.insert(0, str(Path(__file__).parent))
import dict_obs_env  # noqa: E402

SIDE_FLIP = f"dict_obs_env:{dict_obs_env.ENV_ID}"
PIXEL_ENVS: dict[str, dict[str, Any]] = {
    "minatar-bool-frames": {"id": "MinAtar/Breakout-v1"},
    "uint8-frames": {"id": SIDE_FLIP, "kwargs": {"observation": "image"}},
    "dict-with-a-uint8-image": {"id": SIDE_FLIP, "kwargs": {"observation": "dict"}},
}
"""The ``EnvConfig`` keys of each env, made into one in the test: validating a MinAtar id imports minatar (with
matplotlib, seaborn and pandas: 2.5 s), which a test collection need not pay."""


def random_frames(env_config: EnvConfig, steps: int, envs: int = 8) -> tuple[torch.Tensor, ActorCritic]:
    """(steps * envs, *obs_shape) observations of a random policy on ``envs`` copies of the env, and a policy of
    its spaces (whose ``new_encoder`` the signals build on)."""
    env = make_vector_env(env_config, envs)
    stepper = VectorStepper(env)
    frames = [torch.as_tensor(stepper.reset(seed=0))]
    env.single_action_space.seed(0)
    for _ in range(steps - 1):
        step = stepper.step(np.array([env.single_action_space.sample() for _ in range(envs)]))
        frames.append(torch.as_tensor(step.next_obs))
    policy = ActorCritic(env.single_observation_space, env.single_action_space, PolicyConfig(hidden_sizes=[16]))
    env.close()
    return torch.cat(frames), policy


@pytest.mark.parametrize("name", list(PIXEL_ENVS))
def test_rnd_normalizes_frames_per_pixel_to_zero_mean_and_unit_std_clipped_to_five(name: str):
    frames, policy = random_frames(EnvConfig(**PIXEL_ENVS[name]), steps=250)
    config = PPOConfig(reward_signals={"rnd": {}}).reward_signals
    assert config is not None and config.rnd is not None
    rnd = RND(config.rnd, policy.observation_space, policy.new_encoder)
    rnd.update_statistics(frames)
    x = rnd.normalize(frames).double()
    raw = frames.double()
    mean, std = raw.mean(dim=0), raw.std(dim=0, unbiased=False)
    # Pixels whose values all lie within 5 std of their mean are not clipped: exactly standardized there.
    unclipped = ((raw - mean).abs() <= 4.9 * std).all(dim=0) & (std > 0)
    assert int(unclipped.sum()) >= 8, "the frames should have varying pixels"
    torch.testing.assert_close(x.mean(dim=0)[unclipped], torch.zeros(int(unclipped.sum()), dtype=x.dtype),
                               rtol=0, atol=1e-6)  # fmt: skip
    torch.testing.assert_close(x.std(dim=0, unbiased=False)[unclipped], torch.ones(int(unclipped.sum()),
                               dtype=x.dtype), rtol=1e-5, atol=1e-6)  # fmt: skip
    assert float(x.abs().max()) <= 5.0
    assert bool((x[:, std == 0] == 0).all()), "a constant pixel normalizes to 0"
    # The networks read the normalized values as they are: no 1/255 left in their encoders.
    scales = [m.scale for m in rnd.modules() if isinstance(m, (Flatten, ImageEncoder))]
    assert scales and all(scale == 1.0 for scale in scales)


@pytest.mark.slow
def test_rnd_on_minatar_frames_trains_and_its_pixel_statistics_load_back_bitwise_from_the_checkpoint(
    tmp_path: Path,
):
    """PPO + RND on MinAtar Breakout, seed 0: 4 updates of 4 x 64 steps (a checkpoint after each of the last two);
    the RND's per-pixel statistics are in the checkpoint, non-trivial, and a freshly built algorithm loads them
    bitwise (what a resumed run does). ~10 s."""
    params = load_params(
        PROJECT / "configs" / "ppo-minatar-breakout.yaml",
        [
            "seed=0",
            "env.num_envs=4",
            "algo.n_steps=64",
            "algo.batch_size=128",
            "train.max_steps=1024",
            "train.eval_every=512",
            "train.log_every=256",
            "train.eval_episodes=1",
            "train.progress_bar=off",
            "algo.reward_signals={rnd: {strength: 1.0, epochs: 1, batch_size: 128}}",
        ],
    )
    train_stage(params, tmp_path)
    run = tmp_path / "runs" / params.name
    rewards = (run / "dvclive" / "plots" / "metrics" / "train" / "rnd" / "reward.tsv").read_text().split()[2:]
    assert rewards and all(np.isfinite(float(value)) for value in rewards[1::2])
    _, path = list_checkpoints(run / "checkpoints")[-1]
    saved = load_checkpoint(path).tensors["algorithm"]["reward_signals"]["rnd"]["networks"]
    mean, var, count = saved["obs_normalizer.mean"], saved["obs_normalizer.var"], saved["obs_normalizer.count"]
    assert mean.shape == (10, 10, 4) and float(count) >= 1024  # every observation and next observation seen
    assert float(mean.max()) > 0 and float(var.max()) > 0

    policy = ActorCritic(*_spaces(params), PolicyConfig(**params.policy.model_dump()))
    resumed = PPO(policy, params.algo)  # type: ignore[arg-type]
    resumed.load_state_dict(load_checkpoint(path).tensors["algorithm"])
    assert resumed.reward_signals is not None
    loaded = resumed.reward_signals.signals["rnd"].obs_normalizer
    assert torch.equal(loaded.mean, mean) and torch.equal(loaded.var, var) and torch.equal(loaded.count, count)


def _spaces(params) -> tuple:
    env = make_vector_env(params.env, 1)
    spaces = env.single_observation_space, env.single_action_space
    env.close()
    return spaces
