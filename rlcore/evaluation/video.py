"""A video of the agent: the selected model's first test episode, rendered and written as an animated GIF.

``eval.video: true`` makes the select stage call :func:`record_episode` on the test range's first seed, so with
``eval.deterministic`` (the default) the video shows the first episode the reported test score counts (a sampled
policy draws its actions anew). The env is built as everywhere else (``env.kwargs``, ``env.wrappers``) with
``render_mode: rgb_array``; frames are the env's renders, small ones (MinAtar's 10x10) enlarged by whole pixels.
GIF (Pillow, already a dependency) rather than MP4: no ffmpeg to install, and every browser and markdown viewer
plays it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from rlcore.common.files import atomic_path
from rlcore.envs.config import EnvConfig
from rlcore.envs.observations import obs_tensor
from rlcore.envs.stepping import VectorStepper
from rlcore.envs.vector import make_vector_env
from rlcore.nets.policy import Policy

log = logging.getLogger("rlcore")

MAX_FRAMES = 2000
"""Frames kept at most (about a minute at 30 fps): longer episodes are cut, and the log says so."""
MIN_SIDE = 160
"""Frames with a shorter side are enlarged by a whole factor up to at least this many pixels."""


def record_episode(
    env: EnvConfig, policy: Policy, seed: int, deterministic: bool, max_steps: int, path: Path
) -> Path | None:
    """Play one episode of ``policy`` from ``seed`` (at most ``max_steps`` steps) and write its frames to ``path``
    (a GIF). Returns ``path``, or None with a warning when the env cannot render ``rgb_array`` frames (e.g. MuJoCo
    without an OpenGL context: set ``MUJOCO_GL=egl`` or ``osmesa``)."""
    try:
        rendering = EnvConfig.model_validate({**env.model_dump(), "kwargs": {**env.kwargs, "render_mode": "rgb_array"}})
        vector_env = make_vector_env(rendering, 1)
    except Exception as exc:  # noqa: BLE001  an env without rgb_array rendering: no video, not a failed stage
        log.warning("eval.video: %s cannot render rgb_array frames (%s): no video", env.id, _one_line(exc))
        return None
    frames: list[np.ndarray] = []
    try:
        stepper = VectorStepper(vector_env)
        obs = stepper.reset(seed)
        state = policy.initial_state(vector_env.num_envs)  # one row, or a multi-agent env's one per agent
        ended = np.zeros(vector_env.num_envs, dtype=bool)
        generator = torch.Generator().manual_seed(seed)
        frames.append(_frame(vector_env.render()))
        with torch.no_grad():
            for _ in range(max_steps):
                action, state = policy.act(obs_tensor(obs), state, deterministic, generator)
                step = stepper.step(action.numpy())
                obs = step.next_obs
                if len(frames) < MAX_FRAMES:
                    frames.append(_frame(vector_env.render()))
                ended |= step.ended
                if ended.all():  # every agent of a multi-agent env's episode has left
                    break
    except Exception as exc:  # noqa: BLE001  rendering failed mid-episode (no display, no OpenGL): no video
        log.warning("eval.video: rendering %s failed (%s): no video", env.id, _one_line(exc))
        return None
    finally:
        vector_env.close()
    fps = int(vector_env.metadata.get("render_fps") or 30)
    if len(frames) == MAX_FRAMES:
        log.warning("eval.video: the episode is longer than %d frames; the video shows its start", MAX_FRAMES)
    images = [Image.fromarray(frame) for frame in frames]
    with atomic_path(path) as tmp:
        images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], duration=1000 / fps, loop=0)
    log.info("recorded the first test episode (%d frames) to %s", len(frames), path)
    return path


def _frame(rendered: Any) -> np.ndarray:
    """One sub-env's render as (H, W, 3) uint8, enlarged when small."""
    frame = np.asarray(rendered[0] if isinstance(rendered, list | tuple) else rendered)
    if frame.ndim == 4:  # a vector env's own batch of renders
        frame = frame[0]
    if np.issubdtype(frame.dtype, np.floating):  # MinAtar renders colours in [0, 1]
        frame = np.clip(frame * 255, 0, 255)
    frame = frame.astype(np.uint8)
    factor = max(1, -(-MIN_SIDE // min(frame.shape[:2])))
    return np.repeat(np.repeat(frame, factor, axis=0), factor, axis=1) if factor > 1 else frame


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())
