"""SAC's ``train.seeds`` as one program (``rlcore.trainers.off_policy``, ``SAC.update_members`` over ``StackedSAC``,
acting through ``StackedSAC.explore``): seed k of the batched run is the run with ``seed: k`` (step counts and RNG
states equal; replay, evaluations, actor, critics, targets, log alpha and Adam moments within rtol 1e-4 / atol 1e-6,
issue 39's float-rounding contract), the seeds differ, discrete SAC batches too, a step some seed cannot take is
taken by that seed as its unbatched run takes it, and a killed batched run resumes each seed from its own
checkpoint. The fixture checks the trainer's log line: the seeds are stacked, not each its own network in turn
(which would pass the equivalence trivially).

Measured (Pendulum, gradients clipped): the updates alone are bitwise the unbatched run's (each seed's matrix products
the same ``baddbmm`` slices, Adam elementwise, the clipping norms summed as torch's own per seed,
``rlcore.nets.stacked.clip_member_grad_norms_``, each seed's reparameterization noise its own generator's draw), but
the stacked acting pass rounds the actor's last layer (64 -> 2 for one env row) an ulp away from ``nn.Linear``'s, and
clipped SAC on Pendulum carries an ulp on: 4e-8 in any weight or moment after 100 gradient steps, 7e-4 after 400 (as
the per-tensor norms reduced across the members' axis once did: 1e-7 after 100 steps, 1e-2 after 400). So the
equivalence is checked after 100 gradient steps, and after 20 where a seed skips a step (unclipped, a hidden ReLU
unit flipped by the drift put 1.8e-4 into a critic weight after 100 steps)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import preset_text
from test_seeds_batched_off_policy import replay_arrays
from test_seeds_batched_offline import checkpoints, differences

from rlcore.algos import sac
from rlcore.algos.sac_members import StackedSAC
from rlcore.common.checkpoints import list_checkpoints
from rlcore.common.files import read_json
from rlcore.config.sections import PolicyConfig
from rlcore.params import load_params
from rlcore.stages import train_stage
from rlcore.trainers.off_policy import Collector
from rlcore.trainers.sources import ReplaySource

PRESET = "configs/sac-pendulum.yaml"
DISCRETE = "configs/sac-discrete-cartpole.yaml"
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


def train(root: Path, *overrides: str, preset: str = PRESET) -> None:
    train_stage(load_params(root / preset, [*BUDGET, *overrides]), root)


def new_project(root: Path) -> Path:
    (root / "configs").mkdir(parents=True)
    for preset in (PRESET, DISCRETE):
        (root / preset).write_text(preset_text(preset))
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``train.seeds: [0, 1, 2]`` with gradient clipping trained batched into ``runs/batched`` and one after another
    into ``runs/single``."""
    root = new_project(tmp_path_factory.mktemp("batched-sac"))
    clipped = "algo.max_grad_norm=1.0"  # clipped every step: per-seed norms off by an ulp drift apart by 400 steps
    short = ["train.max_steps=300", "train.eval_every=250", clipped]  # 50 and 100 gradient steps (the docstring)
    with logged_lines() as lines:  # caplog is per test; this fixture is per module
        train(root, "train.seeds=[0, 1, 2]", *short)
    assert "train.seeds: 3 seeds trained as one program, stacked (seed 0, seed 1, seed 2)" in lines, lines
    train(root, "train.seeds=[0, 1, 2]", *short, "name=single", "train.batch_seeds=false")
    return root


@contextlib.contextmanager
def logged_lines() -> Iterator[list[str]]:
    """The lines the ``rlcore`` logger logs at INFO in the block."""
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("rlcore")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


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


def test_each_batched_seed_is_the_run_with_that_seed(project: Path) -> None:
    """Every checkpoint of seed k: the same evaluation returns, counters, RNG states and replay as the unbatched
    run's; actor, critics, targets, log alpha and the three Adam states within rtol 1e-5 / atol 1e-6 (measured: 0)."""
    assert_equivalent(project, (0, 1, 2), [250, 300])
    (last,) = checkpoints(project / "runs" / "batched" / "seed_2")[-1:]
    algorithm = last.tensors["algorithm"]
    assert {"critic", "critic_target", "log_alpha"} <= algorithm.keys()
    assert float(algorithm["log_alpha"]) != 0.0, "alpha never tuned"


def test_the_batched_seeds_differ(project: Path) -> None:
    first = [checkpoints(project / "runs" / "batched" / f"seed_{seed}")[0].tensors for seed in (0, 1, 2)]
    for part in ("policy",):
        for key in (key for key in first[0][part] if key.endswith("weight")):
            assert not torch.equal(first[0][part][key], first[1][part][key]), key
            assert not torch.equal(first[1][part][key], first[2][part][key]), key
    critics = [tensors["algorithm"]["critic"]["layers.0.weight"] for tensors in first]
    assert not torch.equal(critics[0], critics[1]) and not torch.equal(critics[1], critics[2])


def test_discrete_sac_with_clipped_gradients_batches(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Discrete SAC (CartPole), each seed's gradients clipped to its own norm: the batched seeds are the unbatched
    runs after 100 gradient steps."""
    root = new_project(tmp_path)
    overrides = ["train.max_steps=300", "train.eval_every=300", "algo.max_grad_norm=0.5", "train.seeds=[0, 1]"]
    with caplog.at_level(logging.INFO, logger="rlcore"):
        train(root, *overrides, preset=DISCRETE)
    assert "train.seeds: 2 seeds trained as one program, stacked" in caplog.text
    train(root, *overrides, "name=single", "train.batch_seeds=false", preset=DISCRETE)
    assert_equivalent(root, (0, 1), [300])


def test_a_killed_batched_run_resumes_each_seed_from_its_own_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed with seed 0 finished and seed 1 after its first checkpoint: training again keeps seed 0 as it was and
    finishes seed 1 from its checkpoint (with its replay buffer)."""
    root = new_project(tmp_path)
    with monkeypatch.context() as patch:  # every checkpoint's replay kept, as a kill before the next one leaves it
        patch.setattr(ReplaySource, "_keep_only", lambda self, run_root, step: None)
        train(root, "train.seeds=[0, 1]")
    run = root / "runs" / "batched"
    (run / "seed_1" / "train_summary.json").unlink()
    _, last = list_checkpoints(run / "seed_1" / "checkpoints")[-1]
    last.unlink()
    for replay in (run / "seed_1" / "replay").glob("step_0000000600.npz"):
        replay.unlink()
    finished = {path: path.stat().st_mtime_ns for path in (run / "seed_0").rglob("*") if path.is_file()}
    with caplog.at_level(logging.INFO, logger="rlcore"):
        train(root, "train.seeds=[0, 1]")
    assert "seed 0: finished" in caplog.text and "1 seeds trained as one program" in caplog.text
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
    sample = Collector.sample

    def poisoned_sample(self: Collector) -> dict[str, torch.Tensor]:
        seeds[id(self.algorithm)] = self.session.params.seed
        batch = sample(self)
        if part == "critic" and self.session.params.seed == 1 and self.algorithm.gradient_steps == 10:
            batch["obs"][0, 0] = float("nan")
        return batch

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
    monkeypatch.setattr(Collector, "sample", poisoned_sample)
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
