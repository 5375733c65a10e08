"""DQN's ``train.seeds`` as one program (``rlcore.trainers.off_policy``, ``rlcore.trainers.lockstep``), what is not
"member k is the run with ``seed: k``" (that, with the replay buffers: ``tests/test_seeds_contract.py``): a killed
batched run resumes each seed from its own checkpoint, and a step where some seed's loss is not finite is skipped by
that seed only."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from test_seeds_batched_offline import checkpoints, differences

from rlcore.common.checkpoints import list_checkpoints
from rlcore.common.files import read_json
from rlcore.data.replay_stack import ReplayStack
from rlcore.params import load_params
from rlcore.stages import train_stage
from rlcore.trainers.off_policy import Collector
from rlcore.trainers.session import TrainingSession
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
    "algo.gradient_steps_per_sample=0.125",
    "eval.max_episode_steps=100",
]
"""DQN CartPole with two checkpoints: 32 gradient steps every 256 env steps from env step 300 (3 phases by the end),
the target copied every 100 gradient steps."""


def train(root: Path, *overrides: str) -> None:
    train_stage(load_params(root / PRESET, [*BUDGET, *overrides]), root)


def poison_batches(monkeypatch: pytest.MonkeyPatch, poisoned: Callable[[TrainingSession[Any]], bool]) -> None:
    """A NaN in the first observation of each replay batch drawn for a session where ``poisoned(session)``, whether
    the batch is its own (``Collector.sample``) or its rows of the stacked seeds' one gather (``ReplayStack``)."""
    sample, stacked_sample, start = Collector.sample, ReplayStack.sample, Collector.__init__
    owners: dict[int, TrainingSession[Any]] = {}  # id(replay buffer) -> its session

    def own_sample(self: Collector) -> dict[str, torch.Tensor]:
        batch = sample(self)
        if poisoned(self.session):
            batch["obs"][0, 0] = float("nan")
        return batch

    def stacked(self: ReplayStack, seats: Any, batch_size: int, rngs: Any) -> dict[str, torch.Tensor]:
        fields = stacked_sample(self, seats, batch_size, rngs)
        for j, k in enumerate(seats):
            if rngs[j] is not None and poisoned(owners[id(self.replays[k])]):
                fields["obs"][j, 0, 0] = float("nan")
        return fields

    def collector(self: Collector, session: TrainingSession[Any]) -> None:
        start(self, session)
        owners[id(session.source.replay)] = session

    monkeypatch.setattr(Collector, "sample", own_sample)
    monkeypatch.setattr(ReplayStack, "sample", stacked)
    monkeypatch.setattr(Collector, "__init__", collector)


def new_project(root: Path) -> Path:
    (root / PRESET).parent.mkdir(parents=True)
    shutil.copy(PROJECT / PRESET, root / PRESET)
    return root


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
    assert "seed 0: finished" in caplog.text and "train.seeds: this program trains seeds 1-2 (stacked)" in caplog.text
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
    poison_batches(monkeypatch, lambda session: session.params.seed == 1 and session.algorithm.gradient_steps == 10)
    short = ["train.max_steps=900", "train.eval_every=900", "train.seeds=[0, 1]"]  # phases at env steps 512 and 768
    train(root, *short)
    train(root, *short, "name=single", "train.batch_seeds=false")
    adam_steps = []
    for seed in (0, 1):
        (mine,) = checkpoints(root / "runs" / "batched" / f"seed_{seed}")
        (single,) = checkpoints(root / "runs" / "single" / f"seed_{seed}")
        differences(mine.tensors, single.tensors, f"seed {seed}")
        adam_steps.append(int(mine.tensors["algorithm"]["optimizer"]["state"][0]["step"]))
    assert adam_steps == [64, 63]
