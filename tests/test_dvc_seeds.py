"""Several seeds under real DVC with the root dvc.yaml, in a temporary git + DVC repository: ``train.seeds`` in
params.yaml (the seeds preset, ``configs/ppo-cartpole-seeds.yaml``), ``dvc repro`` trains every seed in one train
stage whose output is the run folder, the aggregate in ``dvc metrics show``, and a re-run after one seed's run is lost
trains that seed alone. Tiny budget: two seeds, 1,024 env steps each; the online branch only (``dvc repro export``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import GITIGNORE, PROJECT
from test_dvc_pipeline import dvc, edit_params, git, read_json

PRESET = "configs/ppo-cartpole-seeds.yaml"
STAGES = ("train", "evaluate", "select", "export")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("dvc-seeds")
    for name in ("offline.yaml", "dvc.yaml", ".dvcignore"):
        shutil.copy(PROJECT / name, root / name)
    shutil.copy(PROJECT / PRESET, root / "params.yaml")  # as the preset says: cp it to params.yaml, dvc repro
    (root / ".gitignore").write_text(GITIGNORE)
    edit_params(
        root,
        train={"max_steps": 1024, "eval_every": 512, "eval_episodes": 2, "target_return": None, "seeds": [0, 1]},
        eval={"episodes": 2, "test_episodes": 4},
        export={"parity_observations": 50},
    )
    git("init", "-q", cwd=root)
    dvc("init", "-q", cwd=root)
    dvc("config", "core.analytics", "false", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "seeds project", cwd=root)
    return {"root": root, "first": dvc("repro", "export", cwd=root)}


@pytest.mark.slow
def test_dvc_repro_trains_every_seed_in_one_stage_and_shows_the_aggregate(repo: dict) -> None:
    root: Path = repo["root"]
    out = repo["first"].stdout
    order = [out.index(f"Running stage '{stage}'") for stage in STAGES]
    assert order == sorted(order), out
    run = root / "runs" / "ppo-cartpole-seeds"
    for seed in (0, 1):
        assert (run / f"seed_{seed}" / "train_summary.json").is_file()
    assert not (run / "checkpoints").exists()
    shown = json.loads(dvc("metrics", "show", "--json", cwd=root).stdout)
    scores = shown[""]["data"]["reports/ppo-cartpole-seeds/scores.json"]["data"]
    assert scores["seeds"] == 2 and scores["seeds_iqm_ci95_low"] <= scores["seeds_iqm"], scores
    metrics = read_json(root / "reports" / "ppo-cartpole-seeds" / "metrics.json")
    assert scores["test_mean_return"] == metrics["mean_return"]
    assert set(metrics["per_seed"]) == {"0", "1"}
    assert (root / "export" / "ppo-cartpole-seeds" / "model_card.json").is_file()
    assert "Data and pipelines are up to date" in dvc("repro", "export", cwd=root).stdout


@pytest.mark.slow
def test_a_lost_seed_is_trained_again_alone(repo: dict) -> None:
    """After seed 1's run is lost (its folder removed, as a kill before its first checkpoint leaves it), ``dvc repro``
    trains seed 1 and keeps seed 0's finished run as it was (persist: the folder is not cleared before the stage)."""
    root: Path = repo["root"]
    run = root / "runs" / "ppo-cartpole-seeds"
    kept = {path: path.stat().st_mtime_ns for path in (run / "seed_0").rglob("*") if path.is_file()}
    shutil.rmtree(run / "seed_1")
    out = dvc("repro", "export", cwd=root).stdout
    assert "Running stage 'train'" in out, out
    assert (run / "seed_1" / "train_summary.json").is_file()
    assert {path: path.stat().st_mtime_ns for path in kept} == kept
