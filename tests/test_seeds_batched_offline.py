"""BC's ``train.seeds`` as one program (``rlcore.trainers.offline``, ``rlcore.trainers.lockstep``), what is not
"member k is the run with ``seed: k``" (that: ``tests/test_seeds_contract.py``): a killed batched run resumes each
seed from its own checkpoint (seeds at different steps step together) and keeps the finished ones; a step where some
seeds' loss is not finite is skipped by those seeds only. Helpers the other seeds tests share: :func:`checkpoints`,
:func:`differences`."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from conftest import preset_text

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.common.files import read_json
from rlcore.config.sections import Params
from rlcore.params import validate_params
from rlcore.stages import collect_stage, train_stage
from rlcore.trainers.sources import DatasetSource

RTOL, ATOL = 1e-5, 1e-6
"""Weights and Adam moments (scale ~1 and below) after 90 steps differ by at most 2.7e-7 (measured; float32 sums in
another order in the batched matrix products, the stacked tanh's rounding): a few times below these."""

CASES: dict[str, dict[str, Any]] = {
    # CartPole: Discrete actions (cross-entropy).
    "discrete": {"env": {"id": "CartPole-v1"}, "dataset": {"validation_fraction": 0.2}},
}


def bc_params(case: str, **changes: Any) -> Params:
    """offline.yaml at a tiny budget: 90 gradient steps of 64, a checkpoint every 30, one evaluation episode of at
    most 50 steps; ``changes`` merge into their sections."""
    tree = yaml.safe_load(preset_text("offline.yaml"))
    tree["name"] = "batched"
    tree["algo"] |= {"batch_size": 64}
    tree["collect"] |= {"policy": "random", "steps": 1500, "num_envs": 4}
    tree["train"] |= {"max_steps": 90, "eval_every": 30, "log_every": 30, "eval_episodes": 1}
    tree["train"] |= {"target_return": None, "progress_bar": "off"}
    tree["eval"] |= {"max_episode_steps": 50}
    for key, value in {**CASES[case], **changes}.items():
        tree[key] = tree[key] | value if isinstance(tree.get(key), dict) else value
    return validate_params(tree)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A case's random-policy dataset (collected once per module): ``datasets(case)`` is its Parquet file."""
    collected: dict[str, Path] = {}

    def dataset(case: str) -> Path:
        if case not in collected:
            root = tmp_path_factory.mktemp(f"dataset-{case}")
            collected[case] = collect_stage(bc_params(case), root)
        return collected[case]

    return dataset


def new_project(root: Path, dataset: Path) -> Path:
    """``root`` with ``dataset`` where offline.yaml's ``dataset.path`` points."""
    (root / "data").mkdir(parents=True)
    shutil.copy(dataset, root / "data" / "dataset.parquet")
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, datasets: Callable[[str], Path]) -> tuple[str, Path]:
    """(case, a project with a random-policy dataset and ``train.seeds: [0, 1, 2]`` trained batched into
    ``runs/batched``)."""
    case = "discrete"
    root = new_project(tmp_path_factory.mktemp(f"batched-{case}"), datasets(case))
    train_stage(bc_params(case, train={"seeds": [0, 1, 2]}), root)
    return case, root


def checkpoints(run_dir: Path) -> list[Any]:
    return [load_checkpoint(path) for _, path in list_checkpoints(run_dir / "checkpoints")]


def differences(mine: Any, theirs: Any, where: str) -> list[tuple[float, str]]:
    """(max absolute difference, where) of every float tensor; everything else must be equal."""
    if isinstance(mine, torch.Tensor):
        assert isinstance(theirs, torch.Tensor) and mine.dtype == theirs.dtype and mine.shape == theirs.shape, where
        if not mine.is_floating_point():
            assert torch.equal(mine, theirs), where
            return []
        torch.testing.assert_close(mine, theirs, rtol=RTOL, atol=ATOL, msg=where)
        return [(float((mine.double() - theirs.double()).abs().max()) if mine.numel() else 0.0, where)]
    if isinstance(mine, dict):
        assert mine.keys() == theirs.keys(), where
        return [found for key in mine for found in differences(mine[key], theirs[key], f"{where}/{key}")]
    assert mine == theirs, f"{where}: {mine!r} != {theirs!r}"
    return []


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != ".lock"
    }


def test_a_killed_batched_run_resumes_each_seed_from_its_own_checkpoint(
    project: tuple[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed with seed 0 finished, seed 1 after its second checkpoint and seed 2 after its first: training again
    keeps seed 0 as it was and ends seeds 1 and 2 (at different steps: two cohorts) where the uninterrupted run
    ended them."""
    case, original = project
    root = new_project(tmp_path, original / "data" / "dataset.parquet")  # a fingerprint holds the dataset's path
    train_stage(bc_params(case, train={"seeds": [0, 1, 2]}), root)
    run = root / "runs" / "batched"
    for seed, kept in ((1, 2), (2, 1)):
        (run / f"seed_{seed}" / "train_summary.json").unlink()
        for _, path in list_checkpoints(run / f"seed_{seed}" / "checkpoints")[kept:]:
            path.unlink()
    finished = snapshot(run / "seed_0")
    with caplog.at_level(logging.INFO, logger="rlcore"):
        train_stage(bc_params(case, train={"seeds": [0, 1, 2]}), root)
    assert "seed 0: finished" in caplog.text and "train.seeds: this program trains seeds 1-2 (stacked)" in caplog.text
    assert snapshot(run / "seed_0") == finished
    for seed in (1, 2):
        summary = read_json(run / f"seed_{seed}" / "train_summary.json")
        assert summary["gradient_steps"] == 90 and len(summary["checkpoints"]) == 3
        resumed = checkpoints(run / f"seed_{seed}")[-1]
        uninterrupted = checkpoints(original / "runs" / "batched" / f"seed_{seed}")[-1]
        differences(resumed.tensors, uninterrupted.tensors, f"{case} seed {seed}")
        assert resumed.meta["numpy_rng"] == uninterrupted.meta["numpy_rng"]


def test_a_step_where_some_seeds_loss_is_not_finite_is_skipped_by_those_seeds_only(
    datasets: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NaN in seed 1's minibatch at gradient step 10 and in seed 2's at steps 10 and 11: those seeds skip those
    steps (their optimizers then count fewer steps: the seeds train on in three cohorts), as the unbatched runs
    skip them."""
    root = new_project(tmp_path, datasets("discrete"))
    start, draw = DatasetSource.__init__, DatasetSource.batch
    poisoned_steps = {0: (), 1: (10,), 2: (10, 11)}

    def started(self: DatasetSource, params: Params, *spaces: Any) -> None:
        start(self, params, *spaces)
        self.poisoned_steps = poisoned_steps[params.seed]  # type: ignore[attr-defined]

    def poisoned(
        self: DatasetSource, step: int, rng: Any, batch_size: int, fields: Any = None
    ) -> dict[str, torch.Tensor]:
        batch = draw(self, step, rng, batch_size, fields)
        if step in self.poisoned_steps:  # type: ignore[attr-defined]
            batch["obs"][0, 0] = float("nan")
        return batch

    monkeypatch.setattr(DatasetSource, "__init__", started)
    monkeypatch.setattr(DatasetSource, "batch", poisoned)
    train = {"seeds": [0, 1, 2], "max_steps": 30}
    train_stage(bc_params("discrete", train=train), root)
    train_stage(bc_params("discrete", name="single", train={**train, "batch_seeds": False}), root)
    adam_steps = []
    for seed in (0, 1, 2):
        (mine,) = checkpoints(root / "runs" / "batched" / f"seed_{seed}")
        (single,) = checkpoints(root / "runs" / "single" / f"seed_{seed}")
        differences(mine.tensors, single.tensors, f"seed {seed}")
        adam_steps.append(int(mine.tensors["algorithm"]["optimizer"]["state"][0]["step"]))
    assert adam_steps == [30, 29, 28]
