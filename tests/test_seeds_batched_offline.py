"""BC's ``train.seeds`` as one program (``rlcore.trainers.offline``, ``rlcore.trainers.lockstep``): seed k of the
batched run is the run with ``seed: k`` (its evaluations, validation metrics, step counts and RNG states equal; its
weights and Adam moments within float32 summation order), the seeds differ, and a killed batched run resumes each
seed from its own checkpoint (seeds at different steps step together) and keeps the finished ones.

Measured (CartPole and Pendulum, 90 gradient steps of 64): the largest difference of any weight or moment from the
unbatched run's is about 1e-7 (weights of scale ~1); validation metrics agree within a few float32 ulps."""

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
from test_seeds import assert_identical

from rlcore.algos.value_members import NetworkStack
from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.common.files import read_json
from rlcore.config.sections import Params
from rlcore.params import validate_params
from rlcore.stages import collect_stage, train_stage
from rlcore.trainers import lockstep
from rlcore.trainers.sources import DatasetSource

BATCHED_CALLS: dict[str, list[tuple[int, str]]] = {}
"""Per case: (members, form) of each set of member steps built during the fixture's batched run."""


def spy_forms(patch: pytest.MonkeyPatch, calls: list[tuple[int, str]]) -> None:
    """Record in ``calls`` (members, form) of every set of member steps the lockstep loop builds (calling through)."""
    build = lockstep.member_steps

    def spied(seeds: Any) -> lockstep.MemberSteps:
        steps = build(seeds)
        calls.append((len(seeds), steps.form))
        return steps

    patch.setattr(lockstep, "member_steps", spied)


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


@pytest.fixture(scope="module", params=list(CASES))
def project(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, datasets: Callable[[str], Path]
) -> tuple[str, Path]:
    """(case, a project with a random-policy dataset and ``train.seeds: [0, 1, 2]`` trained batched into
    ``runs/batched`` and one after another into ``runs/single``)."""
    case: str = request.param
    root = new_project(tmp_path_factory.mktemp(f"batched-{case}"), datasets(case))
    with pytest.MonkeyPatch.context() as patch:  # which seeds stepped stacked
        spy_forms(patch, BATCHED_CALLS.setdefault(case, []))
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
    for seed in (0, 1, 2):
        ours = checkpoints(root / "runs" / "batched" / f"seed_{seed}")
        theirs = checkpoints(root / "runs" / "single" / f"seed_{seed}")
        assert [c.step for c in ours] == [c.step for c in theirs] == [30, 60, 90]
        for mine, single in zip(ours, theirs, strict=True):
            where = f"{case} seed {seed} {mine.path.name}"
            differences(mine.tensors, single.tensors, where)
            assert mine.tensors["algorithm"]["optimizer"]["state"], f"{where}: no optimizer state"
            for key in ("gradient_steps", "updates", "numpy_rng"):
                assert mine.meta[key] == single.meta[key], f"{where} {key}"
            assert mine.meta["validation"].keys() == single.meta["validation"].keys() != set(), where
            for name, value in mine.meta["validation"].items():
                assert value == pytest.approx(single.meta["validation"][name], rel=RTOL, abs=ATOL), f"{where} {name}"
            returns = [[entry["mean_return"] for entry in c.meta["evaluations"]] for c in (mine, single)]
            assert returns[0] == pytest.approx(returns[1], rel=RTOL, abs=ATOL), where
    # The batched trainer ran (all three seeds in one program); bitwise equality to the unbatched run is allowed:
    # on some CPUs the batched matrix products sum in the same order for the discrete case.
    assert (3, "stacked") in BATCHED_CALLS[case], BATCHED_CALLS


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
    assert "seed 0: finished" in caplog.text and "2 seeds trained as one program, stacked" in caplog.text
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

    def poisoned(self: DatasetSource, step: int, rng: Any, batch_size: int) -> dict[str, torch.Tensor]:
        batch = draw(self, step, rng, batch_size)
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


def test_seeds_whose_networks_do_not_stack_step_each_its_own_network_in_one_program(
    datasets: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A kind that does not stack (as image BC's CNN): the seeds still train as one program, each its own network
    updated in turn, bitwise as with ``train.batch_seeds: false``."""
    root = new_project(tmp_path, datasets("discrete"))
    monkeypatch.setattr(NetworkStack, "stacks", staticmethod(lambda policy: False))
    train = {"seeds": [0, 1], "max_steps": 30}
    with caplog.at_level(logging.INFO, logger="rlcore"):
        train_stage(bc_params("discrete", train=train), root)
    assert "train.seeds: 2 seeds trained as one program, each its own network (seed 0, seed 1)" in caplog.text
    assert "one after another" not in caplog.text
    train_stage(bc_params("discrete", name="single", train={**train, "batch_seeds": False}), root)
    for seed in (0, 1):
        (mine,) = checkpoints(root / "runs" / "batched" / f"seed_{seed}")
        (single,) = checkpoints(root / "runs" / "single" / f"seed_{seed}")
        assert_identical(mine.tensors, single.tensors, f"seed {seed}")
        assert mine.meta["validation"] == single.meta["validation"]


def test_the_batched_step_masks_illegal_actions_as_the_policy_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taxi with its action masks (``env.action_mask: info``): the batched seeds equal the unbatched runs; the
    cross-entropy is over the legal actions."""
    masked = {"env": {"id": "Taxi-v4", "action_mask": "info"}}
    dataset = collect_stage(bc_params("discrete", **masked), tmp_path / "collect")
    changes = {**masked, "dataset": {"path": str(dataset), "validation_fraction": 0.2}}
    train = {"seeds": [0, 1], "max_steps": 30}
    calls: list[tuple[int, str]] = []
    spy_forms(monkeypatch, calls)
    train_stage(bc_params("discrete", **changes, train=train), tmp_path)
    train_stage(bc_params("discrete", **changes, name="single", train={**train, "batch_seeds": False}), tmp_path)
    for seed in (0, 1):
        (mine,) = checkpoints(tmp_path / "runs" / "batched" / f"seed_{seed}")
        (single,) = checkpoints(tmp_path / "runs" / "single" / f"seed_{seed}")
        differences(mine.tensors, single.tensors, f"seed {seed}")
        for name, value in mine.meta["validation"].items():
            assert value == pytest.approx(single.meta["validation"][name], rel=RTOL, abs=ATOL), f"seed {seed} {name}"
    assert (2, "stacked") in calls, calls  # both seeds stepped stacked
