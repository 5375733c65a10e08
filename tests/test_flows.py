"""The Prefect flow: one flow run with a task run per stage, on a real (temporary) Prefect server."""

import asyncio
from pathlib import Path

import pytest
from conftest import QUICK, outputs, rlcore, sets
from prefect_server import client_of

from rlcore.common.files import read_json

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def prefect_server(shared_prefect_server):
    with client_of(shared_prefect_server[0]):
        yield


def training_pipeline(**arguments):
    """``flows.pipeline.training_pipeline`` run with ``arguments``, imported when a test runs it: every collection of
    the suite imports this module, and prefect's import costs ~2.5 s."""
    from flows.pipeline import training_pipeline as flow

    return flow(**arguments)


async def _task_runs_and_artifacts(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async with get_client() as client:
        flow_run = await client.read_flow_run(flow_run_id)
        task_runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        artifacts = await client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return flow_run, task_runs, artifacts


def test_training_pipeline_runs_each_stage_as_a_task_run_and_publishes_artifacts(project: Path, prefect_server):
    state = training_pipeline(
        params_path=str(project / "params.yaml"), overrides=QUICK, root=str(project), return_state=True
    )
    assert state.is_completed(), state
    flow_run, task_runs, artifacts = asyncio.run(_task_runs_and_artifacts(state.state_details.flow_run_id))

    assert flow_run.name and flow_run.state.is_completed()
    assert {run.state.type.value for run in task_runs} == {"COMPLETED"}
    names = sorted(run.name for run in task_runs)
    for stage in ("train", "evaluate", "select-best", "export"):
        assert sum(name.startswith(stage) for name in names) == 1, names
    assert len(task_runs) == 4, names

    assert {a.type for a in artifacts} == {"markdown", "table"}
    markdown = next(a for a in artifacts if a.type == "markdown")
    metrics = read_json(outputs(project).metrics)
    assert f"{metrics['mean_return']:.1f}" in markdown.data
    assert (outputs(project).export / "policy.onnx").is_file()


async def _latest_flow_run_task_names():
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async with get_client() as client:
        flow_runs = await client.read_flow_runs(sort="START_TIME_DESC", limit=1)
        task_runs = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_runs[0].id]))
        )
    return flow_runs[0], sorted(run.name for run in task_runs)


def test_rlcore_pipeline_command_is_one_flow_run_on_the_configured_server(project: Path, prefect_server):
    from prefect.settings import PREFECT_API_URL

    env = {"PREFECT_API_URL": PREFECT_API_URL.value()}
    result = rlcore("pipeline", *sets([*QUICK, "name=cli"]), cwd=project, env=env)
    assert "Finished in state Completed()" in result.stdout + result.stderr
    flow_run, names = asyncio.run(_latest_flow_run_task_names())
    assert flow_run.state.is_completed()
    assert flow_run.parameters["overrides"][-1] == "name=cli"
    assert [n.split("-")[0] for n in names] == ["evaluate", "export", "select", "train"]
    assert (project / "runs" / "cli" / "train_summary.json").is_file()


def test_retrain_offline_records_the_newest_dataset_version_in_each_model_card(project: Path, prefect_server):
    import hashlib
    import shutil

    from flows.retrain import retrain_offline
    from rlcore.params import load_params
    from rlcore.stages import evaluate_stage, select_stage, train_stage

    online = load_params(project / "params.yaml", [*QUICK, "train.max_steps=1024", "train.progress_bar=off"])
    for stage in (train_stage, evaluate_stage, select_stage):
        stage(online, project)
    shutil.copy(Path(__file__).resolve().parents[1] / "offline.yaml", project / "offline.yaml")
    small = [
        "collect.steps=1000",
        "collect.policy=models/quick/policy.pt",  # the online run above is named quick (QUICK)
        "train.max_steps=200",
        "train.eval_every=100",
        "train.eval_episodes=2",
        "eval.episodes=2",
        "export.parity_observations=100",
        "export.torch_export=false",  # the model card is what this test reads
    ]
    cards = []
    for seed in (1, 2):  # two collections: two dataset versions
        result = retrain_offline(
            params_path=str(project / "offline.yaml"), overrides=[*small, f"collect.seed={seed}"], root=str(project)
        )
        dataset = project / "data" / "dataset.parquet"
        md5 = hashlib.md5(dataset.read_bytes(), usedforsecurity=False).hexdigest()
        card = read_json(outputs(project, "bc-cartpole").export / "model_card.json")  # offline.yaml's run
        assert card["training"]["dataset"]["md5"] == md5 == result["dataset_md5"]
        cards.append(card)
    assert cards[0]["training"]["dataset"]["md5"] != cards[1]["training"]["dataset"]["md5"]


def test_warm_start_flow_trains_bc_then_ppo_initialized_from_the_bc_model(project: Path, prefect_server):
    """flows/warmstart.py: the base pipeline, collect + BC, then the preset's PPO warm-started from the BC model
    (tiny budgets: 4,096 + 1,024 env steps of PPO, 1,000 transitions, 100 BC gradient steps)."""
    import shutil

    from flows.warmstart import warm_start_pipeline
    from rlcore.common.files import sha256_file

    source_tree = Path(__file__).resolve().parents[1]
    shutil.copy(source_tree / "offline.yaml", project / "offline.yaml")
    preset = project / "configs" / "ppo-from-bc-cartpole.yaml"
    preset.parent.mkdir()
    shutil.copy(source_tree / "configs" / preset.name, preset)
    small = ["train.eval_episodes=2", "eval.episodes=2", "eval.test_episodes=10", "export.parity_observations=100"]
    result = warm_start_pipeline(
        params_path=str(preset),
        overrides=[*small, "train.max_steps=1024", "train.eval_every=1024", "select.baseline_run=quick"],
        root=str(project),
        base_params=str(project / "params.yaml"),
        base_overrides=[*QUICK, "train.progress_bar=off"],
        offline_params=str(project / "offline.yaml"),
        offline_overrides=[
            *small,
            "collect.steps=1000",
            "collect.policy=models/quick/policy.pt",
            "train.max_steps=100",
            "train.eval_every=100",
        ],
    )
    bc_model = project / "models" / "bc-cartpole" / "policy.pt"
    assert result["initialized_from"]["sha256"] == sha256_file(bc_model)
    card = read_json(outputs(project, "ppo-from-bc-cartpole").export / "model_card.json")
    assert card["training"]["initialized_from"]["path"].endswith("models/bc-cartpole/policy.pt")
    assert (outputs(project, "ppo-from-bc-cartpole").reports / "baseline_comparison.png").is_file()


def _pipeline_states(project: Path, overrides: list[str]) -> dict[str, str]:
    """Run the pipeline flow; each stage's task run state name (``Completed`` or ``Cached``)."""
    state = training_pipeline(
        params_path=str(project / "params.yaml"), overrides=overrides, root=str(project), return_state=True
    )
    assert state.is_completed(), state
    _, task_runs, _ = asyncio.run(_task_runs_and_artifacts(state.state_details.flow_run_id))
    return {run.name.rsplit("-", 1)[0]: run.state.name for run in task_runs}


def _mtimes(folder: Path) -> dict[str, int]:
    return {path.name: path.stat().st_mtime_ns for path in sorted(folder.rglob("*")) if path.is_file()}


def test_a_rerun_of_the_pipeline_runs_only_the_stages_whose_inputs_or_outputs_changed(project: Path, prefect_server):
    """Issue 26 item 8: task caching on each stage's params keys, upstream digests and code version. A re-run is
    all ``Cached`` (the checkpoints untouched); an eval key re-runs evaluate, select and export but not train; a
    deleted export file re-runs export alone (a cached result naming a missing file is never returned)."""
    overrides = [*QUICK, "name=cached", "train.progress_bar=off"]
    first = _pipeline_states(project, overrides)
    assert first == dict.fromkeys(("train", "evaluate", "select-best", "export"), "Completed"), first
    run = project / "runs" / "cached"
    trained = _mtimes(run)

    assert set(_pipeline_states(project, overrides).values()) == {"Cached"}
    assert _mtimes(run) == trained

    changed = _pipeline_states(project, [*overrides, "eval.episodes=4"])
    assert changed == {"train": "Cached", "evaluate": "Completed", "select-best": "Completed", "export": "Completed"}
    assert read_json(outputs(project).evaluations)["episodes"] == 4
    assert _mtimes(run) == trained

    (outputs(project).export / "policy.onnx").unlink()
    again = _pipeline_states(project, [*overrides, "eval.episodes=4"])
    assert again == {"train": "Cached", "evaluate": "Cached", "select-best": "Cached", "export": "Completed"}, again
    assert (outputs(project).export / "policy.onnx").is_file()
    assert _mtimes(run) == trained


def test_the_pipeline_of_an_offline_run_collects_its_dataset_when_missing_or_stale(project: Path, prefect_server):
    """``rlcore pipeline --params offline.yaml``: collect runs before train when the dataset is missing, is cached on a
    re-run, and runs again (and so does train) when what it reads changes, as ``dvc repro`` runs the collect stage.
    It rolls out the base run's selected model: offline.yaml follows params.yaml's run, renamed quick here."""
    import shutil

    from rlcore.params import load_params
    from rlcore.stages import evaluate_stage, select_stage, train_stage

    params_text = (project / "params.yaml").read_text().replace("name: ppo-cartpole ", "name: quick        ", 1)
    (project / "params.yaml").write_text(params_text)
    online = load_params(project / "params.yaml", [*QUICK, "train.max_steps=1024", "train.progress_bar=off"])
    for stage in (train_stage, evaluate_stage, select_stage):
        stage(online, project)
    shutil.copy(Path(__file__).resolve().parents[1] / "offline.yaml", project / "offline.yaml")
    small = [
        "collect.steps=500",
        "train.max_steps=100",
        "train.eval_every=100",
        "train.eval_episodes=2",
        "eval.episodes=2",
        "eval.test_episodes=5",
        "export.parity_observations=100",
        "export.torch_export=false",  # the ONNX file is enough here
    ]

    def states(overrides: list[str]) -> dict[str, str]:
        state = training_pipeline(
            params_path=str(project / "offline.yaml"), overrides=overrides, root=str(project), return_state=True
        )
        assert state.is_completed(), state
        _, task_runs, _ = asyncio.run(_task_runs_and_artifacts(state.state_details.flow_run_id))
        return {run.name.rsplit("-", 1)[0]: run.state.name for run in task_runs}

    stages = ("collect", "train", "evaluate", "select-best", "export")
    assert states(small) == dict.fromkeys(stages, "Completed")
    dataset = project / "data" / "dataset.parquet"
    from rlcore.data.reader import read_metadata

    assert read_metadata(dataset)["policy"]["path"] == "models/quick/policy.pt"
    again = states(small)
    assert set(again.values()) == {"Cached"}, again
    stale = states([*small, "collect.seed=7"])
    assert stale["collect"] == stale["train"] == "Completed", stale
