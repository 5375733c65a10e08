"""Sweeps: Optuna studies over params keys with pruning, parallel processes, crash recovery and reports.

Budget of every trial here: PPO on CartPole-v1 with the default params, a constant learning rate,
at most 30,000 env steps (about 1-3 s on 2 cores), an evaluation (10 episodes) every 2,048 steps,
stopping at a mean return of 500.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from cli_support import run_in_process
from conftest import PROJECT, RLCORE, outputs, sets
from optuna.distributions import CategoricalDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from flows.sweep import InProcessExecutor, TrialJob, TrialResult, plan_sweep, run_sweep
from flows.sweep.apply import set_values
from flows.sweep.storage import asks_are_locked, study_lock
from flows.sweep.study import SweepStudy

# `serial` (run alone, after the others): the tests whose sweep processes run side by side, for their timing. The
# other sweeps here run their trials in this process (sweep.workers 1), seeded: the same trials on a busy machine.

BUDGET = [
    "train.max_steps=30000",
    "train.eval_every=2048",
    "train.target_return=500",
    "algo.lr_schedule=constant",
]
SPACE = (
    "sweep.space={algo: {lr: {type: float, low: 1.0e-5, high: 3.0e-3, log: true},"
    " clip_range: {type: float, low: 0.05, high: 0.4}, ent_coef: {type: float, low: 0.0, high: 0.05}}}"
)
PRUNING_SWEEP = [
    *BUDGET,
    SPACE,
    "sweep.n_trials=7",
    "sweep.pruner=median",
    "sweep.pruner_options={n_startup_trials: 3}",
    "sweep.sampler_options={n_startup_trials: 5}",
]
# Short trials (~1 s) for the tests about processes rather than learning.
SHORT = ["train.max_steps=8192", "train.eval_every=2048", "train.target_return=null", "eval.episodes=3", SPACE]
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def copy_project(root: Path) -> Path:
    for name in ("params.yaml", "dvc.yaml", ".dvcignore", "prefect.toml"):
        shutil.copy(PROJECT / name, root / name)
    return root


def load_study(root: Path) -> optuna.Study:
    """The project's one study, read from its journal file."""
    storage = JournalStorage(JournalFileBackend(str(root / ".optuna" / "journal.log")))
    (name,) = optuna.get_all_study_names(storage)
    return optuna.load_study(study_name=name, storage=storage)


def trials_in(root: Path, *states: TrialState) -> list[optuna.trial.FrozenTrial]:
    journal = root / ".optuna" / "journal.log"
    if not journal.is_file() or not journal.stat().st_size:
        return []
    return load_study(root).get_trials(deepcopy=False, states=states or None)


@pytest.fixture(scope="module")
def pruning_study(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The 7-trial PPO sweep with the median pruner, run once, in a git repository (for the revision). Seeded, in
    this process: its trials are the first 7 of the 12 it ran until 2026-11-29 (trial 4 reaches 500 at 20,480 env
    steps, trial 5 494.6; trial 6 is pruned at 4,096); the other 5 added nothing asserted (117 -> 85 CPU s for this
    module's four sweep tests). With 4 trials no trial reaches 475 (best 121.8) and none is pruned."""
    root = copy_project(tmp_path_factory.mktemp("sweep"))
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "project"]):
        subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)
    started = time.perf_counter()
    summary = run_sweep(plan_sweep("params.yaml", PRUNING_SWEEP, root))
    return {"root": root, "summary": summary, "seconds": time.perf_counter() - started}


@pytest.mark.slow
def test_a_seven_trial_ppo_sweep_prunes_weak_trials_and_finds_a_475_policy(pruning_study: dict[str, Any]) -> None:
    study = load_study(pruning_study["root"])
    states = [t.state for t in study.trials]
    assert len(states) == 7 and set(states) <= set(FINISHED), states
    assert states.count(TrialState.PRUNED) >= 1, states
    assert study.best_value >= 475, study.best_value
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert any(t.user_attrs["env_steps"] < 30000 for t in pruned), "no pruned trial stopped training early"
    assert pruning_study["summary"]["savings"]["saved_share"] > 0


@pytest.mark.slow
def test_every_trial_records_its_command_params_git_revision_and_own_folder(pruning_study: dict[str, Any]) -> None:
    root: Path = pruning_study["root"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    study = load_study(root)
    assert study.user_attrs["git_revision"] == head
    for trial in study.trials:
        attrs = trial.user_attrs
        assert attrs["git_revision"] == head
        assert attrs["command"].startswith("rlcore pipeline --params params.yaml --set train.max_steps=30000")
        assert f"--set algo.lr={yaml.safe_dump(trial.params['algo.lr']).splitlines()[0]}" in attrs["command"]
        assert attrs["params"]["algo"]["lr"] == trial.params["algo.lr"]
        assert attrs["params"]["train"]["max_steps"] == 30000
        folder = root / attrs["folder"]
        assert folder.name == f"trial_{trial.number:04d}"
        assert (folder / "trial.json").is_file()
        assert sorted((folder / "seed_0" / "runs" / "ppo-cartpole" / "checkpoints").glob("*.pt"))
        if trial.state == TrialState.COMPLETE:
            # The value is the validation score selection used; the test score is recorded beside it.
            metrics = yaml.safe_load((outputs(folder / "seed_0").metrics).read_text())
            assert metrics["validation"]["value"] == metrics["validation"]["mean_return"] == trial.value
            assert metrics["mean_return"] == attrs["test_value"] == attrs["test_scores"][0]
            assert (outputs(folder / "seed_0").best_policy).is_file()


@pytest.mark.slow
def test_reports_hold_best_params_a_trial_table_plots_and_a_summary(pruning_study: dict[str, Any]) -> None:
    root: Path = pruning_study["root"]
    reports = root / "reports" / "sweep"
    study = load_study(root)
    best = yaml.safe_load((reports / "best_params.yaml").read_text())
    assert best == {"algo": {key.split(".")[1]: value for key, value in study.best_params.items()}}
    table = pq.read_table(reports / "trials.parquet").to_pylist()
    assert [row["number"] for row in table] == list(range(7))
    assert {"state", "value", "duration_seconds", "algo.lr", "algo.clip_range", "algo.ent_coef"} <= table[0].keys()
    assert {row["state"] for row in table} == {"COMPLETE", "PRUNED"}
    csv_lines = (reports / "trials.csv").read_text().splitlines()
    assert len(csv_lines) == 8 and csv_lines[0].startswith("number,state,value,duration_seconds")
    for name in ("history.png", "importances.png", "parallel_coordinates.png"):
        assert (reports / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    summary = (reports / "summary.md").read_text()
    assert f"## Best: trial {study.best_trial.number}" in summary
    best_test = study.best_trial.user_attrs["test_value"]
    assert f"{study.best_value:.6g} (validation), test {best_test:.6g}" in summary
    assert all((row["test_value"] is not None) == (row["state"] == "COMPLETE") for row in table)
    assert "pruned" in summary and "![history.png](history.png)" in summary


@pytest.mark.slow
def test_sweep_apply_merges_the_best_params_into_params_yaml_keeping_its_comments(
    pruning_study: dict[str, Any],
) -> None:
    root: Path = pruning_study["root"]
    before = (root / "params.yaml").read_text()
    result = run_in_process(["sweep", "--apply"], root)
    assert result.returncode == 0, result
    after = (root / "params.yaml").read_text()
    best = load_study(root).best_params
    params = yaml.safe_load(after)
    assert {key: params["algo"][key.split(".")[1]] for key in best} == best
    assert [line for line in after.splitlines() if "#" in line] == [line for line in before.splitlines() if "#" in line]
    changed = [a for a, b in zip(after.splitlines(), before.splitlines(), strict=True) if a != b]
    assert len(changed) == len(best), changed
    assert "applied the sweep's best params" in result.stdout


def test_set_values_edits_only_the_value_and_keeps_the_comment() -> None:
    text = "algo:\n  lr: 0.001      # Adam\n  gamma: 0.98\ntrain:\n  lr: 5\n"
    edited, missing = set_values(text, {"algo.lr": 1.5e-05, "algo.n_steps": 64})
    assert edited == "algo:\n  lr: 1.5e-05      # Adam\n  gamma: 0.98\ntrain:\n  lr: 5\n"
    assert missing == ["algo.n_steps"]


@pytest.mark.slow
def test_a_weak_trial_is_pruned_after_its_first_seed(project: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two seeds per trial one after another (``train.batch_seeds: false``; batched trials:
    ``tests/test_sweep_seeds.py``), pruning only from the first seed's score on (n_warmup_steps = slot - 1)."""
    overrides = [
        "train.batch_seeds=false",
        "train.max_steps=4096",  # slot: ceil(4096 / 2048) + 2 = 4 steps per run
        "train.eval_every=2048",
        "train.target_return=null",
        "eval.episodes=3",
        "sweep.space={algo.lr: {type: categorical, choices: [1.0e-5]}}",
        "sweep.seeds=[0, 1]",
        "sweep.n_trials=2",
        "sweep.pruner_options={n_startup_trials: 1, n_warmup_steps: 3}",
    ]
    plan = plan_sweep("params.yaml", overrides, project)
    Path(plan.storage).parent.mkdir()
    storage = JournalStorage(JournalFileBackend(plan.storage))
    study = optuna.create_study(study_name=plan.study_name, storage=storage, direction="maximize")
    study.add_trial(
        optuna.trial.create_trial(
            params={"algo.lr": 1.0e-5},
            distributions={"algo.lr": CategoricalDistribution([1.0e-5])},
            value=1000.0,  # above CartPole's maximum: every later trial is below the median
            intermediate_values={step: 1000.0 for step in range(1, 9)},
        )
    )
    with caplog.at_level(logging.INFO, logger="rlcore"):
        run_sweep(plan)
    assert "a trial trains its seeds one after another, not batched: train.batch_seeds is false" in caplog.text
    trial = load_study(project).trials[1]
    assert trial.state == TrialState.PRUNED
    assert max(trial.intermediate_values) == 4  # the first seed's score, at the seed boundary
    folder = project / trial.user_attrs["folder"]
    assert (outputs(folder / "seed_0").metrics).is_file()
    assert not (folder / "seed_1").exists()


def _spawn(root: Path, overrides: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [RLCORE, "sweep", "--no-flow", *sets(overrides)],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "PATH": f"{Path(RLCORE).parent}{os.pathsep}{os.environ['PATH']}"},
    )


@pytest.mark.serial
@pytest.mark.slow
def test_two_sweep_processes_on_one_study_run_trials_concurrently_without_losing_or_duplicating(
    project: Path,
) -> None:
    overrides = [*SHORT, "sweep.n_trials=6"]
    first, second = _spawn(project, overrides), _spawn(project, overrides)
    outputs = [process.communicate(timeout=300)[0] for process in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outputs
    trials = load_study(project).trials
    assert sorted(t.number for t in trials) == list(range(6))
    assert all(t.state == TrialState.COMPLETE for t in trials), [t.state for t in trials]
    assert len({t.user_attrs["folder"] for t in trials}) == 6
    owners: dict[int, list[optuna.trial.FrozenTrial]] = {}
    for trial in trials:
        owners.setdefault(trial.system_attrs["rlcore:owner"]["pid"], []).append(trial)
    assert set(owners) == {first.pid, second.pid}
    a, b = owners.values()
    assert any(
        x.datetime_start < y.datetime_complete and y.datetime_start < x.datetime_complete for x in a for y in b
    ), "no two trials of the two processes ran at the same time"


@pytest.mark.serial
@pytest.mark.slow
def test_sigkill_mid_sweep_then_rerun_completes_the_study_and_keeps_finished_trials(project: Path) -> None:
    overrides = [*SHORT, "sweep.n_trials=4", "sweep.workers=2"]  # killed with 2 finished and 1 or 2 running
    sweep = _spawn(project, overrides)
    deadline = time.monotonic() + 240
    while len(trials_in(project, TrialState.COMPLETE)) < 2 or not trials_in(project, TrialState.RUNNING):
        assert sweep.poll() is None, sweep.communicate()[0]
        assert time.monotonic() < deadline, "the sweep did not finish 2 trials in time"
        time.sleep(0.2)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait()
    before = {t.number: (t.state, t.value) for t in trials_in(project)}
    running = [n for n, (state, _) in before.items() if state == TrialState.RUNNING]
    assert running, before

    result = run_in_process(["sweep", "--no-flow", *sets(overrides)], project, limit=300)
    assert result.returncode == 0, result

    after = load_study(project).trials
    assert_recovered(before, after, finished=4)
    for number in running:
        assert "process stopped" in after[number].user_attrs["error"]
    assert "left running by a stopped process" in result.stderr


def assert_recovered(before: dict[int, tuple[TrialState, float | None]], after: list, finished: int) -> None:
    """After a kill and a re-run: ``finished`` trials, the earlier finished ones unchanged, nothing left
    running, and each killed trial FAIL with exactly one finished retry of the same params."""
    assert sum(t.state in FINISHED for t in after) == finished, [(t.number, t.state) for t in after]
    for number, (state, value) in before.items():
        if state in FINISHED:
            assert (after[number].state, after[number].value) == (state, value)
    assert not [t for t in after if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    for number, (state, _) in before.items():
        if state == TrialState.RUNNING:
            assert after[number].state == TrialState.FAIL
            retried = [t for t in after if t.system_attrs.get("failed_trial") == number]
            assert len(retried) == 1 and retried[0].state in FINISHED, [(t.number, t.system_attrs) for t in after]
            # A kill can land while the trial is still sampling: the retry keeps every param it had recorded.
            killed_params = after[number].params
            assert {key: retried[0].params.get(key) for key in killed_params} == killed_params


def test_a_trial_asked_for_by_a_process_killed_before_it_claimed_it_is_recovered_at_once(project: Path) -> None:
    """The driver asks Optuna for a trial and records itself as its owner in one step under the study lock; a
    SIGKILL between the two left a RUNNING trial with no owner, which the next sweep only failed after
    ``sweep.stale_after_seconds`` (a sweep that ended sooner stayed one trial short, the trial RUNNING for good;
    seen once in the kill test above). Under a lock that every asker holds, it is a dead asker's at once."""
    plan = plan_sweep("params.yaml", [*SHORT, "sweep.n_trials=2"], project)
    study = SweepStudy.create(plan.storage, plan.study_name, plan.sweep)
    with study_lock(plan.storage, plan.study_name):
        asked = study.study.ask(plan.distributions)  # ... and the process dies here, before Heartbeat.claim
    assert not study.recover_stale_trials(plan.sweep, asks_are_locked=False)  # the old rule: not yet stale
    assert asks_are_locked(plan.storage)
    assert study.recover_stale_trials(plan.sweep, asks_are_locked(plan.storage)) == [asked.number]
    states = [(t.number, t.state) for t in study.study.get_trials(deepcopy=False)]
    assert states == [(asked.number, TrialState.FAIL), (asked.number + 1, TrialState.WAITING)]
    retry = study.study.get_trials(deepcopy=False)[-1]
    assert retry.params == asked.params and retry.system_attrs["retry_history"] == [asked.number]


@pytest.mark.slow
def test_a_trial_over_two_envs_averages_scores_normalized_to_each_target(project: Path) -> None:
    overrides = [
        "train.max_steps=4096",
        "train.eval_every=2048",
        "train.target_return=null",
        "eval.episodes=3",
        "sweep.space={algo.lr: {type: categorical, choices: [0.001]}}",
        "sweep.envs=[{id: CartPole-v1, target: 500}, {id: Acrobot-v1, baseline: -500, target: -100}]",
        "sweep.n_trials=1",
        "sweep.pruner=none",
    ]
    run_sweep(plan_sweep("params.yaml", overrides, project))
    (trial,) = load_study(project).trials
    folder = project / trial.user_attrs["folder"]
    metrics = {
        env: yaml.safe_load((outputs(folder / env / "seed_0").metrics).read_text())
        for env in ("CartPole-v1", "Acrobot-v1")
    }

    def normalized(score: dict[str, float]) -> list[float]:
        return [score["CartPole-v1"] / 500, (score["Acrobot-v1"] + 500) / 400]

    # The value: validation scores (what selection used); the test scores beside them, normalized the same way.
    expected = normalized({env: m["validation"]["mean_return"] for env, m in metrics.items()})
    assert trial.user_attrs["scores"] == pytest.approx(expected)
    assert trial.value == pytest.approx(sum(expected) / 2)
    test = normalized({env: m["mean_return"] for env, m in metrics.items()})
    assert trial.user_attrs["test_scores"] == pytest.approx(test)
    assert trial.user_attrs["test_value"] == pytest.approx(sum(test) / 2)


class RecordingExecutor:
    """A :class:`flows.sweep.TrialExecutor` that computes trials in this process and keeps their results."""

    def __init__(self) -> None:
        self.inner = InProcessExecutor()
        self.results: list[TrialResult] = []
        self.closed = False

    def submit(self, job: TrialJob):
        future = self.inner.submit(job)
        self.results.append(future.result())
        return future

    def close(self) -> None:
        self.closed = True


@pytest.mark.slow
def test_the_driver_runs_trials_through_a_trial_executor_and_tells_optuna_each_result(project: Path) -> None:
    executor = RecordingExecutor()
    two_short = [*SHORT, "train.max_steps=2048", "train.eval_every=1024", "sweep.n_trials=2", "sweep.pruner=none"]
    summary = run_sweep(plan_sweep("params.yaml", two_short, project), executor)
    assert executor.closed
    trials = load_study(project).trials
    assert [result.number for result in executor.results] == [0, 1]
    for result, trial in zip(executor.results, trials, strict=True):
        assert isinstance(result, TrialResult) and result.state == "complete" and trial.state == TrialState.COMPLETE
        assert result.value == trial.value and result.scores == [result.value]
        assert result.test_value == trial.user_attrs["test_value"] and result.test_scores == [result.test_value]
        assert result.env_steps == trial.user_attrs["env_steps"] == 2048
        assert result.worker_pid == os.getpid() == trial.user_attrs["worker_pid"]
        assert Path(result.folder) == project / trial.user_attrs["folder"]
    assert summary["counts"]["complete"] == 2 and len(summary["rows"]) == 2
    table = pd.read_parquet(project / "reports" / "sweep" / "trials.parquet")
    assert list(table.columns) == [
        *("number", "state", "value", "duration_seconds", "datetime_start", "datetime_complete"),
        *("algo.lr", "algo.clip_range", "algo.ent_coef"),
        *("test_value", "env_steps", "counterfactual_env_steps", "worker_pid", "folder", "error"),
        *("score seed_0", "test_score seed_0"),  # each run's (seed's) scores
    ]
    assert table["env_steps"].tolist() == [2048, 2048] and table["value"].tolist() == [t.value for t in trials]
    assert table["score seed_0"].tolist() == [result.scores[0] for result in executor.results]
    assert table["test_score seed_0"].tolist() == [result.test_scores[0] for result in executor.results]
    assert table["folder"].tolist() == [t.user_attrs["folder"] for t in trials]


def test_the_sweep_package_imports_no_prefect_and_the_sweep_section_no_rlcore() -> None:
    """Worker processes import ``flows.sweep`` (never Prefect); ``rlcore.config.sections`` imports
    ``rlcore.config.sweep``,
    which imports nothing of rlcore back but the leaf ``rlcore.common.strict_model`` (no import cycle)."""
    code = (
        "import sys; import rlcore.config.sweep; "
        "loaded = sorted(m for m in sys.modules if m.startswith('rlcore.')); "
        "allowed = {'rlcore.common', 'rlcore.common.strict_model', 'rlcore.config', 'rlcore.config.sweep'}; "
        "assert set(loaded) <= allowed, loaded; "
        "import flows.sweep; assert not [m for m in sys.modules if m.split('.')[0] == 'prefect']"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PROJECT)


def test_a_trial_s_iqm_aggregate_trims_a_quarter_of_its_runs_at_each_end() -> None:
    """``sweep.aggregate: iqm``: the interquartile mean over the trial's runs, as ``train.seeds`` reports it."""
    from flows.sweep.trial import AGGREGATES
    from rlcore.config.sweep import SweepConfig

    assert AGGREGATES["iqm"]([100.0, 2.0, 3.0, -50.0]) == 2.5  # the middle two of four
    assert AGGREGATES["iqm"]([1.0, 2.0, 6.0]) == 3.0  # fewer than four runs: nothing trimmed
    assert SweepConfig.model_validate({"aggregate": "iqm"}).aggregate == "iqm"


def test_the_plan_records_the_project_s_commit_and_whether_tracked_files_changed(tmp_path: Path) -> None:
    """The study's and each trial's ``git_revision`` (``rlcore.common.versions.revision_label``): the commit, with
    ``+dirty`` after a tracked file changed; None outside a git repository."""
    shutil.copy(PROJECT / "params.yaml", tmp_path / "params.yaml")
    assert plan_sweep("params.yaml", [], tmp_path).git_revision is None
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "params.yaml"], ["commit", "-q", "-m", "params"]):
        subprocess.run([*git, *args], cwd=tmp_path, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert plan_sweep("params.yaml", [], tmp_path).git_revision == head
    with (tmp_path / "params.yaml").open("a") as params:
        params.write("# edited\n")
    assert plan_sweep("params.yaml", [], tmp_path).git_revision == f"{head}+dirty"
