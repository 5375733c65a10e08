"""DQN's ``train.seeds`` as one program (``rlcore.trainers.off_policy``, ``rlcore.trainers.lockstep``): seed k of the
batched run is the run with ``seed: k`` (its replay buffer, evaluations, step counts and RNG states equal; its
Q-network, target network and Adam moments within float32 summation order), the seeds differ, the dueling head
steps each seed's own network in the one program, and a killed batched run resumes each seed from its own
checkpoint.

Measured (CartPole, 1200 env steps, 384 gradient steps per seed): the largest difference of any weight or moment from
the unbatched run's is about 5e-7 (weights of scale ~1)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_seeds import assert_identical
from test_seeds_batched_offline import checkpoints, differences, spy_forms

from rlcore.common.checkpoints import list_checkpoints
from rlcore.common.files import read_json
from rlcore.params import load_params
from rlcore.stages import train_stage
from rlcore.trainers.off_policy import Collector
from rlcore.trainers.sources import ReplaySource
from tests.conftest import PROJECT

PRESET = "configs/dqn-cartpole.yaml"
BUDGET = [
    "name=batched",
    "train.max_steps=1200",
    "train.eval_every=600",
    "train.log_every=600",
    "train.eval_episodes=1",
    "train.target_return=null",
    "train.max_wall_seconds=null",
    "train.progress_bar=off",
    "algo.learning_starts=300",
    "algo.buffer_size=10000",
    "eval.max_episode_steps=100",
]
"""DQN CartPole with two checkpoints: 128 gradient steps every 256 env steps from env step 300 (3 phases by the end),
the target copied every 100 gradient steps."""


BATCHED_CALLS: list[tuple[int, str]] = []
"""(members, form) of each set of member steps built during the fixture's batched run."""


def train(root: Path, *overrides: str) -> None:
    train_stage(load_params(root / PRESET, [*BUDGET, *overrides]), root)


def new_project(root: Path) -> Path:
    (root / PRESET).parent.mkdir(parents=True)
    shutil.copy(PROJECT / PRESET, root / PRESET)
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``train.seeds: [0, 1, 2]`` trained batched into ``runs/batched`` and one after another into ``runs/single``."""
    root = new_project(tmp_path_factory.mktemp("batched-dqn"))
    with pytest.MonkeyPatch.context() as patch:  # which seeds stepped stacked
        spy_forms(patch, BATCHED_CALLS)
        train(root, "train.seeds=[0, 1, 2]")
    train(root, "train.seeds=[0, 1, 2]", "name=single", "train.batch_seeds=false")
    return root


def replay_arrays(run_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    arrays: dict[str, dict[str, np.ndarray]] = {}
    for path in sorted((run_dir / "replay").glob("*.npz")):
        with np.load(path) as saved:
            arrays[path.name] = {key: saved[key] for key in saved.files}
    return arrays


def test_each_batched_seed_is_the_run_with_that_seed(project: Path) -> None:
    """Every checkpoint of seed k: the same evaluation returns, counters and RNG states as the unbatched run's, the
    same replay buffer; Q-network, target network and Adam moments within rtol 1e-5 / atol 1e-6."""
    for seed in (0, 1, 2):
        ours = checkpoints(project / "runs" / "batched" / f"seed_{seed}")
        theirs = checkpoints(project / "runs" / "single" / f"seed_{seed}")
        assert [c.step for c in ours] == [c.step for c in theirs] == [600, 1200]
        assert ours[0].meta["gradient_steps"] > 0, "no update before the first checkpoint"
        for mine, single in zip(ours, theirs, strict=True):
            where = f"seed {seed} {mine.path.name}"
            differences(mine.tensors, single.tensors, where)
            for key in ("env_steps", "gradient_steps", "updates", "numpy_rng"):
                assert mine.meta[key] == single.meta[key], f"{where} {key}"
            returns = [[entry["mean_return"] for entry in c.meta["evaluations"]] for c in (mine, single)]
            assert returns[0] == returns[1], where
        mine_replay = replay_arrays(project / "runs" / "batched" / f"seed_{seed}")
        single_replay = replay_arrays(project / "runs" / "single" / f"seed_{seed}")
        assert mine_replay.keys() == single_replay.keys() != set()
        for name, arrays in mine_replay.items():
            for key, values in arrays.items():
                assert np.array_equal(values, single_replay[name][key]), f"seed {seed} replay {key}"
    # The batched trainer ran all three seeds in one program (bitwise equality to the unbatched runs is allowed: on
    # some CPUs the batched products sum in the same order).
    assert (3, "stacked") in BATCHED_CALLS, BATCHED_CALLS


def test_the_batched_seeds_differ(project: Path) -> None:
    first = [checkpoints(project / "runs" / "batched" / f"seed_{seed}")[0].tensors["policy"] for seed in (0, 1, 2)]
    for key in (key for key in first[0] if key.endswith("weight")):
        assert not torch.equal(first[0][key], first[1][key]) and not torch.equal(first[1][key], first[2][key]), key


def test_the_dueling_head_steps_each_seeds_own_network_in_one_program(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A head that does not stack: the seeds train as one program, each its own network updated in turn, bitwise as
    with ``batch_seeds: false``."""
    root = new_project(tmp_path)
    short = ["train.max_steps=600", "algo.dueling=true", "train.seeds=[0, 1]"]
    with caplog.at_level(logging.INFO, logger="rlcore"):
        train(root, *short)
    assert "train.seeds: 2 seeds trained as one program, each its own network (seed 0, seed 1)" in caplog.text
    train(root, *short, "name=single", "train.batch_seeds=false")
    for seed in (0, 1):
        (mine,) = checkpoints(root / "runs" / "batched" / f"seed_{seed}")
        (single,) = checkpoints(root / "runs" / "single" / f"seed_{seed}")
        assert_identical(mine.tensors, single.tensors, f"seed {seed}")


def test_a_killed_batched_run_resumes_each_seed_from_its_own_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed with seed 0 finished and seeds 1 and 2 after their first checkpoint: training again keeps seed 0 as
    it was and finishes seeds 1 and 2 from their checkpoints (with their replay buffers; not bitwise the
    uninterrupted run: the envs restart at the checkpoint)."""
    root = new_project(tmp_path)
    with monkeypatch.context() as patch:  # every checkpoint's replay kept, as a kill before the next one leaves it
        patch.setattr(ReplaySource, "_keep_only", lambda self, run_root, step: None)
        train(root, "train.seeds=[0, 1, 2]")
    run = root / "runs" / "batched"
    for seed in (1, 2):
        (run / f"seed_{seed}" / "train_summary.json").unlink()
        _, last = list_checkpoints(run / f"seed_{seed}" / "checkpoints")[-1]
        last.unlink()
        for replay in (run / f"seed_{seed}" / "replay").glob("step_0000001200.npz"):
            replay.unlink()
    finished = {path: path.stat().st_mtime_ns for path in (run / "seed_0").rglob("*") if path.is_file()}
    with caplog.at_level(logging.INFO, logger="rlcore"):
        train(root, "train.seeds=[0, 1, 2]")
    assert "seed 0: finished" in caplog.text and "2 seeds trained as one program, stacked" in caplog.text
    assert caplog.text.count("replay transitions from step_0000000600.npz") == 2
    assert {path: path.stat().st_mtime_ns for path in finished} == finished
    for seed in (1, 2):
        summary: dict[str, Any] = read_json(run / f"seed_{seed}" / "train_summary.json")
        assert summary["env_steps"] == 1200 and len(summary["checkpoints"]) == 2


def test_a_step_where_some_seeds_loss_is_not_finite_is_skipped_by_that_seed_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NaN in seed 1's replay batch at its gradient step 10: seed 1 skips it (as its unbatched run does) while seed
    0 takes it, and the seeds step on together (their Adam counts differ: one per member)."""
    root = new_project(tmp_path)
    sample = Collector.sample

    def poisoned(self: Collector) -> dict[str, torch.Tensor]:
        batch = sample(self)
        if self.session.params.seed == 1 and self.algorithm.gradient_steps == 10:
            batch["obs"][0, 0] = float("nan")
        return batch

    monkeypatch.setattr(Collector, "sample", poisoned)
    short = ["train.max_steps=900", "train.eval_every=900", "train.seeds=[0, 1]"]  # phases at env steps 512 and 768
    train(root, *short)
    train(root, *short, "name=single", "train.batch_seeds=false")
    adam_steps = []
    for seed in (0, 1):
        (mine,) = checkpoints(root / "runs" / "batched" / f"seed_{seed}")
        (single,) = checkpoints(root / "runs" / "single" / f"seed_{seed}")
        differences(mine.tensors, single.tensors, f"seed {seed}")
        adam_steps.append(int(mine.tensors["algorithm"]["optimizer"]["state"][0]["step"]))
    assert adam_steps == [256, 255]


def test_the_batched_step_masks_illegal_actions_as_the_policy_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taxi with its action masks (``env.action_mask: info``), plain DQN's max over the next state's legal actions:
    the batched seeds equal the unbatched runs after one update phase (128 gradient steps).

    Not double DQN: its target reads Q_target at the online net's masked argmax, so a mask missed there picks an
    illegal action, whose value (the lowest float) makes the loss infinite and that seed skips the step.
    Later the runs drift apart faster than on CartPole (1200 env steps: 5e-6; with double DQN 3e-3, its argmax
    flipping among Taxi's nearly tied actions on float32 ulps)."""
    root = new_project(tmp_path)
    overrides = ["env.id=Taxi-v4", "env.action_mask=info", "algo.double_dqn=false", "train.max_steps=600"]
    overrides += ["train.seeds=[0, 1]"]
    calls: list[tuple[int, str]] = []
    spy_forms(monkeypatch, calls)
    train(root, *overrides)
    train(root, *overrides, "name=single", "train.batch_seeds=false")
    for seed in (0, 1):
        (mine,) = checkpoints(root / "runs" / "batched" / f"seed_{seed}")
        (single,) = checkpoints(root / "runs" / "single" / f"seed_{seed}")
        assert mine.meta["gradient_steps"] == 128
        differences(mine.tensors, single.tensors, f"seed {seed}")
    assert (2, "stacked") in calls, calls  # both seeds stepped stacked
