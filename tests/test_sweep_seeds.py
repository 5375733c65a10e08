"""Sweep trials whose ``sweep.seeds`` train as one batched program (``train.batch_seeds``, the default, for a family
with a batched trainer): the per-seed scores are the one-after-another trial's, the trials table keeps a column per
seed, the pruner sees the seeds' aggregate at every evaluation round and a pruned trial stops the batched run, and a
killed batched trial is failed and retried from scratch in a fresh folder (it does not resume the killed one's seeds).

Budget: PPO on CartPole-v1 (the default params), 2,048 env steps per seed, an evaluation (3 episodes) every 1,024,
3 validation and 5 test episodes."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest
from cli_support import run_in_process
from conftest import RLCORE, sets
from optuna.distributions import CategoricalDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from test_sweep import copy_project, load_study, trials_in

from flows.sweep import plan_sweep, run_sweep
from rlcore.common.files import read_json
from rlcore.trainers import on_policy

SEEDS = [
    "train.max_steps=2048",
    "train.eval_every=1024",
    "train.target_return=null",
    "eval.episodes=3",
    "eval.test_episodes=5",
    "train.eval_episodes=3",
    "sweep.space={algo.lr: {type: float, low: 1.0e-4, high: 3.0e-3, log: true}}",
    "sweep.seeds=[0, 1]",
    "sweep.sampler=random",
    "sweep.pruner=none",
]
BATCHED_LINE = "sweep.seeds: a trial trains its 2 seeds together (train.batch_seeds): as one batched program"


@pytest.mark.slow
def test_batched_trials_score_each_seed_as_the_trials_one_after_another_do(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two trials x two seeds (1,024 env steps each), batched and with ``train.batch_seeds: false``: the same sampled
    values, and each seed's
    validation and test scores equal (measured: equal; the batched seeds' weights equal the unbatched runs' up to
    float32 rounding, ``tests/test_seeds_contract.py``, so the scores, greedy returns of 3 episodes, are compared
    with rtol 1e-6 / atol 1e-6 rather than bitwise)."""
    loops: list[int] = []
    run = on_policy.OnPolicyLoop.run
    monkeypatch.setattr(on_policy.OnPolicyLoop, "run", lambda self: loops.append(len(self.runs)) or run(self))
    tables: dict[str, pd.DataFrame] = {}
    for mode, extra in (("batched", []), ("single", ["train.batch_seeds=false"])):
        (tmp_path / mode).mkdir()
        root = copy_project(tmp_path / mode)
        with caplog.at_level(logging.INFO, logger="rlcore"):
            short = [*SEEDS, "train.max_steps=1024", "train.eval_every=512", "sweep.n_trials=2", *extra]
            run_sweep(plan_sweep("params.yaml", short, root))
        tables[mode] = pd.read_csv(root / "reports" / "sweep" / "trials.csv")
    assert BATCHED_LINE in caplog.text
    assert "a trial trains its seeds one after another, not batched: train.batch_seeds is false" in caplog.text
    # The batched trials: one loop over both seeds' runs each; one after another: one loop per seed.
    assert loops == [2, 2, 1, 1, 1, 1], "the batched trials did not train their seeds in one loop"
    batched, single = tables["batched"], tables["single"]
    columns = ["score seed_0", "score seed_1", "test_score seed_0", "test_score seed_1"]
    assert set(columns) <= set(batched.columns)
    assert list(batched["state"]) == list(single["state"]) == ["COMPLETE", "COMPLETE"]
    assert list(batched["algo.lr"]) == list(single["algo.lr"])
    for column in [*columns, "value", "test_value"]:
        assert batched[column].to_numpy() == pytest.approx(single[column].to_numpy(), rel=1e-6, abs=1e-6), column
    assert batched["value"].to_numpy() == pytest.approx(batched[["score seed_0", "score seed_1"]].mean(axis=1))


def seeded_study(root: Path, overrides: list[str]) -> Any:
    """The sweep's plan, its study holding one strong finished trial (1000 at every step: every later trial is below
    the median)."""
    plan = plan_sweep("params.yaml", overrides, root)
    Path(plan.storage).parent.mkdir()
    storage = JournalStorage(JournalFileBackend(plan.storage))
    study = optuna.create_study(study_name=plan.study_name, storage=storage, direction="maximize")
    study.add_trial(
        optuna.trial.create_trial(
            params={"algo.lr": 1.0e-5},
            distributions={"algo.lr": CategoricalDistribution([1.0e-5])},
            value=1000.0,
            intermediate_values={step: 1000.0 for step in range(1, 13)},
        )
    )
    return plan


def test_a_batched_trial_reports_the_seeds_aggregate_per_round_and_a_pruned_one_stops_every_seed(
    project: Path,
) -> None:
    """The median pruner from the first round on: the trial reports the mean of its two seeds' first evaluations
    (at step 1) and is pruned there; the seed whose evaluation completed the round stops at once (1,024 steps), the
    other at its next evaluation (2,048), both long before their 4,096-step budget; no seed is evaluated or
    selected, and the trial is recorded PRUNED with the env steps it trained."""
    overrides = [
        *SEEDS,
        "train.max_steps=4096",  # slot: ceil(4096 / 1024) + 2 = 6 steps per group
        "sweep.space={algo.lr: {type: categorical, choices: [1.0e-5]}}",
        "sweep.n_trials=2",
        "sweep.pruner=median",
        "sweep.pruner_options={n_startup_trials: 1, n_warmup_steps: 0}",
    ]
    run_sweep(seeded_study(project, overrides))
    trial = load_study(project).trials[1]
    assert trial.state == TrialState.PRUNED
    folder = project / trial.user_attrs["folder"]
    summaries = [read_json(folder / f"seed_{seed}" / "runs" / "ppo-cartpole" / "train_summary.json") for seed in (0, 1)]
    first = [summary["evaluations"][0] for summary in summaries]
    assert [evaluation["env_steps"] for evaluation in first] == [1024, 1024]
    assert trial.intermediate_values == {1: pytest.approx(sum(e["mean_return"] for e in first) / 2, rel=1e-12)}
    assert sorted(summary["env_steps"] for summary in summaries) == [1024, 2048]
    assert {summary["stop_reason"] for summary in summaries} == {"stopped by the evaluation callback"}
    assert trial.user_attrs["env_steps"] == 3072 and trial.user_attrs["counterfactual_env_steps"] == 8192
    assert trial.user_attrs["scores"] == []
    assert not list(folder.glob("seed_*/reports/metrics.json"))
    record = read_json(folder / "trial.json")
    assert record["state"] == "pruned"
    assert sorted(run["env_steps"] for run in record["runs"]) == [1024, 2048]


@pytest.mark.slow
def test_a_killed_batched_trial_is_retried_from_scratch_in_a_fresh_folder(project: Path) -> None:
    """SIGKILL once the batched trial has checkpointed its seeds: the re-run fails the killed trial and trains its
    retry (same params) from step 0 in the retry's own folder; the killed trial's folder is left as it was."""
    overrides = [*SEEDS, "train.max_steps=8192", "train.eval_every=4096", "sweep.n_trials=1"]
    sweep = subprocess.Popen(
        [RLCORE, "sweep", "--no-flow", *sets(overrides)],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "PATH": f"{Path(RLCORE).parent}{os.pathsep}{os.environ['PATH']}"},
    )
    deadline = time.monotonic() + 240
    while not all(
        list(project.glob(f"runs/sweeps/*/trial_0000/seed_{seed}/runs/ppo-cartpole/checkpoints/step_*.pt"))
        for seed in (0, 1)
    ):
        assert sweep.poll() is None, sweep.communicate()[0]
        assert time.monotonic() < deadline, "the batched trial wrote no checkpoint of both seeds in time"
        time.sleep(0.2)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait()
    (killed,) = trials_in(project, TrialState.RUNNING)
    killed_folder = project / killed.user_attrs["folder"]
    left = {path: path.stat().st_mtime_ns for path in killed_folder.rglob("*") if path.is_file()}

    result = run_in_process(["sweep", "--no-flow", *sets(overrides)], project, limit=300)
    assert result.returncode == 0, result

    assert "left running by a stopped process" in result.stderr and BATCHED_LINE in result.stderr
    after = load_study(project).trials
    assert after[killed.number].state == TrialState.FAIL
    (retry,) = [t for t in after if t.system_attrs.get("failed_trial") == killed.number]
    assert retry.state == TrialState.COMPLETE and retry.params == killed.params
    retry_folder = project / retry.user_attrs["folder"]
    assert retry_folder != killed_folder
    for seed in (0, 1):
        summary = read_json(retry_folder / f"seed_{seed}" / "runs" / "ppo-cartpole" / "train_summary.json")
        assert summary["env_steps"] == 8192 and summary["evaluations"][0]["env_steps"] == 4096
    assert {path: path.stat().st_mtime_ns for path in left} == left
    assert not list(killed_folder.glob("seed_*/runs/ppo-cartpole/train_summary.json"))
