"""BC's ``train.seeds`` as one batched program (``rlcore.trainers.offline_seeds``): seed k of the batched run is the
run with ``seed: k`` (its evaluations, validation metrics, step counts and RNG states equal; its weights and Adam
moments within float32 summation order), the seeds differ, and a killed batched run resumes each seed from its own
checkpoint (seeds at different steps in different cohorts) and keeps the finished ones.

Measured (CartPole and Pendulum, 90 gradient steps of 64): the largest difference of any weight or moment from the
unbatched run's is about 1e-7 (weights of scale ~1); validation metrics agree within a few float32 ulps."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.common.files import read_json
from rlcore.config.sections import Params
from rlcore.params import validate_params
from rlcore.stages import collect_stage, train_stage
from tests.conftest import PROJECT

RTOL, ATOL = 1e-5, 1e-6
"""Weights and Adam moments (scale ~1 and below) after 90 steps differ by ~1e-7 at most (float32 sums in another
order in the batched matrix products): a few times below these."""

CASES: dict[str, dict[str, Any]] = {
    # CartPole: Discrete actions (cross-entropy).
    "discrete": {"env": {"id": "CartPole-v1"}, "dataset": {"validation_fraction": 0.2}},
    # Pendulum: Box actions (Gaussian NLL), with weight decay (AdamW's decoupled decay on the stacked tensors).
    "box": {
        "env": {"id": "Pendulum-v1"},
        "algo": {"name": "bc", "batch_size": 64, "loss": "nll", "weight_decay": 0.01},
        "dataset": {"validation_fraction": 0.3},
    },
}


def bc_params(case: str, **changes: Any) -> Params:
    """offline.yaml at a tiny budget: 90 gradient steps of 64, a checkpoint every 30, one evaluation episode of at
    most 50 steps; ``changes`` merge into their sections."""
    tree = yaml.safe_load((PROJECT / "offline.yaml").read_text())
    tree["name"] = "batched"
    tree["algo"] |= {"batch_size": 64}
    tree["collect"] |= {"policy": "random", "steps": 1500, "num_envs": 4}
    tree["train"] |= {"max_steps": 90, "eval_every": 30, "log_every": 30, "eval_episodes": 1}
    tree["train"] |= {"target_return": None, "progress_bar": "off"}
    tree["eval"] |= {"max_episode_steps": 50}
    for key, value in {**CASES[case], **changes}.items():
        tree[key] = tree[key] | value if isinstance(tree.get(key), dict) else value
    return validate_params(tree)


@pytest.fixture(scope="module", params=list(CASES))
def project(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(case, a project with a random-policy dataset and ``train.seeds: [0, 1, 2]`` trained batched into
    ``runs/batched`` and one after another into ``runs/single``)."""
    case: str = request.param
    root = tmp_path_factory.mktemp(f"batched-{case}")
    collect_stage(bc_params(case), root)
    train_stage(bc_params(case, train={"seeds": [0, 1, 2]}), root)
    train_stage(bc_params(case, name="single", train={"seeds": [0, 1, 2], "batch_seeds": False}), root)
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


def test_each_batched_seed_is_the_run_with_that_seed(project: tuple[str, Path]) -> None:
    """Every checkpoint of seed k: the same evaluation returns, step counts and RNG states as the unbatched run's,
    weights, Adam moments and validation metrics within rtol 1e-5 / atol 1e-6."""
    case, root = project
    largest: list[tuple[float, str]] = []
    for seed in (0, 1, 2):
        ours = checkpoints(root / "runs" / "batched" / f"seed_{seed}")
        theirs = checkpoints(root / "runs" / "single" / f"seed_{seed}")
        assert [c.step for c in ours] == [c.step for c in theirs] == [30, 60, 90]
        for mine, single in zip(ours, theirs, strict=True):
            where = f"{case} seed {seed} {mine.path.name}"
            largest += differences(mine.tensors, single.tensors, where)
            assert mine.tensors["algorithm"]["optimizer"]["state"], f"{where}: no optimizer state"
            for key in ("gradient_steps", "updates", "numpy_rng"):
                assert mine.meta[key] == single.meta[key], f"{where} {key}"
            assert mine.meta["validation"].keys() == single.meta["validation"].keys() != set(), where
            for name, value in mine.meta["validation"].items():
                assert value == pytest.approx(single.meta["validation"][name], rel=RTOL, abs=ATOL), f"{where} {name}"
            returns = [[entry["mean_return"] for entry in c.meta["evaluations"]] for c in (mine, single)]
            assert returns[0] == pytest.approx(returns[1], rel=RTOL, abs=ATOL), where
    assert max(largest)[0] > 0, "bitwise equal: is the batched trainer used at all?"


def test_the_batched_seeds_differ(project: tuple[str, Path]) -> None:
    case, root = project
    first = [checkpoints(root / "runs" / "batched" / f"seed_{seed}")[0].tensors["policy"] for seed in (0, 1, 2)]
    weights = [key for key in first[0] if key.endswith("weight")]
    assert weights, case
    for key in weights:
        assert not torch.equal(first[0][key], first[1][key]) and not torch.equal(first[1][key], first[2][key]), key


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
    root = tmp_path  # a run's fingerprint holds its dataset's path: trained here, not copied
    (root / "data").mkdir()
    shutil.copy(original / "data" / "dataset.parquet", root / "data" / "dataset.parquet")
    train_stage(bc_params(case, train={"seeds": [0, 1, 2]}), root)
    run = root / "runs" / "batched"
    for seed, kept in ((1, 2), (2, 1)):
        (run / f"seed_{seed}" / "train_summary.json").unlink()
        for _, path in list_checkpoints(run / f"seed_{seed}" / "checkpoints")[kept:]:
            path.unlink()
    finished = snapshot(run / "seed_0")
    with caplog.at_level(logging.INFO, logger="rlcore"):
        train_stage(bc_params(case, train={"seeds": [0, 1, 2]}), root)
    assert "seed 0: finished" in caplog.text and "2 seeds trained as one batched program" in caplog.text
    assert snapshot(run / "seed_0") == finished
    for seed in (1, 2):
        summary = read_json(run / f"seed_{seed}" / "train_summary.json")
        assert summary["gradient_steps"] == 90 and len(summary["checkpoints"]) == 3
        resumed = checkpoints(run / f"seed_{seed}")[-1]
        uninterrupted = checkpoints(original / "runs" / "batched" / f"seed_{seed}")[-1]
        differences(resumed.tensors, uninterrupted.tensors, f"{case} seed {seed}")
        assert resumed.meta["numpy_rng"] == uninterrupted.meta["numpy_rng"]
