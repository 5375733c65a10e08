"""SAC's ``train.seeds`` as one program (``rlcore.trainers.off_policy``, ``SAC.update_members`` over ``StackedSAC``,
acting through ``StackedSAC.explore``), what is not "member k is the run with ``seed: k``" (that, Box and Discrete
actions, gradients clipped: ``tests/test_seeds_contract.py``): a step some seed cannot take is taken by that seed as
its unbatched run takes it, a killed batched run resumes each seed from its own checkpoint, and image encoders step
each seed's own networks.

Measured (Pendulum, gradients clipped): the stacked acting pass rounds the actor's last layer (64 -> 2 for one env
row) an ulp away from ``nn.Linear``'s, and clipped SAC on Pendulum carries an ulp on: 4e-8 in any weight or moment
after 100 gradient steps, 7e-4 after 400. So a skipped step is checked after 20 gradient steps (unclipped, a hidden
ReLU unit flipped by the drift put 1.8e-4 into a critic weight after 100 steps)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import preset_text, replay_arrays
from test_seeds_batched_off_policy import poison_batches
from test_seeds_batched_offline import checkpoints, differences

from rlcore.algos import sac
from rlcore.algos.sac_members import StackedSAC
from rlcore.common.checkpoints import list_checkpoints
from rlcore.common.files import read_json
from rlcore.config.sections import PolicyConfig
from rlcore.params import load_params
from rlcore.stages import train_stage
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import ReplaySource

PRESET = "configs/sac-pendulum.yaml"
BUDGET = [
    "name=batched",
    "train.max_steps=600",
    "train.eval_every=300",
    "train.log_every=300",
    "train.eval_episodes=1",
    "train.target_return=null",
    "train.max_wall_seconds=null",
    "train.progress_bar=off",
    "algo.learning_starts=200",
    "algo.batch_size=64",
    "algo.buffer_size=10000",
    "eval.max_episode_steps=50",
]
"""SAC Pendulum with two checkpoints: a gradient step per env step from env step 200 (100 before the first)."""
ACTING_RTOL, ACTING_ATOL, ACTING_WEIGHTS_ATOL = 1e-4, 1e-5, 1e-6
"""Seed k's replay floats and evaluation returns against its one-seed run's. The seeds act through one stacked
forward pass (``StackedSAC.explore``), whose ``baddbmm`` for a single row may round the actor's last layer an ulp
away from ``nn.Linear``'s (measured: actions 1.2e-7, observations 4.8e-7, returns 1e-9 relative after 300 steps);
Pendulum's dynamics carry it on. Integer columns (step counts, dones) stay equal; weights and moments within
``ACTING_WEIGHTS_ATOL``."""


def train(root: Path, *overrides: str) -> None:
    train_stage(load_params(root / PRESET, [*BUDGET, *overrides]), root)


def new_project(root: Path) -> Path:
    (root / "configs").mkdir(parents=True)
    (root / PRESET).write_text(preset_text(PRESET))
    return root


def close(mine: Any, theirs: Any, where: str) -> list[tuple[float, str]]:
    """(max absolute difference, where) of every float tensor, each within ``ACTING_RTOL`` and
    ``ACTING_WEIGHTS_ATOL``; everything else equal."""
    if isinstance(mine, dict):
        assert mine.keys() == theirs.keys(), where
        return [found for key in mine for found in close(mine[key], theirs[key], f"{where}/{key}")]
    if not isinstance(mine, torch.Tensor) or not mine.is_floating_point():
        return differences(mine, theirs, where)
    torch.testing.assert_close(mine, theirs, rtol=ACTING_RTOL, atol=ACTING_WEIGHTS_ATOL, msg=lambda m: f"{where}: {m}")
    return [(float((mine.double() - theirs.double()).abs().max()) if mine.numel() else 0.0, where)]


def assert_equivalent(root: Path, seeds: tuple[int, ...], steps: list[int]) -> list[tuple[float, str]]:
    """Every checkpoint of seed k in ``runs/batched`` against ``runs/single``: counters and RNG states equal, evaluation
    returns, replay and every float tensor within the ``ACTING_*`` tolerances; the differences found."""
    largest: list[tuple[float, str]] = []
    for seed in seeds:
        ours = checkpoints(root / "runs" / "batched" / f"seed_{seed}")
        theirs = checkpoints(root / "runs" / "single" / f"seed_{seed}")
        assert [c.step for c in ours] == [c.step for c in theirs] == steps
        assert ours[0].meta["gradient_steps"] > 0, "no update before the first checkpoint"
        for mine, single in zip(ours, theirs, strict=True):
            where = f"seed {seed} {mine.path.name}"
            largest += close(mine.tensors, single.tensors, where)
            for key in ("env_steps", "gradient_steps", "updates", "numpy_rng"):
                assert mine.meta.get(key) == single.meta.get(key), f"{where} {key}"
            returns = [[entry["mean_return"] for entry in c.meta["evaluations"]] for c in (mine, single)]
            assert returns[0] == pytest.approx(returns[1], rel=ACTING_RTOL), where
        mine_replay = replay_arrays(root / "runs" / "batched" / f"seed_{seed}")
        single_replay = replay_arrays(root / "runs" / "single" / f"seed_{seed}")
        assert mine_replay.keys() == single_replay.keys() != set()
        for name, arrays in mine_replay.items():
            for key, values in arrays.items():
                theirs = single_replay[name][key]
                if np.issubdtype(values.dtype, np.floating):
                    np.testing.assert_allclose(
                        values, theirs, rtol=ACTING_RTOL, atol=ACTING_ATOL, err_msg=f"seed {seed}"
                    )
                else:
                    assert np.array_equal(values, theirs), f"seed {seed} replay {key}"
    return largest


FEWER = ["algo.train_freq=4", "algo.gradient_steps_per_sample=0.25"]
"""A gradient step every 4 env steps (100 by the end of the budget): what resumes is the same with fewer."""


def test_a_killed_batched_run_resumes_each_seed_from_its_own_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed with seed 0 finished and seed 1 after its first checkpoint: training again keeps seed 0 as it was and
    finishes seed 1 from its checkpoint (with its replay buffer)."""
    root = new_project(tmp_path)
    with monkeypatch.context() as patch:  # every checkpoint's replay kept, as a kill before the next one leaves it
        patch.setattr(ReplaySource, "_keep_only", lambda self, run_root, step: None)
        train(root, "train.seeds=[0, 1]", *FEWER)
    run = root / "runs" / "batched"
    (run / "seed_1" / "train_summary.json").unlink()
    _, last = list_checkpoints(run / "seed_1" / "checkpoints")[-1]
    last.unlink()
    for replay in (run / "seed_1" / "replay").glob("step_0000000600.npz"):
        replay.unlink()
    finished = {path: path.stat().st_mtime_ns for path in (run / "seed_0").rglob("*") if path.is_file()}
    with caplog.at_level(logging.INFO, logger="rlcore"):
        train(root, "train.seeds=[0, 1]", *FEWER)
    assert "seed 0: finished" in caplog.text and "train.seeds: this program trains seed 1 (" in caplog.text
    assert caplog.text.count("replay transitions from step_0000000300.npz") == 1
    assert {path: path.stat().st_mtime_ns for path in finished} == finished
    summary: dict[str, Any] = read_json(run / "seed_1" / "train_summary.json")
    assert summary["env_steps"] == 600 and len(summary["checkpoints"]) == 2


@pytest.mark.parametrize("part", ["critic", "actor"])
def test_a_step_some_seed_cannot_take_is_skipped_by_that_seed_only(
    part: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 1's step 10 not finite: in its critics' loss (a NaN in its replay batch: that seed skips the critics' and
    actor's steps), or in its actor's loss only (it skips the actor's step). Either way each seed is its unbatched run,
    and the seeds stay batched: the skip is a mask on that seed's part of the step (a step count per seed), so every
    gradient step of the batched run is one ``update_members`` over both seeds."""
    root = new_project(tmp_path)
    seeds: dict[int, int] = {}  # id(algorithm) -> its seed

    def poisoned_batch(session: TrainingSession[Any]) -> bool:
        seeds[id(session.algorithm)] = session.params.seed
        return part == "critic" and session.params.seed == 1 and session.algorithm.gradient_steps == 10

    def poisoned(loss: Any, algorithms: Any) -> Any:
        def wrapped(q_pi: torch.Tensor, log_prob: torch.Tensor, alpha: torch.Tensor) -> Any:
            actor_loss, entropy = loss(q_pi, log_prob, alpha)
            for k, algorithm in enumerate(algorithms()):
                if seeds.get(id(algorithm)) == 1 and algorithm.gradient_steps == 10:
                    actor_loss = actor_loss.clone()
                    actor_loss[(k,) if actor_loss.dim() else ()] = float("nan")
            return actor_loss, entropy

        return wrapped

    current: list[Any] = []  # each update_members call's algorithms
    update_members = sac.SAC.update_members
    monkeypatch.setattr(
        sac.SAC,
        "update_members",
        staticmethod(lambda members: current.append(members.algorithms) or update_members(members)),
    )
    if part == "actor":
        monkeypatch.setattr(sac, "box_actor_loss", poisoned(sac.box_actor_loss, lambda: current[-1]))
    poison_batches(monkeypatch, poisoned_batch)
    # 20 gradient steps: past the skip, short of the drift an ulp of stacked acting grows into (the module docstring)
    short = ["train.max_steps=220", "train.eval_every=220", "train.seeds=[0, 1]"]
    if part == "critic":
        short.append("algo.ent_coef=0.2")  # a fixed alpha: no alpha optimizer
    train(root, *short)
    assert len(current) == 20 and all(len(algorithms) == 2 for algorithms in current), "a step ran seed by seed"
    assert [algorithm.skipped_steps for algorithm in current[-1]] == [0, 2 if part == "critic" else 1]
    train(root, *short, "name=single", "train.batch_seeds=false")
    assert_equivalent(root, (0, 1), [220])
    (seed_1,) = checkpoints(root / "runs" / "batched" / "seed_1")
    adam = seed_1.tensors["algorithm"]
    critic_steps = int(adam["critic_optimizer"]["state"][0]["step"])
    actor_steps = int(adam["actor_optimizer"]["state"][0]["step"])
    assert (critic_steps, actor_steps) == ((19, 19) if part == "critic" else (20, 19))


def test_pixels_step_each_seeds_own_networks() -> None:
    """An image encoder has weights (the actor's and the critics' own): its seeds do not stack, and each seed's own
    networks step in turn in the one program (as ``test_seeds_batched_off_policy`` checks for DQN's dueling head)."""
    observations = gym.spaces.Box(0, 255, (3, 36, 36), np.uint8)
    actions = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    config = sac.SACConfig(name="sac")
    policy = sac.SAC.make_policy(observations, actions, PolicyConfig(hidden_sizes=[8], encoder="small_cnn"), config)
    assert not StackedSAC.stacks(sac.SAC(policy, config))
    vector = sac.SAC.make_policy(gym.spaces.Box(-1, 1, (3,)), actions, PolicyConfig(hidden_sizes=[8]), config)
    assert StackedSAC.stacks(sac.SAC(vector, config))
