"""The contract of ``train.seeds`` (issue 39), for every algorithm family and member kind: member k of a run of
``train.seeds: [0, 1]`` is the one-seed run with ``seed: k`` up to float rounding, and a run of seeds is bitwise the
same run again.

Each case is a preset (``params.yaml``, ``offline.yaml`` or a file in ``configs/``) with ``--set`` overrides, trained
by ``rlcore train`` in this process on the smallest budget giving three updates: once with ``train.seeds: [0, 1]``
and once with ``seed: 1``. Seed 1's last checkpoint (weights, optimizer state, normalizer statistics, target
networks, counters, random-number states) equals the one-seed run's within :data:`RTOL` / :data:`ATOL`, and so does
its first evaluation (Discrete actions: equal, the greedy action does not move by a rounding; Box actions within
:data:`RTOL`, as the actions follow the weights' last bits). Where each seed steps its own network (and on shared
workers) the unbatched kernels run, and seed 1 is bitwise its one-seed run. A new preset joins by a line in
:data:`CASES` (:func:`test_every_preset_is_a_case` asks for it).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import PROJECT, assert_trees_match, preset_text, replay_arrays, sets
from test_presets_pipeline import skip_without_extra

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from tests.cli_support import assert_refused, run_in_process

RTOL, ATOL = 1e-4, 1e-6
"""Seed 1's float tensors against its one-seed run's after three updates: batched matrix products and masked sums
round in another order than the unbatched kernels, and the stacked MLPs' tanh is ``2 sigmoid(2x) - 1`` (within 1.8e-7
of ``torch.tanh``) (measured: at most 2.2e-5 on Hopper's reward-scaler return variance, a statistic of returns, and
1.4e-6 on its running return; at most 1.1e-6 on weights of scale ~1, BC's Gaussian head, 3.2e-7 on the other cases;
0 where each seed steps its own network); Adam's second moments sit below ``ATOL``."""
QUICK = [
    "name=contract",
    "train.eval_episodes=2",
    "train.target_return=null",
    "train.max_wall_seconds=null",
    "train.progress_bar=off",
    "eval.max_episode_steps=100",
]
"""Every case: one evaluation of two episodes of at most 100 steps, at the end of the budget."""


@dataclass(frozen=True)
class Case:
    """A member kind of an algorithm family: its params file, the env steps (offline: gradient steps; ES: env steps
    of three iterations) of three updates, its overrides, the words of the log line that says how its seeds train,
    whether its actions are Box, and the :data:`DATASETS` entry it reads (where offline.yaml reads its dataset)."""

    preset: str
    steps: int
    overrides: list[str] = field(default_factory=list)
    form: str = "each seed's own policy in turn"
    box: bool = False
    dataset: str | None = None


OFFLINE = ["algo.batch_size=64", "dataset.validation_fraction=0.2"]
"""BC: minibatches of 64, a fifth of the episodes held out (the validation metrics each checkpoint holds)."""
ON_POLICY = ["algo.n_steps=8"]
"""A rollout of 8 steps per env copy (16 copies: 128 env steps an update)."""
SMALL_EPOCHS = [*ON_POLICY, "algo.n_epochs=2"]
"""Presets of 10 or 20 epochs an update: 2 (each epoch costs one more pass, and proves nothing more)."""
OFF_POLICY = [
    "algo.learning_starts=64",
    "algo.batch_size=32",
    "algo.buffer_size=1000",
    "algo.gradient_steps_per_sample=0.25",
]
"""A warm-up of 64 env steps, then a gradient step of 32 transitions every 4 env steps (``algo.train_freq`` per case:
a phase of 1 or 2 gradient steps)."""
CASES: dict[str, Case] = {
    # On-policy (rlcore.trainers.on_policy): an update per rollout of algo.n_steps x env.num_envs env steps (x agents).
    "ppo-mlp": Case("params.yaml", 384, ON_POLICY, "stacked"),
    # Seed 1's first two updates stop on their KL after 4 and 3 of 5 epochs, seed 0 takes every epoch: a mask holds
    # the stopped member while the other steps.
    # RL Zoo's CartPole discount (params.yaml's until 2026-11-30): with it seed 1 stops early and seed 0 does not.
    "ppo-target-kl": Case(
        "params.yaml",
        384,
        [*ON_POLICY, "algo.target_kl=0.0002", "algo.gamma=0.98", "algo.gae_lambda=0.8", "train.log_every=128"],
        "stacked",
    ),
    "ppo-randomized-env": Case("configs/ppo-cartpole-randomized.yaml", 384, ON_POLICY, "stacked"),
    "ppo-reward-normalization": Case("configs/ppo-hopper.yaml", 192, ["algo.n_steps=64"], "stacked", box=True),
    "ppo-rnd": Case("configs/ppo-rnd-mountaincar.yaml", 384, ON_POLICY, "stacked"),
    "ppo-curiosity": Case("configs/ppo-curiosity-mountaincar.yaml", 384, ON_POLICY, "stacked"),
    "ppo-bc-regularizer": Case(
        "configs/ppo-from-bc-cartpole.yaml", 384, [*ON_POLICY, "train.init_from=null"], dataset="cartpole"
    ),
    "ppo-lstm": Case("configs/ppo-lstm-cartpole-po.yaml", 384, ["algo.n_steps=16", "algo.n_epochs=2"]),
    "ppo-masked": Case("configs/ppo-taxi-masked.yaml", 384, ON_POLICY),
    "ppo-cnn": Case("configs/ppo-minatar-breakout.yaml", 192, ["algo.n_steps=4"]),
    "ppo-agents-as-rows": Case("configs/ppo-simple-spread.yaml", 576, SMALL_EPOCHS, "stacked"),
    "ppo-groups": Case("configs/ppo-simple-adversary.yaml", 576, SMALL_EPOCHS),
    "ppo-opponent": Case("configs/ppo-tictactoe.yaml", 384, SMALL_EPOCHS),
    "ppo-opponent-board": Case("configs/ppo-connect-four.yaml", 384, SMALL_EPOCHS),
    "ppo-self-play": Case("configs/ppo-tictactoe-selfplay.yaml", 384, SMALL_EPOCHS),
    "ppo-self-play-board": Case("configs/ppo-connect-four-selfplay.yaml", 384, SMALL_EPOCHS),
    "a2c-mlp": Case("configs/a2c-cartpole.yaml", 384, [], "stacked"),  # RMSprop
    "a2c-adam": Case("configs/a2c-cartpole.yaml", 384, ["algo.optimizer=adam", "algo.lr_schedule=linear"], "stacked"),
    # Off-policy (rlcore.trainers.off_policy): gradient steps every algo.train_freq env steps past the warm-up.
    "dqn-mlp": Case("configs/dqn-cartpole.yaml", 96, [*OFF_POLICY, "algo.train_freq=8"], "stacked"),
    "dqn-dueling": Case(
        "configs/dqn-cartpole.yaml", 96, [*OFF_POLICY, "algo.train_freq=8", "algo.dueling=true"], "each its own"
    ),
    # Plain DQN: double DQN's argmax flips among Taxi's nearly tied actions on a rounding (3e-3 after 1,200 steps).
    "dqn-masked": Case(
        "configs/dqn-cartpole.yaml",
        96,
        [*OFF_POLICY, "algo.train_freq=8", "env.id=Taxi-v4", "env.action_mask=info", "algo.double_dqn=false"],
        "stacked",
    ),
    "dqn-cnn": Case("configs/dqn-minatar-breakout.yaml", 96, [*OFF_POLICY, "algo.train_freq=8"], "each its own"),
    # Gradients clipped: each member's norm its own.
    "sac-box": Case(
        "configs/sac-pendulum.yaml",
        80,
        [*OFF_POLICY, "algo.train_freq=4", "algo.max_grad_norm=1.0"],
        "stacked",
        box=True,
    ),
    "sac-mujoco": Case("configs/sac-halfcheetah.yaml", 80, [*OFF_POLICY, "algo.train_freq=4"], "stacked", box=True),
    "sac-discrete": Case(
        "configs/sac-discrete-cartpole.yaml",
        96,
        [*OFF_POLICY, "algo.train_freq=8", "algo.max_grad_norm=0.5"],
        "stacked",
    ),
    # Offline (rlcore.trainers.offline): a gradient step an update.
    "bc": Case("offline.yaml", 3, OFFLINE, "stacked", dataset="cartpole"),  # cross-entropy
    "bc-box": Case(  # Gaussian NLL, AdamW's decoupled weight decay on the stacked tensors
        "offline.yaml",
        3,
        [*OFFLINE, "env.id=Pendulum-v1", "algo.weight_decay=0.01"],
        "stacked",
        box=True,
        dataset="pendulum",
    ),
    "bc-masked": Case(  # the cross-entropy over the legal actions
        "offline.yaml", 3, [*OFFLINE, "env.id=Taxi-v4", "env.action_mask=info"], "stacked", dataset="taxi-masked"
    ),
    "td3bc": Case(
        "offline.yaml",
        3,
        ["algo={name: td3bc, batch_size: 64}", "env.id=Pendulum-v1"],
        "each its own",
        box=True,
        dataset="pendulum",
    ),
    "iql": Case("offline.yaml", 3, ["algo={name: iql, batch_size: 64}"], "each its own", dataset="cartpole"),
    # Shared workers (rlcore.trainers.actor_learner, rlcore.trainers.population) on the in-process runner (their
    # worker processes: tests/test_shared_workers.py).
    "impala": Case("configs/impala-cartpole.yaml", 384, ["algo.runner=dev"], "sharing the dev runner's actors"),
    "es": Case(
        "configs/es-cartpole.yaml",
        240,
        ["algo.runner=dev", "algo.population_size=4", "algo.pairs_per_task=2", "algo.max_rollout_steps=20"],
        "sharing the dev runner's rollout workers",
    ),
    "svpg": Case(
        "configs/svpg-cartpole.yaml",
        96,
        ["algo.num_particles=2", "algo.n_steps=4", "env.num_envs=4"],
        "sharing the dev runner's rollout workers",
    ),
}
"""Every algorithm family and member kind the contract covers, by name."""
DATASETS = {
    "cartpole": [],
    "pendulum": ["env.id=Pendulum-v1"],
    "taxi-masked": ["env.id=Taxi-v4", "env.action_mask=info"],
}
"""The offline cases' datasets: 1,000 transitions of a random policy, ``rlcore collect`` of offline.yaml with these
overrides."""
COVERED_BY = {
    "configs/ppo-cartpole.yaml": "ppo-mlp",  # params.yaml's run under another name
    "configs/ppo-cartpole-seeds.yaml": "ppo-mlp",  # the same, with five seeds
    "configs/ppo-atari-pong.yaml": "ppo-cnn",  # a CNN encoder, each seed its own policy (ALE: ~10 CPU s a case)
}
"""Presets that are no case of their own, and the case of their member kind."""


def project(root: Path, case: Case, datasets: dict[str, Path]) -> Path:
    """``root`` (made) with the case's params file, and its dataset where offline.yaml reads it."""
    (root / case.preset).parent.mkdir(parents=True, exist_ok=True)
    (root / case.preset).write_text(preset_text(case.preset))
    if case.dataset is not None:
        (root / "data").mkdir()
        shutil.copy(datasets[case.dataset], root / "data" / "dataset.parquet")
    return root


def train(root: Path, case: Case, *overrides: str) -> str:
    """``rlcore train`` of ``case`` in ``root``; its log (stderr)."""
    budget = [f"train.{key}={case.steps}" for key in ("max_steps", "eval_every", "log_every")]
    args = ["train", "--params", case.preset, *sets([*QUICK, *budget, *case.overrides, *overrides])]
    outcome = run_in_process(args, root, limit=120)
    assert outcome.returncode == 0, outcome
    return outcome.stderr


def last_checkpoint(run_dir: Path) -> Any:
    found = list_checkpoints(run_dir / "checkpoints")
    assert found, f"{run_dir}: no checkpoint"
    return load_checkpoint(found[-1][1])


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every dataset of :data:`DATASETS`, by name."""
    found: dict[str, Path] = {}
    for name, env in DATASETS.items():
        root = tmp_path_factory.mktemp(f"dataset-{name}")
        (root / "offline.yaml").write_text(preset_text("offline.yaml"))
        overrides = ["collect.policy=random", "collect.steps=1000", "collect.num_envs=4", *env]
        outcome = run_in_process(["collect", "--params", "offline.yaml", *sets(overrides)], root, limit=120)
        assert outcome.returncode == 0, outcome
        found[name] = root / "data" / "dataset.parquet"
    return found


@pytest.fixture(scope="module", params=list(CASES))
def trained(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, datasets: dict[str, Path]
) -> tuple[str, Path, str]:
    """(the case, a folder with ``batched/`` trained with ``train.seeds: [0, 1]`` and ``alone/`` with ``seed: 1``,
    the batched run's log)."""
    name: str = request.param
    case, root = CASES[name], tmp_path_factory.mktemp(name)
    skip_without_extra(case.preset)
    log = train(project(root / "batched", case, datasets), case, "train.seeds=[0, 1]")
    train(project(root / "alone", case, datasets), case, "seed=1")
    return name, root, log


def untimed(evaluations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in entry.items() if key != "wall_seconds"} for entry in evaluations]


def test_member_k_of_a_batched_run_is_the_one_seed_run_with_seed_k(trained: tuple[str, Path, str]) -> None:
    """Seed 1 of the batched run (trained as one program, in the form the case names) after three updates: the
    one-seed run's counters and random-number states, its weights, optimizer state, validation metrics and replay
    buffer within RTOL / ATOL (bitwise where each seed steps its own network or the workers are shared), its first
    evaluation; and seed 0's weights are another seed's (a seed not applied
    would make the rest prove nothing)."""
    name, root, log = trained
    case = CASES[name]
    assert "train.seeds:" in log and case.form in log and "one after another" not in log, log
    ours = [last_checkpoint(root / "batched" / "runs" / "contract" / f"seed_{seed}") for seed in (0, 1)]
    alone = last_checkpoint(root / "alone" / "runs" / "contract")
    assert ours[1].meta["updates"] >= 3, "fewer than three updates: raise the case's steps"
    for key in ("env_steps", "gradient_steps", "updates", "numpy_rng", "skipped_steps"):
        assert ours[1].meta.get(key) == alone.meta.get(key), key
    exact = case.form != "stacked"  # each seed's own network: the one-seed run's kernels, bitwise
    assert_trees_match(ours[1].tensors, alone.tensors, name, rtol=None if exact else RTOL, atol=ATOL)
    assert ours[1].meta.get("validation") == pytest.approx(alone.meta.get("validation"), rel=RTOL, abs=ATOL)
    mine, theirs = (
        replay_arrays(root / "batched" / "runs" / "contract" / "seed_1"),
        replay_arrays(root / "alone" / "runs" / "contract"),
    )
    assert mine.keys() == theirs.keys()
    for file, arrays in mine.items():
        for key, values in arrays.items():
            np.testing.assert_allclose(values, theirs[file][key], rtol=RTOL, atol=ATOL, err_msg=f"replay {key}")
    first = [untimed(checkpoint.meta["evaluations"])[0] for checkpoint in (ours[1], alone)]
    assert first[0] == (pytest.approx(first[1], rel=RTOL) if case.box and not exact else first[1])
    weights = [key for key, tensor in ours[1].tensors["policy"].items() if tensor.is_floating_point()]
    assert not all(torch.equal(ours[0].tensors["policy"][key], ours[1].tensors["policy"][key]) for key in weights)


@pytest.mark.parametrize("trained", ["ppo-mlp", "ppo-lstm", "sac-box", "iql"], indirect=True)
def test_a_batched_run_is_bitwise_the_same_run_again(
    trained: tuple[str, Path, str], tmp_path: Path, datasets: dict[str, Path]
) -> None:
    """The same params trained again with ``train.seeds: [0, 1]``: every seed's checkpoint and evaluations are
    bitwise the first run's (stacked and each-its-own forms, on-policy, off-policy and offline)."""
    name, root, _ = trained
    train(project(tmp_path, CASES[name], datasets), CASES[name], "train.seeds=[0, 1]")
    for seed in (0, 1):
        again = last_checkpoint(tmp_path / "runs" / "contract" / f"seed_{seed}")
        first = last_checkpoint(root / "batched" / "runs" / "contract" / f"seed_{seed}")
        assert_trees_match(again.tensors, first.tensors, f"{name} seed {seed}")
        assert untimed(again.meta["evaluations"]) == untimed(first.meta["evaluations"])
        assert again.meta["numpy_rng"] == first.meta["numpy_rng"]


def epochs_per_update(run_dir: Path) -> list[float]:
    rows = (run_dir / "dvclive" / "plots" / "metrics" / "train" / "epochs.tsv").read_text().splitlines()[1:]
    return [float(row.split("\t")[1]) for row in rows]


@pytest.mark.parametrize("trained", ["ppo-target-kl"], indirect=True)
def test_a_seed_stopped_by_its_target_kl_sits_out_while_the_other_goes_on(trained: tuple[str, Path, str]) -> None:
    """With ``algo.target_kl`` seed 1 stops its first two updates early and seed 0 does not (the contract test proves
    each seed's weights: the stopped one's held by the mask while the other stepped)."""
    _, root, _ = trained
    epochs = [epochs_per_update(root / "batched" / "runs" / "contract" / f"seed_{seed}") for seed in (0, 1)]
    assert epochs == [[5.0, 5.0, 5.0], [4.0, 3.0, 5.0]]


def test_every_preset_is_a_case() -> None:
    """A preset joins the contract by a line in CASES, or names the case of its member kind in COVERED_BY."""
    presets = {
        "params.yaml",
        "offline.yaml",
        *(f"configs/{path.name}" for path in (PROJECT / "configs").glob("*.yaml")),
    }
    cased = {case.preset for case in CASES.values()}
    assert presets - cased == set(COVERED_BY)
    assert set(COVERED_BY.values()) <= set(CASES)


@pytest.mark.slow
@pytest.mark.parametrize("trained", ["ppo-mlp", "dqn-mlp"], indirect=True)
def test_seeds_split_over_processes_are_the_seeds_trained_in_one(
    trained: tuple[str, Path, str], tmp_path: Path, datasets: dict[str, Path]
) -> None:
    """``train.seeds: [0, 1, 2]`` with ``train.seed_processes: 2`` (seeds 0 and 1 stacked in one child process, seed 2
    in the other): every seed's last checkpoint and first evaluation are the same seed's trained in one process
    (``train.seed_processes: 1``) within RTOL / ATOL, and seed 1's are its one-seed run's."""
    name, root, _ = trained
    case = CASES[name]
    logs = {}
    for count in (1, 2):
        folder = project(tmp_path / f"p{count}", case, datasets)
        logs[count] = train(folder, case, "train.seeds=[0, 1, 2]", f"train.seed_processes={count}")
    assert "train.seeds: 3 seeds in 2 processes (seeds 0-1 batched; seed 2)" in logs[2], logs[2]
    assert "seeds 0-1: train.seeds: " in logs[2], logs[2]  # a child's line, relayed
    assert "processes" not in logs[1], logs[1]
    for seed in (0, 1, 2):
        split, one = (
            last_checkpoint(tmp_path / f"p{count}" / "runs" / "contract" / f"seed_{seed}") for count in (2, 1)
        )
        assert split.meta["env_steps"] == one.meta["env_steps"] and split.meta["numpy_rng"] == one.meta["numpy_rng"]
        assert_trees_match(split.tensors, one.tensors, f"{name} seed {seed}", rtol=RTOL, atol=ATOL)
        assert untimed(split.meta["evaluations"])[0] == untimed(one.meta["evaluations"])[0]
        if seed == 1:
            alone = last_checkpoint(root / "alone" / "runs" / "contract")
            assert_trees_match(split.tensors, alone.tensors, f"{name} seed 1 alone", rtol=RTOL, atol=ATOL)


def kill_when_checkpointed(checkpoints: Path, process_name: str) -> threading.Thread:
    """A thread that SIGKILLs this process's child named ``process_name`` once ``checkpoints`` holds a checkpoint
    (gives up after 60 s)."""

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if list(checkpoints.glob("step_*.pt")):
                for child in multiprocessing.active_children():
                    if child.name == process_name and child.pid is not None:
                        os.kill(child.pid, signal.SIGKILL)
                        return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_a_killed_seed_process_stops_the_run_naming_its_seeds_and_a_rerun_resumes(tmp_path: Path) -> None:
    """``train.seeds: [0, 1]`` in two processes; the process of seed 1 is SIGKILLed after its first checkpoint: the
    command fails in one error line naming seed 1's process, the other process is stopped, and a re-run (in one
    process) resumes seed 1 from its checkpoint and trains both seeds to the budget."""
    case = CASES["ppo-mlp"]
    (tmp_path / case.preset).write_text(preset_text(case.preset))
    budget = ["train.max_steps=1024", "train.eval_every=128", "train.log_every=128"]
    args = ["train", "--params", case.preset, *sets([*QUICK, *case.overrides, *budget, "train.seeds=[0, 1]"])]
    killer = kill_when_checkpointed(tmp_path / "runs" / "contract" / "seed_1" / "checkpoints", "rlcore-seeds-1")
    outcome = run_in_process([*args, *sets(["train.seed_processes=2"])], tmp_path, limit=120)
    killer.join(timeout=1)
    assert outcome.returncode == 2, outcome
    last = outcome.stderr.strip().splitlines()[-1]
    assert last.startswith("error: train.seeds: the process training seed 1 (pid "), outcome
    assert "died (exit code -9)" in last and "re-run the same command" in last, last
    assert not [child for child in multiprocessing.active_children() if child.name.startswith("rlcore-seeds")]
    # A seed's checkpoints do not depend on the split: the re-run resumes both in this process (no process to start).
    again = run_in_process([*args, *sets(["train.seed_processes=1"])], tmp_path, limit=120)
    assert again.returncode == 0, again
    assert f"resuming {tmp_path / 'runs' / 'contract' / 'seed_1'}" in again.stderr, again
    for seed in (0, 1):
        assert last_checkpoint(tmp_path / "runs" / "contract" / f"seed_{seed}").meta["env_steps"] >= 1024


def test_seeds_and_processes_more_than_the_memory_holds_are_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four seeds fit in memory in one process but not with the fixed cost of two more: ``train.seed_processes: 2``
    is refused in one line naming the processes and the way out, and nothing is written."""
    import gymnasium as gym

    from rlcore.params import load_params
    from rlcore.trainers import memory_estimate

    case = CASES["ppo-mlp"]
    params = load_params(PROJECT / case.preset, case.overrides)
    env = gym.make(params.env.id)
    one = sum(size for size, _ in memory_estimate.estimate(params, env.observation_space, env.action_space).values())
    monkeypatch.setattr(memory_estimate, "available_memory", lambda: 4 * one + memory_estimate.PROCESS_BYTES)
    (tmp_path / case.preset).write_text(preset_text(case.preset))
    args = ["train", "--params", case.preset, *sets([*QUICK, *case.overrides, "train.seeds=[0, 1, 2, 3]"])]
    line = assert_refused(run_in_process([*args, *sets(["train.seed_processes=2"])], tmp_path), "in 2 processes")
    assert line.startswith("error: train.seeds: 4 seeds trained together in 2 processes need about"), line
    assert "train.seed_processes: 1" in line, line
    assert sorted(path.name for path in tmp_path.iterdir()) == [case.preset]


def test_seed_processes_split_the_seeds_still_to_train_into_contiguous_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On 2 usable cores ``auto`` puts 8 seeds in two processes of 4 and keeps 3 seeds (one process would hold a
    single seed) in one program, unless each seed's run is long (100,000 env steps and no target return: 2 seeds in
    two processes, 3 in three, 8 in two of 4); a seed whose folder holds a summary does not count, and joins a group
    in turn; a sweep's evaluation callback keeps one process."""
    from rlcore.params import load_params
    from rlcore.stages.seeds import seed_params
    from rlcore.trainers import SeedRun, seed_processes

    monkeypatch.setattr(seed_processes, "usable_cores", lambda: 2)

    def groups(
        seeds: list[int],
        setting: str = "auto",
        finished: tuple[int, ...] = (),
        steps: int = 20_000,
        target: float | None = None,
    ) -> list[list[int]]:
        overrides = [f"train.seeds={seeds}", f"train.seed_processes={setting}", f"train.max_steps={steps}"]
        overrides += [f"train.target_return={'null' if target is None else target}"]
        params = load_params(PROJECT / "params.yaml", overrides)
        runs = [SeedRun(seed, seed_params(params, seed), tmp_path / setting / f"seed_{seed}") for seed in seeds]
        for run in runs:
            run.run_dir.mkdir(parents=True, exist_ok=True)
            if run.seed in finished:
                (run.run_dir / "train_summary.json").write_text("{}")
        return [[run.seed for run in group] for group in seed_processes.seed_groups(runs, None)]

    assert groups(list(range(8))) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert groups([0, 1, 2]) == [[0, 1, 2]]
    assert groups([0, 1, 2], steps=seed_processes.LONG_RUN_STEPS) == [[0], [1], [2]]
    assert groups([0, 1, 2, 3], steps=seed_processes.LONG_RUN_STEPS) == [[0, 1], [2, 3]]
    assert groups([3, 4], steps=seed_processes.LONG_RUN_STEPS) == [[3], [4]]
    assert groups(list(range(8)), steps=seed_processes.LONG_RUN_STEPS) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert groups([0, 1, 2], steps=seed_processes.LONG_RUN_STEPS, target=500.0) == [[0, 1, 2]]  # may stop soon
    assert groups([0, 1, 2, 3, 4], "2", finished=(0, 1)) == [[0, 2, 3], [1, 4]]
    assert groups([5, 6, 7], "4") == [[5], [6], [7]]
    assert groups([0, 1, 2, 3], "1") == [[0, 1, 2, 3]]
    params = load_params(PROJECT / "params.yaml", ["train.seeds=[0, 1, 2, 3]"])
    runs = [SeedRun(seed, seed_params(params, seed), tmp_path / f"seed_{seed}") for seed in range(4)]
    assert len(seed_processes.seed_groups(runs, lambda step, result: False)) == 1
