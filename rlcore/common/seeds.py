"""The seed of every episode rlcore runs, in disjoint ranges, so that no score is measured on episodes that
trained the model, stopped its training, or chose it.

Every episode has its own seed (gymnasium seeds sub-env ``i`` of a vector env reset with ``s`` with ``s + i``;
evaluation batch ``b`` of ``B`` episodes resets with ``first + b·B``, so episode ``k`` has seed ``first + k``).
The ranges are blocks of ``BLOCK = 2**48`` seeds:

| range | episode seeds | who runs them |
|---|---|---|
| training | ``seed + env_steps + i`` (< ``BLOCK``) | training envs, reset at the start and at each resume |
| periodic | ``1·BLOCK + seed·2**16 + k`` | the trainer's evaluations: stop conditions, sweep pruning |
| validation | ``2·BLOCK + eval.seed + k`` | the evaluate stage, every checkpoint: select-best picks on it |
| test | ``3·BLOCK + eval.seed + k`` | the select stage, the selected model only: metrics.json |

``k`` counts the episodes of an evaluation (``k < train.eval_episodes``, ``eval.episodes``, ``eval.test_episodes``);
``i`` is the sub-env; ``env_steps`` is the step count when the envs were reset (0 at the start, a checkpoint's step
after a resume). Periodic episodes are the same at every evaluation of a run (comparable) and differ between runs
of different seeds. ``collect`` rolls out datasets from ``collect.seed + shard·num_envs + i``: in the training
range, so an offline model is never evaluated on the episodes of its dataset.

The params keep every range inside its block: ``seed`` and ``collect.seed`` in ``[0, 2**32)``, ``train.max_steps``
at most ``2**40`` (training seeds stay below ``2**32 + 2**40`` plus one rollout), ``train.eval_episodes`` at most
``2**16`` (each run seed has its own periodic episodes), ``eval.seed`` in ``[0, 2**32)`` and ``eval.episodes``,
``eval.test_episodes`` at most ``2**32``. Every seed is below ``4·BLOCK = 2**50``: an exact int64 and float64.

A leaf module (``rlcore.config.sections`` reads the bounds): plain integers in, ``range`` objects out.
"""

from __future__ import annotations

BLOCK = 2**48
"""Seeds per range; the training range is ``[0, BLOCK)``."""
SEED_LIMIT = 2**32
"""``seed``, ``collect.seed`` and ``eval.seed`` are below this."""
MAX_TRAIN_STEPS = 2**40
"""The largest ``train.max_steps``: with ``seed < SEED_LIMIT`` training seeds stay far below ``BLOCK``."""
PERIODIC_EPISODES_PER_SEED = 2**16
"""The periodic episodes reserved for each run seed: the largest ``train.eval_episodes``."""
MAX_EVAL_EPISODES = 2**32
"""The largest ``eval.episodes`` and ``eval.test_episodes``."""

PERIODIC, VALIDATION, TEST = 1 * BLOCK, 2 * BLOCK, 3 * BLOCK
"""First seed of each evaluation range."""


def training_seed(seed: int, env_steps: int) -> int:
    """The seed the training envs are reset with at ``env_steps`` (sub-env ``i`` gets ``+ i``)."""
    return seed + env_steps


def training_seeds(seed: int, max_steps: int, num_envs: int, overshoot: int = 0) -> range:
    """Every seed the training envs of a run can be reset with: at any step up to ``max_steps + overshoot``
    (a resume restarts from a checkpoint's step, which is at most one rollout, ``overshoot``, past the budget)."""
    return range(seed, training_seed(seed, max_steps + overshoot) + num_envs)


def periodic_seeds(seed: int, episodes: int) -> range:
    """The episodes of every periodic evaluation of the run with ``seed`` (the same each time: comparable)."""
    _check(episodes, PERIODIC_EPISODES_PER_SEED, "train.eval_episodes")
    first = PERIODIC + seed * PERIODIC_EPISODES_PER_SEED
    return range(first, first + episodes)


def validation_seeds(offset: int, episodes: int) -> range:
    """The evaluate stage's episodes (``offset``: ``eval.seed``)."""
    _check(episodes, MAX_EVAL_EPISODES, "eval.episodes")
    return range(VALIDATION + offset, VALIDATION + offset + episodes)


def test_seeds(offset: int, episodes: int) -> range:
    """The test episodes of the selected model (``offset``: ``eval.seed``)."""
    _check(episodes, MAX_EVAL_EPISODES, "eval.test_episodes")
    return range(TEST + offset, TEST + offset + episodes)


test_seeds.__test__ = False  # type: ignore[attr-defined]  # not a pytest test when imported into a test module


def describe(seeds: range) -> dict[str, int]:
    """``{"first": ..., "count": ...}``: how reports record a range of episode seeds."""
    return {"first": seeds.start, "count": len(seeds)}


def _check(episodes: int, limit: int, key: str) -> None:
    if not 1 <= episodes <= limit:
        raise ValueError(f"{key}: {episodes} episodes do not fit the seed range (1 to {limit})")
