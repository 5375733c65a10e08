"""``dict_obs_env:rlcore-tests/SideFlip-v0``: a test env whose reward needs both an image and a vector.

Every step draws a side (left or right: a bright 3x3 blob in that half of an 8x8 ``uint8`` grayscale image) and a
flip (the vector's first value, +1 or -1; its other two values are noise). The right action is the side, or the
other side when the flip is -1: 1.0 for it, 0 otherwise. Episodes are 20 steps (truncated), so the optimum is 20
and a policy that reads only the image (or only the vector) earns 10 on average.

kwargs: ``observation`` ``"dict"`` (``Dict(image=Box(0, 255, (8, 8), uint8), vector=Box(-1, 1, (3,), float32))``)
or ``"image"`` (one ``uint8`` Box (8, 8, 2), channel last: the blob, then the flip as a channel all 255 or all 0);
``action`` ``"discrete"`` (``Discrete(2)``: 0 left, 1 right) or ``"box"`` (``Box(-1, 1, (1,))``: right when > 0).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ENV_ID = "rlcore-tests/SideFlip-v0"
EPISODE_STEPS = 20
SIZE = 8


class SideFlipEnv(gym.Env):
    def __init__(self, observation: str = "dict", action: str = "discrete") -> None:
        image = spaces.Box(0, 255, (SIZE, SIZE), np.uint8)
        if observation == "dict":
            vector = spaces.Box(-1.0, 1.0, (3,), np.float32)
            self.observation_space: spaces.Space = spaces.Dict({"image": image, "vector": vector})
        elif observation == "image":
            self.observation_space = spaces.Box(0, 255, (SIZE, SIZE, 2), np.uint8)
        else:
            raise ValueError(f"observation: expected 'dict' or 'image', got {observation!r}")
        if action == "discrete":
            self.action_space: spaces.Space = spaces.Discrete(2)
        elif action == "box":
            self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        else:
            raise ValueError(f"action: expected 'discrete' or 'box', got {action!r}")
        self.side, self.flip = 0, 1

    def _observe(self) -> Any:
        self.side = int(self.np_random.integers(0, 2))
        self.flip = int(self.np_random.choice([-1, 1]))
        image = np.zeros((SIZE, SIZE), dtype=np.uint8)
        row = int(self.np_random.integers(0, SIZE - 2))
        column = int(self.np_random.integers(0, SIZE // 2 - 2)) + self.side * SIZE // 2
        image[row : row + 3, column : column + 3] = 255
        if isinstance(self.observation_space, spaces.Dict):
            noise = self.np_random.uniform(-1, 1, 2)
            return {"image": image, "vector": np.array([self.flip, *noise], dtype=np.float32)}
        return np.stack([image, np.full_like(image, 255 if self.flip > 0 else 0)], axis=-1)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return self._observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        box = isinstance(self.action_space, spaces.Box)
        chosen = int(np.asarray(action).reshape(-1)[0] > 0) if box else int(action)
        right = self.side if self.flip > 0 else 1 - self.side
        return self._observe(), float(chosen == right), False, False, {}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=SideFlipEnv, max_episode_steps=EPISODE_STEPS)
