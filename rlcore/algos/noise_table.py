"""The shared noise table of evolution strategies (Salimans et al., 2017, section 2.1 and appendix).

Every process that needs perturbations (each rollout worker and the learner) builds the same table once from
``(seed, size)`` and caches it: a perturbation is then named by one integer, its ``offset`` in the table, and
``table[offset : offset + dim]`` is the noise vector of a policy with ``dim`` parameters. Tasks carry offsets,
never noise. Built with NumPy's PCG64 generator, so the table is the same on every machine and in every process.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np


@functools.lru_cache(maxsize=2)
def noise_table(seed: int, size: int) -> np.ndarray:
    """(size,) float32 standard normal noise, read-only; built once per process for each ``(seed, size)``.

    At ``size`` 2**24 (64 MB) building takes about 0.3 s on one core.
    """
    table = np.random.default_rng(seed).standard_normal(size, dtype=np.float32)
    table.flags.writeable = False
    return table


def sample_offsets(rng: np.random.Generator, count: int, table_size: int, dim: int) -> np.ndarray:
    """(count,) int64 offsets, uniform over every window of ``dim`` values that fits in the table."""
    if dim > table_size:
        raise ValueError(f"a noise table of {table_size} values cannot hold a {dim}-parameter perturbation")
    return rng.integers(0, table_size - dim + 1, size=count, dtype=np.int64)


def noise_rows(table: np.ndarray, offsets: Sequence[int] | np.ndarray, dim: int) -> np.ndarray:
    """(len(offsets), dim) float32: the perturbation of each offset (a copy, writable)."""
    return np.stack([table[int(offset) : int(offset) + dim] for offset in offsets])
