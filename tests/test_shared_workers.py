"""``train.seeds`` for IMPALA, ES and SVPG (issue 39) on worker processes: the worker processes start once and serve
every seed, one learner process holds every seed's learner (``rlcore.trainers.population``,
``rlcore.trainers.actor_learner``). On the in-process ``dev`` runner, seed k is the one-seed run with ``seed: k`` for
all three: ``tests/test_seeds_contract.py``.

Seed k of ES on shared worker processes is bitwise the one-seed run with ``seed: k`` (weights, optimizer state, torch
generator state, evaluations). IMPALA on actor processes is not bitwise even alone (which trajectories make a batch
depends on timing); there each seed's trajectories are those its own actor would make: checked on the first one of
each lane. A killed shared run resumes every seed from its own checkpoint and ends where the uninterrupted one did.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import PROJECT, assert_trees_match

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.common.files import read_json
from rlcore.config.sections import Params
from rlcore.params import load_params
from rlcore.stages import train_stage
from rlcore.trainers.actor_learner import make_runner, spec_factory
from rlcore.workers.actors.actor import SeedActors

pytestmark = pytest.mark.slow  # every test here starts worker or actor processes (4-7 s each)

QUICK = ["train.progress_bar=off", "train.target_return=null"]
TWO_SEEDS = "train.seeds=[0, 1]"
ES = [
    *QUICK,
    "algo.population_size=4",
    "algo.pairs_per_task=2",
    "algo.max_rollout_steps=20",
    "train.eval_episodes=2",
    "policy.normalize_obs=true",  # its statistics, merged in pair order, count too
    "train.eval_every=1",  # a checkpoint after every iteration
    "train.max_steps=240",  # at most 80 env steps an iteration: at least 3 iterations
]
IMPALA = [*QUICK, "algo.runner=dev", "train.max_steps=1024", "train.eval_every=512", "train.log_every=512"]
IMPALA += ["train.eval_episodes=2"]


def _params(preset: str, overrides: list[str], *more: str) -> Params:
    return load_params(PROJECT / "configs" / f"{preset}.yaml", [*overrides, *more])


def _last_checkpoint(run_dir: Path) -> tuple[str, dict[str, Any]]:
    path = list_checkpoints(run_dir / "checkpoints")[-1][1]
    return path.name, load_checkpoint(path).tensors


def _untimed(run_dir: Path) -> list[dict[str, Any]]:
    evaluations = read_json(run_dir / "train_summary.json")["evaluations"]
    return [{key: value for key, value in row.items() if key != "wall_seconds"} for row in evaluations]


def _assert_seeds_are_their_one_seed_runs(shared: Path, params: Params, alone: Path) -> None:
    """Each seed's folder of the shared run in ``shared`` holds what the one-seed run of that seed (trained here
    into ``alone / seed_<k>``) holds: the same evaluations and the same last checkpoint, bitwise."""
    for seed in (0, 1):
        single = params.model_copy(update={"seed": seed})
        single.train.seeds = None
        train_stage(single, alone / f"seed_{seed}")
        one = alone / f"seed_{seed}" / "runs" / params.name
        folder = shared / "runs" / params.name / f"seed_{seed}"
        assert _untimed(folder) == _untimed(one)
        mine, theirs = _last_checkpoint(folder), _last_checkpoint(one)
        assert mine[0] == theirs[0]
        assert_trees_match(mine[1], theirs[1], f"seed {seed}")


@pytest.fixture(scope="module")
def es_shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Seeds 0 and 1 of a small ES run on 2 worker processes, and the log of training them."""
    root = tmp_path_factory.mktemp("es_shared")
    handler, logger = _Captured(), logging.getLogger("rlcore")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        train_stage(_params("es-cartpole", ES, TWO_SEEDS, "algo.runner=local", "algo.num_workers=2"), root)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return root, "\n".join(handler.lines)


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_es_seeds_on_shared_worker_processes_are_their_one_seed_runs_bitwise(
    es_shared: tuple[Path, str], tmp_path: Path
) -> None:
    root, log = es_shared
    assert "train.seeds: this program trains seeds 0-1 (sharing the local runner's rollout workers)" in log
    assert "one after another" not in log
    # The one-seed runs in-process: ES's parameters are the same whatever runs its tasks.
    _assert_seeds_are_their_one_seed_runs(root, _params("es-cartpole", ES, TWO_SEEDS, "algo.runner=dev"), tmp_path)


def test_a_killed_shared_es_run_resumes_every_seed_from_its_own_checkpoint(
    es_shared: tuple[Path, str], tmp_path: Path
) -> None:
    """Killed after seed 0's second checkpoint and seed 1's first: training again resumes each seed from its own
    and ends both where the uninterrupted run ended them."""
    original, _ = es_shared
    params = _params("es-cartpole", ES, TWO_SEEDS, "algo.runner=local", "algo.num_workers=2")
    run = tmp_path / "runs" / params.name
    shutil.copytree(original / "runs" / params.name, run)
    for seed, kept in ((0, 2), (1, 1)):
        (run / f"seed_{seed}" / "train_summary.json").unlink()
        for _, path in list_checkpoints(run / f"seed_{seed}" / "checkpoints")[kept:]:
            path.unlink()
    train_stage(params, tmp_path)
    for seed in (0, 1):
        resumed = _last_checkpoint(run / f"seed_{seed}")
        uninterrupted = _last_checkpoint(original / "runs" / params.name / f"seed_{seed}")
        assert resumed[0] == uninterrupted[0]
        assert_trees_match(resumed[1], uninterrupted[1], f"seed {seed}")


def test_an_actor_process_serving_two_seeds_rolls_out_each_as_its_own_actor_would() -> None:
    """One actor process, two lanes: the first trajectory of each lane (asked for in the other order than they
    arrive: lane 0's waits while the learner collects lane 1's) is the one a one-seed actor process of that seed
    makes from the same weights: its envs, episodes and sampling stream are its own."""
    lanes = [
        (_params("impala-cartpole", IMPALA, f"seed={seed}", "algo.num_actors=1", "algo.runner=local"), 0)
        for seed in (0, 1)
    ]
    specs = spec_factory(lanes)(0, 0)  # actor 0's, incarnation 0
    reference = [SeedActors([spec]) for spec in specs]  # one-seed actor processes' actors
    weights = [actors.actors[0].codec.encode(actors.actors[0].policy) for actors in reference]
    with make_runner(lanes, weights[0].size) as runner:
        runner.start(weights, 0)
        second = runner.collect(1, 0, lane=1)[0]
        first = runner.collect(1, 0, lane=0)[0]
    for lane, (trajectory, actors) in enumerate(zip((first, second), reference, strict=True)):
        actors.actors[0].set_weights(0, weights[lane])
        expected = actors.rollout(0)
        actors.close()
        assert trajectory["lane"] == lane
        for key in ("obs", "actions", "behaviour_log_probs", "rewards", "episode_end"):
            assert np.array_equal(trajectory[key], expected[key]), f"lane {lane}: {key}"
