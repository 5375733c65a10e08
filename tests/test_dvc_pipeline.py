"""The real DVC pipeline (dvc.yaml) on a small budget, in a temporary git + DVC repository.

One module-scoped project runs the first ``dvc repro``; the tests then run in file order against it
(no-op re-run, an eval-only change, metrics, plots, and an experiment with a param override).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import run_in_process
from conftest import GITIGNORE, PROJECT, tool_env

BIN = Path(sys.executable).parent
DVC = str(BIN / "dvc")
STAGES = ("train", "evaluate", "select", "export")
OFFLINE_STAGES = ("collect", "train_offline", "evaluate_offline", "select_offline", "export_offline")

_env = tool_env


def run(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_env())
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def dvc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run(DVC, *args, cwd=cwd)


def git(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run("git", *args, cwd=cwd)


def edit_params(root: Path, file: str = "params.yaml", **sections: Any) -> None:
    path = root / file
    params = yaml.safe_load(path.read_text())
    for key, value in sections.items():
        if isinstance(value, dict):
            params[key].update(value)
        else:
            params[key] = value
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A git + DVC copy of the project with the quick budget, after one ``dvc repro``."""
    root = tmp_path_factory.mktemp("dvc-project")
    for name in ("params.yaml", "offline.yaml", "dvc.yaml", ".dvcignore", "prefect.toml"):
        shutil.copy(PROJECT / name, root / name)
    (root / ".gitignore").write_text(GITIGNORE)
    edit_params(
        root,
        name="quick",
        train={"max_steps": 4096, "eval_every": 1024, "eval_episodes": 3, "target_return": None},
        eval={"episodes": 3},
        export={"parity_observations": 200},
    )
    edit_params(
        root,
        "offline.yaml",
        collect={"steps": 2000},
        train={"max_steps": 400, "eval_every": 200, "eval_episodes": 3},
        eval={"episodes": 3},
        export={"parity_observations": 200},
    )
    git("init", "-q", cwd=root)
    git("config", "user.email", "tests@rlcore.invalid", cwd=root)
    git("config", "user.name", "rlcore tests", cwd=root)
    dvc("init", "-q", cwd=root)
    dvc("config", "core.analytics", "false", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "quick project", cwd=root)
    first = dvc("repro", cwd=root)
    return {"root": root, "first": first}


@pytest.mark.slow
def test_dvc_repro_runs_every_stage_and_writes_the_outputs(repo: dict) -> None:
    root: Path = repo["root"]
    for stage in STAGES + OFFLINE_STAGES:
        assert f"Running stage '{stage}'" in repo["first"].stdout
    assert sorted((root / "runs/quick/checkpoints").glob("*.pt"))
    assert (root / "reports/evaluations.json").is_file()
    # The selected model's TEST score (eval.test_episodes episodes nothing else ran), with its interval, and the
    # validation score that selection used.
    metrics = read_json(root / "reports/metrics.json")
    test_keys = {"mean_return", "iqm_return", "ci95_low", "ci95_high", "std_return", "median_return", "min_return"}
    test_keys |= {"max_return", "episodes", "truncated", "step", "step_unit", "env_steps", "gradient_steps"}
    assert test_keys | {"checkpoint", "validation"} <= metrics.keys()
    assert metrics["episodes"] == 100 and metrics["ci95_low"] <= metrics["mean_return"] <= metrics["ci95_high"]
    validation = metrics["validation"]
    assert {"metric", "value", "episodes", "mean_return", "iqm_return", "ci95_low", "ci95_high"} <= validation.keys()
    assert validation["episodes"] == 3 and validation["metric"] == "mean_return"
    report = (root / "reports/report.md").read_text()
    assert f"**Test score: {metrics['mean_return']:.1f}**" in report
    assert f"95% CI [{metrics['ci95_low']:.1f}, {metrics['ci95_high']:.1f}]" in report
    assert (root / "reports/learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (root / "models/best/policy.pt").is_file()
    assert (root / "models/best/selection.json").is_file()
    assert (root / "export/policy.onnx").is_file()
    assert (root / "export/policy.pt2").is_file()
    card = read_json(root / "export/model_card.json")
    assert {"env", "algorithm", "params", "evaluation", "validation", "git", "command", "created"} <= card.keys()
    assert card["evaluation"]["mean_return"] == metrics["mean_return"]
    assert card["validation"]["value"] == validation["value"]
    assert (root / "dvc.lock").is_file()


@pytest.mark.slow
def test_second_repro_is_a_noop_within_5_seconds(repo: dict) -> None:
    root: Path = repo["root"]
    lock = (root / "dvc.lock").read_bytes()
    started = time.perf_counter()
    result = dvc("repro", cwd=root)
    elapsed = time.perf_counter() - started
    for stage in STAGES + OFFLINE_STAGES:
        assert f"Stage '{stage}' didn't change, skipping" in result.stdout
    assert "Running stage" not in result.stdout
    assert elapsed <= 5.0, f"no-op dvc repro took {elapsed:.1f} s"
    assert (root / "dvc.lock").read_bytes() == lock


@pytest.mark.slow
def test_changing_an_eval_param_reruns_evaluate_but_not_train(repo: dict) -> None:
    root: Path = repo["root"]
    checkpoints = sorted((root / "runs/quick/checkpoints").glob("*.pt"))
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in checkpoints}
    edit_params(root, eval={"episodes": 4})
    result = dvc("repro", cwd=root)
    assert "Running stage 'evaluate'" in result.stdout
    assert "Running stage 'train'" not in result.stdout
    assert "Stage 'train' didn't change, skipping" in result.stdout
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in (root / "runs/quick/checkpoints").glob("*.pt")}
    assert after == before
    assert read_json(root / "reports/metrics.json")["validation"]["episodes"] == 4
    assert read_json(root / "reports/evaluations.json")["episodes"] == 4


@pytest.mark.slow
def test_the_baseline_threshold_is_a_param_of_select(repo: dict) -> None:
    """select draws ``train.target_return`` on its baseline comparison (issue 27: dvc.yaml did not list it, so a
    new threshold left the report stale whenever train's re-run changed no checkpoint)."""
    root: Path = repo["root"]
    before = (root / "params.yaml").read_text()
    edit_params(root, train={"target_return": 321})
    try:
        result = dvc("status", "select", cwd=root)
    finally:
        (root / "params.yaml").write_text(before)
    assert "select:" in result.stdout, result.stdout  # before the fix: "Data and pipelines are up to date."
    assert "train.target_return" in result.stdout[result.stdout.index("select:") :], result.stdout


@pytest.mark.slow
def test_dvc_metrics_show_reads_reports_metrics(repo: dict) -> None:
    root: Path = repo["root"]
    shown = json.loads(dvc("metrics", "show", "--json", cwd=root).stdout)
    metrics = shown[""]["data"]["reports/metrics.json"]["data"]
    assert metrics["mean_return"] == read_json(root / "reports/metrics.json")["mean_return"]
    # the training curve's last values (dvclive), listed at the top of dvc.yaml: inside train's output, the run folder
    curve = shown[""]["data"]["runs/quick/dvclive/metrics.json"]["data"]
    assert curve["step"] == read_json(root / "runs/quick/dvclive/metrics.json")["step"] == 4096


@pytest.mark.slow
def test_dvc_plots_show_json_includes_the_learning_curve(repo: dict) -> None:
    root: Path = repo["root"]
    result = dvc("plots", "show", "--json", cwd=root)
    plots = json.loads(result.stdout)["data"]
    curve = "runs/quick/dvclive/plots/metrics/eval/mean_return.tsv"
    assert curve in plots
    assert "mean_return" in json.dumps(plots[curve])
    assert "reports/learning_curve.png" in plots


@pytest.mark.slow
def test_dvc_exp_run_with_a_param_override_records_an_experiment(repo: dict) -> None:
    root: Path = repo["root"]
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "repro", cwd=root)
    assert git("status", "--porcelain", cwd=root).stdout == ""
    dvc("exp", "run", "--temp", "-S", "algo.lr=0.002", cwd=root)
    # --temp runs in a temporary copy: the workspace keeps its params and lock file.
    assert git("status", "--porcelain", cwd=root).stdout == ""
    assert yaml.safe_load((root / "params.yaml").read_text())["algo"]["lr"] == 0.001
    shown = json.loads(dvc("exp", "show", "--json", cwd=root).stdout)
    experiments = [exp for commit in shown for group in commit.get("experiments") or [] for exp in group["revs"]]
    lrs = [exp["data"]["params"]["params.yaml"]["data"]["algo"]["lr"] for exp in experiments]
    assert 0.002 in lrs
    recorded = next(exp for exp in experiments if exp["data"]["params"]["params.yaml"]["data"]["algo"]["lr"] == 0.002)
    assert "reports/metrics.json" in recorded["data"]["metrics"]


@pytest.mark.slow
def test_dataset_round_trips_through_a_dvc_remote_byte_for_byte(repo: dict, tmp_path: Path) -> None:
    root: Path = repo["root"]
    dataset = root / "data" / "dataset.parquet"
    original = hashlib.sha256(dataset.read_bytes()).hexdigest()
    dvc("remote", "add", "-f", "-d", "local", str(tmp_path / "remote"), cwd=root)
    dvc("push", cwd=root)
    dataset.unlink()
    shutil.rmtree(root / ".dvc" / "cache")
    dvc("pull", cwd=root)
    assert hashlib.sha256(dataset.read_bytes()).hexdigest() == original
    # The pulled file is what training reads: the offline branch is up to date and the data loads.
    status = dvc("status", cwd=root)
    assert "changed" not in status.stdout, status.stdout
    result = run(str(BIN / "rlcore"), "train", "--params", "offline.yaml", "--set", "name=pulled", cwd=root)
    assert "training bc on" in result.stderr


@pytest.mark.slow
def test_training_in_a_fresh_git_repository_without_commits_logs_its_metrics(project: Path) -> None:
    """dvclive 3.49 raises on `git init` without a commit; the run must not fail for that."""
    from conftest import QUICK, sets

    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    result = run_in_process(["train", *sets(QUICK)], project, limit=300)
    assert result.returncode == 0, result
    assert "no commit yet?" in result.stderr
    metrics = json.loads((project / "runs" / "quick" / "dvclive" / "metrics.json").read_text())
    assert metrics["step"] == 4096
