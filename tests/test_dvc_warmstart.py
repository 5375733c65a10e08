"""The warm-start DAG (pipelines/warmstart/dvc.yaml, generated) under real DVC, in a temporary git + DVC repository.

Tiny budgets (seed 0): PPO 2,048 env steps, 1,000 collected transitions, BC 100 gradient steps, the warm-started PPO
1,024 env steps. The root dvc.yaml's stages (tested whole in test_dvc_pipeline.py) run in this process and are
recorded with ``dvc commit``, so DVC runs the four warm-start stages as processes (~50 s under load; ~130 s with
every stage a process).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import GITIGNORE, PROJECT
from test_dvc_pipeline import dvc, edit_params, git, read_json

from rlcore.common.files import sha256_file
from rlcore.params import load_params
from rlcore.project.pipeline_file import pipeline_yaml, sub_pipeline_yaml
from rlcore.stages import collect_stage, evaluate_stage, select_stage, train_stage

PRESET = "configs/ppo-from-bc-cartpole.yaml"
UPSTREAM = ("train", "evaluate", "select", "collect", "train_offline", "evaluate_offline", "select_offline")
WARM = tuple(f"pipelines/warmstart/dvc.yaml:{stage}_warmstart" for stage in ("train", "evaluate", "select", "export"))
QUICK_EVAL = {"episodes": 3, "test_episodes": 10}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("dvc-warmstart")
    for name in ("params.yaml", "offline.yaml", ".dvcignore", "prefect.toml", PRESET):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PROJECT / name, root / name)
    shutil.copytree(PROJECT / "pipelines", root / "pipelines", ignore=shutil.ignore_patterns("dvc.lock"))
    (root / ".gitignore").write_text(GITIGNORE)
    quick_train = {"eval_every": 1024, "eval_episodes": 3, "target_return": None}
    edit_params(root, name="quick", train={"max_steps": 2048, **quick_train}, eval=QUICK_EVAL)
    edit_params(
        root,
        "offline.yaml",
        collect={"steps": 1000, "num_envs": 4},  # rolls out params.yaml's run: models/quick/policy.pt
        train={"max_steps": 100, "eval_every": 100, "eval_episodes": 3},
        eval=QUICK_EVAL,
        export={"parity_observations": 200},
    )
    edit_params(
        root,
        PRESET,
        train={"max_steps": 1024, **quick_train},
        eval=QUICK_EVAL,
        select={"baseline_run": "quick"},
        export={"parity_observations": 200},
    )
    (root / "dvc.yaml").write_text(pipeline_yaml(root))
    warm = root / "pipelines" / "warmstart" / "dvc.yaml"  # its select depends on the baseline run, now quick
    warm.write_text(sub_pipeline_yaml(root, PRESET, "pipelines/warmstart"))
    git("init", "-q", cwd=root)
    dvc("init", "-q", cwd=root)
    dvc("config", "core.analytics", "false", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "quick project", cwd=root)
    online, offline = (load_params(root / name, ["train.progress_bar=off"]) for name in ("params.yaml", "offline.yaml"))
    for stage in (train_stage, evaluate_stage, select_stage):
        stage(online, root)
    collect_stage(offline, root)
    for stage in (train_stage, evaluate_stage, select_stage):
        stage(offline, root)
    dvc("commit", "--force", "--with-deps", "select_offline", cwd=root)  # what they wrote, as if DVC ran them
    return {"root": root, "first": dvc("repro", "pipelines/warmstart/dvc.yaml", cwd=root)}


@pytest.mark.slow
def test_warmstart_dag_trains_bc_then_ppo_from_the_bc_model(repo: dict) -> None:
    root: Path = repo["root"]
    out = repo["first"].stdout
    for stage in UPSTREAM:  # the offline branch is upstream of the warm start, and up to date
        assert f"Stage '{stage}' didn't change, skipping" in out, out
    order = [out.index(f"Running stage '{stage}'") for stage in WARM]
    assert order == sorted(order), out
    assert "'export'" not in out  # not upstream of the warm start
    dag = dvc("dag", "--dot", "pipelines/warmstart/dvc.yaml", cwd=root).stdout
    for upstream in ("select_offline", "collect"):  # the BC model (init_from) and its dataset (the BC loss)
        assert f'"{upstream}" -> "pipelines/warmstart/dvc.yaml:train_warmstart"' in dag, dag
    source = root / "models/bc-cartpole/policy.pt"
    summary = read_json(root / "runs/ppo-from-bc-cartpole/train_summary.json")
    assert summary["initialized_from"]["path"] == "models/bc-cartpole/policy.pt"
    assert summary["initialized_from"]["sha256"] == sha256_file(source)
    assert summary["initialized_from"]["algo"] == "bc"
    card = read_json(root / "export/ppo-from-bc-cartpole/model_card.json")
    assert card["training"]["initialized_from"]["sha256"] == sha256_file(source)
    assert (root / "export/ppo-from-bc-cartpole/policy.onnx").is_file()
    assert (root / "reports/ppo-from-bc-cartpole/baseline_comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (root / "reports/ppo-from-bc-cartpole/report.md").read_text()
    assert "![learning curves beside the baseline](baseline_comparison.png)" in report
    assert "Initialized from `models/bc-cartpole/policy.pt`" in report
    # its training curves, listed at the top of its dvc.yaml (relative to that file, inside train's run folder)
    shown = json.loads(dvc("metrics", "show", "--json", cwd=root).stdout)[""]["data"]
    assert shown["runs/ppo-from-bc-cartpole/dvclive/metrics.json"]["data"]["step"] == summary["env_steps"]
    plots = json.loads(dvc("plots", "show", "--json", cwd=root).stdout)["data"]
    assert "runs/ppo-from-bc-cartpole/dvclive/plots/metrics/eval/mean_return.tsv" in plots, list(plots)


@pytest.mark.slow
def test_root_pipeline_alone_is_what_a_plain_repro_runs(repo: dict) -> None:
    root: Path = repo["root"]
    assert "Running stage" not in dvc("repro", "pipelines/warmstart/dvc.yaml", cwd=root).stdout
    edit_params(root, PRESET, eval={**QUICK_EVAL, "episodes": 4})  # the warm-started run's evaluation is stale
    dry = dvc("repro", "--dry", cwd=root).stdout
    assert "warmstart" not in dry and "Running stage 'export'" in dry
    assert (
        "Running stage 'pipelines/warmstart/dvc.yaml:evaluate_warmstart'"
        in dvc("repro", "--dry", "pipelines/warmstart/dvc.yaml", cwd=root).stdout
    )
