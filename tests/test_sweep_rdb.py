"""Sweeps on a shared RDB storage: a real PostgreSQL server, the way several machines share one study.

The sweeps run side by side and the killed one are real ``rlcore sweep --no-flow`` processes; the re-run after the
kill runs in this process (``cli_support.run_in_process``). The study lives only in PostgreSQL.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from cli_support import run_in_process
from conftest import sets
from optuna.trial import TrialState
from postgres_server import postgres_server
from test_sweep import SHORT, _spawn, assert_recovered

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


def _study(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=url)


def _trials(url: str, name: str, *states: TrialState) -> list[optuna.trial.FrozenTrial]:
    try:
        return _study(url, name).get_trials(deepcopy=False, states=states or None)
    except KeyError:  # not created yet
        return []


def test_two_processes_share_a_postgresql_study_without_losing_or_duplicating_trials(
    project: Path, postgres_url: str
) -> None:
    overrides = [*SHORT, "sweep.n_trials=5", f"sweep.storage={postgres_url}", "sweep.study_name=shared"]
    first, second = _spawn(project, overrides), _spawn(project, overrides)
    outputs = [process.communicate(timeout=300)[0] for process in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outputs
    trials = _study(postgres_url, "shared").trials
    assert sorted(t.number for t in trials) == list(range(5)), [(t.number, t.state) for t in trials]
    assert all(t.state == TrialState.COMPLETE for t in trials), [t.state for t in trials]
    assert len({t.user_attrs["folder"] for t in trials}) == 5
    owners = {t.system_attrs["rlcore:owner"]["pid"] for t in trials}
    assert owners == {first.pid, second.pid}
    assert not (project / ".optuna").exists()  # nothing went to the default journal file
    assert (project / "reports" / "sweep" / "summary.md").is_file()


def test_sigkill_mid_sweep_on_postgresql_then_rerun_retries_the_killed_trial(project: Path, postgres_url: str) -> None:
    name = "killed"
    overrides = [
        *SHORT,
        "sweep.n_trials=4",
        "sweep.workers=2",
        f"sweep.storage={postgres_url}",
        f"sweep.study_name={name}",
        "sweep.heartbeat_seconds=1",
        "sweep.stale_after_seconds=3",
    ]
    sweep = _spawn(project, overrides)
    deadline = time.monotonic() + 240
    while not _trials(postgres_url, name, TrialState.COMPLETE) or not _trials(postgres_url, name, TrialState.RUNNING):
        assert sweep.poll() is None, sweep.communicate()[0]
        assert time.monotonic() < deadline, "the sweep did not finish a trial in time"
        time.sleep(0.2)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait()
    before = {t.number: (t.state, t.value) for t in _trials(postgres_url, name)}
    running = [n for n, (state, _) in before.items() if state == TrialState.RUNNING]
    assert running, before
    time.sleep(4)  # past stale_after_seconds: Optuna's own heartbeat check fails them too

    result = run_in_process(["sweep", "--no-flow", *sets(overrides)], project, limit=300)

    assert result.returncode == 0, result
    assert_recovered(before, _study(postgres_url, name).trials, finished=4)
