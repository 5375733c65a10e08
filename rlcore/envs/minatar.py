"""MinAtar's gymnasium env, taking rlcore's seeds: MinAtar seeds a NumPy ``RandomState``, which refuses seeds of
2**32 and above, and rlcore's evaluation episodes have seeds from 2**48 up (``rlcore.common.seeds``). Each seed is
mapped to 32 bits by NumPy's ``SeedSequence`` (a hash, so the ranges stay apart: not a modulo, under which 2**48 + k and
k would collide). ``rlcore.envs.ids`` points MinAtar's registered ids here."""

from __future__ import annotations

import numpy as np
from minatar.gym import BaseEnv


class MinAtarEnv(BaseEnv):
    def seed(self, seed: int | None = None) -> None:
        super().seed(None if seed is None else int(np.random.SeedSequence(seed).generate_state(1)[0]))
