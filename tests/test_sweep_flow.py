"""``rlcore sweep`` as a Prefect flow (a task run per trial, trials in worker processes) and as a DVC stage.

Both run against one temporary Prefect server (conftest's ``shared_prefect_server``), as ``PREFECT_API_URL``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import PROJECT, rlcore, sets
from prefect_server import client_of
from test_sweep import SHORT, load_study

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def api_url(shared_prefect_server: tuple[str, dict[str, str]]) -> Iterator[str]:
    with client_of(shared_prefect_server[0]) as url:
        yield url


async def _latest_sweep_run():
    # Imported here, not at the top: every collection of the suite imports this module; prefect costs ~2.5 s.
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterId

    async with get_client() as client:
        (flow_run,) = await client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["sweep"])), sort="START_TIME_DESC", limit=1
        )
        task_runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id])))
    return flow_run, task_runs


def test_rlcore_sweep_is_one_flow_run_with_a_task_run_per_trial_in_worker_processes(
    project: Path, api_url: str
) -> None:
    overrides = [*SHORT, "sweep.n_trials=3", "sweep.workers=2"]
    result = rlcore("sweep", *sets(overrides), cwd=project, env={"PREFECT_API_URL": api_url})
    assert "Finished in state Completed()" in result.stdout + result.stderr
    flow_run, task_runs = asyncio.run(_latest_sweep_run())
    assert flow_run.state.is_completed()
    assert sorted(run.name for run in task_runs) == ["trial-0", "trial-1", "trial-2"]
    assert {run.state.type.value for run in task_runs} == {"COMPLETED"}
    trials = load_study(project).trials
    owner = trials[0].system_attrs["rlcore:owner"]["pid"]
    workers = {t.user_attrs["worker_pid"] for t in trials}
    assert len(workers) == 2 and owner not in workers, (owner, workers)
    assert (project / "reports" / "sweep" / "summary.md").is_file()


def _run(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


def test_sweep_stage_runs_with_dvc_repro_of_its_own_file_and_not_in_the_default_repro(
    tmp_path: Path, api_url: str
) -> None:
    root = tmp_path
    for name in ("params.yaml", "dvc.yaml", ".dvcignore", "prefect.toml"):
        shutil.copy(PROJECT / name, root / name)
    (root / "sweeps").mkdir()
    shutil.copy(PROJECT / "sweeps" / "dvc.yaml", root / "sweeps" / "dvc.yaml")
    for package in ("rlcore", "flows"):
        shutil.copytree(PROJECT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["train"].update(max_steps=4096, eval_every=2048, target_return=None)
    params["eval"]["episodes"] = 3
    params["sweep"]["n_trials"] = 2
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / ".gitignore").write_text("/runs/\n/models/\n/export/\n/data/\n/reports/*\n/.optuna/\n")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PREFECT_API_URL": api_url,
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for args in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "p"]):
        _run(*args, cwd=root, env=env)

    # `dvc repro` with no target reproduces the stages of ./dvc.yaml, which `dvc stage list` shows.
    assert "sweep" not in _run("dvc", "stage", "list", cwd=root, env=env).stdout
    result = _run("dvc", "repro", "sweeps/dvc.yaml", cwd=root, env=env)
    assert "Running stage 'sweeps/dvc.yaml:sweep'" in result.stdout
    assert (root / "sweeps" / "dvc.lock").is_file()
    assert (root / "reports" / "sweep" / "best_params.yaml").is_file()
    assert len(load_study(root).trials) == 2
    assert "up to date" in _run("dvc", "status", "sweeps/dvc.yaml", cwd=root, env=env).stdout
