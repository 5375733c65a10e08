"""eval.video: the selected model's first test episode as an animated GIF (rlcore.evaluation.video)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from PIL import Image, ImageSequence

from rlcore.config.sections import PolicyConfig
from rlcore.envs.config import EnvConfig
from rlcore.evaluation.evaluator import Evaluator
from rlcore.evaluation.video import record_episode
from rlcore.nets.policies import ActorCritic

sys.path.insert(0, str(Path(__file__).parent))
import dict_obs_env  # noqa: E402


def test_the_video_has_one_frame_per_step_of_the_first_test_episode(tmp_path: Path) -> None:
    torch.manual_seed(0)
    env = EnvConfig(id="CartPole-v1")
    policy = ActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2), PolicyConfig())
    seed = 3 * 2**48 + 7
    length = Evaluator(env, episodes=1, seed=seed).evaluate(policy).lengths[0]
    path = record_episode(env, policy, seed, deterministic=True, max_steps=500, path=tmp_path / "episode.gif")
    assert path == tmp_path / "episode.gif"
    with Image.open(path) as gif:
        # The reset frame, then one per step, at CartPole's 50 fps (Pillow merges identical frames, adding durations).
        milliseconds = sum(frame.info["duration"] for frame in ImageSequence.Iterator(gif))
        assert milliseconds == pytest.approx((length + 1) * 20, abs=1) and gif.n_frames > length // 2
        assert gif.size == (600, 400)


def test_an_env_that_cannot_render_gives_a_warning_and_no_video(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = EnvConfig(id=f"dict_obs_env:{dict_obs_env.ENV_ID}", kwargs={"observation": "image"})
    space = gym.spaces.Box(0, 255, (8, 8, 2), np.uint8)
    policy = ActorCritic(space, gym.spaces.Discrete(2), PolicyConfig())
    with caplog.at_level(logging.WARNING, logger="rlcore"):
        assert record_episode(env, policy, 0, True, 20, tmp_path / "episode.gif") is None
    assert "eval.video:" in caplog.text and "no video" in caplog.text
    assert not (tmp_path / "episode.gif").exists()
