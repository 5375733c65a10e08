"""``rlcore pipeline`` SIGKILLed at a stage boundary, then run again: only what was left runs (issue 26 item 8).

The kill lands right after a stage's task committed its cached result (its record appears in
``.prefect/storage``). The re-run finds every finished stage ``Cached`` (train's checkpoints untouched, no
"starting a fresh run") and runs the stages after the boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import QUICK, RLCORE, outputs, rlcore, sets
from prefect_server import client_of

from .run_support import kill, start, wait_until

pytestmark = [pytest.mark.server, pytest.mark.slow]

STAGES = ["train", "evaluate", "select-best", "export"]
RECORD = {"train": "train-", "evaluate": "evaluate-", "select-best": "select-"}
"""The name with which each stage's cached result is stored (flows/caching.py keys)."""


@pytest.fixture(scope="module")
def api_url(shared_prefect_server: tuple[str, dict[str, str]]) -> Iterator[str]:
    with client_of(shared_prefect_server[0]) as url:
        yield url


async def _latest_states() -> dict[str, str]:
    # Imported here, not at the top: every collection of the suite imports this module; prefect costs ~2.5 s.
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async with get_client() as client:
        flow_run = (await client.read_flow_runs(sort="START_TIME_DESC", limit=1))[0]
        task_runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id])))
    return {run.name.rsplit("-", 1)[0]: run.state.name for run in task_runs}


def _mtimes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("boundary", ["train", "evaluate", "select-best"])
def test_a_pipeline_killed_after_a_stage_reruns_only_the_stages_after_it(
    project: Path, tmp_path: Path, api_url: str, boundary: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFECT_API_URL", api_url)  # the CLI talks to the test server (start() passes os.environ)
    overrides = sets([*QUICK, "name=resumed", "train.progress_bar=off"])
    storage = project / ".prefect" / "storage"
    log = tmp_path / "killed.log"
    proc = start([RLCORE, "pipeline", *overrides], project, log)

    def committed() -> bool:
        """The stage's record is there and whole: Prefect writes it in place, so a kill that lands as soon as its
        name appears can cut it short (the re-run then finds no cached result; seen once on a loaded machine)."""
        if not storage.is_dir():
            return False
        for record in storage.iterdir():
            if record.name.startswith(RECORD[boundary]):
                with contextlib.suppress(OSError, ValueError):
                    json.loads(record.read_bytes())
                    return True
        return False

    assert wait_until(committed, proc, timeout=600), log.read_text()
    assert kill(proc), "the pipeline ended before the kill"
    later = STAGES[STAGES.index(boundary) + 1 :]
    assert not (outputs(project).export / "model_card.json").exists()
    run = project / "runs" / "resumed"
    trained = _mtimes(run)

    result = rlcore("pipeline", *overrides, cwd=project, env={"PREFECT_API_URL": api_url})
    output = result.stdout + result.stderr
    assert "starting a fresh run" not in output and "resuming" not in output, output
    states = asyncio.run(_latest_states())
    done = STAGES[: STAGES.index(boundary) + 1]
    assert states == {**dict.fromkeys(done, "Cached"), **dict.fromkeys(later, "Completed")}, states
    assert _mtimes(run) == trained  # train did not run again
    assert (outputs(project).export / "model_card.json").is_file()
