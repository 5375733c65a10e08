"""The real DVC pipeline (the generated dvc.yaml) on tiny budgets, in a temporary git + DVC repository.

One module-scoped project runs the first ``dvc repro``; the tests then run in file order against it: which stages
re-run for each kind of change (nothing, an eval key, an algo key, an env key; the last two as ``dvc exp run -S``),
then the two experiments compared in ``dvc exp show`` (params, the selected model's test score, IQM, interval and
validation score as numbers), their learning curves in ``dvc plots diff``, and one restored by ``dvc exp apply``.

Each stage is a process start of a few seconds whatever its budget, so the module runs as few as its checks need:
the env-key experiment runs the online branch alone (that the offline branch follows a new model is the algo-key
experiment's check).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import run_in_process
from conftest import GITIGNORE, PROJECT, outputs, tool_env

from rlcore.common.versions import rlcore_version
from rlcore.project.pipeline_file import pipeline_yaml

BIN = Path(sys.executable).parent
DVC = str(BIN / "dvc")
STAGES = ("train", "evaluate", "select", "export")
OFFLINE_STAGES = ("collect", "train_offline", "evaluate_offline", "select_offline", "export_offline")

_env = tool_env


def run(*args: str, cwd: Path, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
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
            params.setdefault(key, {}).update(value)
        else:
            params[key] = value
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


TINY_EVAL = {"episodes": 2, "test_episodes": 5}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A git + DVC project with both branches on tiny budgets (its dvc.yaml generated from its params files, as
    ``rlcore dvc-yaml`` writes it), after one ``dvc repro``."""
    root = tmp_path_factory.mktemp("dvc-project")
    for name in ("params.yaml", "offline.yaml", ".dvcignore", "prefect.toml"):
        shutil.copy(PROJECT / name, root / name)
    (root / ".gitignore").write_text(GITIGNORE)
    edit_params(
        root,
        name="quick",
        train={"max_steps": 2048, "eval_every": 1024, "eval_episodes": 2, "target_return": None},
        eval=TINY_EVAL,
        export={"parity_observations": 50},
    )
    edit_params(
        root,
        "offline.yaml",
        collect={"steps": 500, "policy": "models/quick/policy.pt"},
        train={"max_steps": 100, "eval_every": 50, "eval_episodes": 2},
        eval=TINY_EVAL,
        export={"parity_observations": 50},
    )
    (root / "dvc.yaml").write_text(pipeline_yaml(root))
    git("init", "-q", cwd=root)
    dvc("init", "-q", cwd=root)
    dvc("config", "core.analytics", "false", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "quick project", cwd=root)
    first = dvc("repro", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "first repro", cwd=root)
    return {"root": root, "first": first, "experiments": {}}


def ran(result: subprocess.CompletedProcess[str]) -> set[str]:
    """The stages a ``dvc repro`` or ``dvc exp run`` ran."""
    return set(re.findall(r"Running stage '([^']+)'", result.stdout))


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_dvc_repro_runs_every_stage_and_writes_the_outputs(repo: dict) -> None:
    root: Path = repo["root"]
    assert ran(repo["first"]) == set(STAGES + OFFLINE_STAGES)
    quick = outputs(root, "quick")
    assert sorted(quick.checkpoints.glob("*.pt"))
    assert quick.evaluations.is_file()
    # The selected model's TEST score (eval.test_episodes episodes nothing else ran), with its interval, and the
    # validation score that selection used.
    metrics = read_json(quick.metrics)
    test_keys = {"mean_return", "iqm_return", "ci95_low", "ci95_high", "std_return", "median_return", "min_return"}
    test_keys |= {"max_return", "episodes", "truncated", "step", "step_unit", "env_steps", "gradient_steps"}
    assert test_keys | {"checkpoint", "validation"} <= metrics.keys()
    assert metrics["episodes"] == 5 and metrics["ci95_low"] <= metrics["mean_return"] <= metrics["ci95_high"]
    validation = metrics["validation"]
    assert {"metric", "value", "episodes", "mean_return", "iqm_return", "ci95_low", "ci95_high"} <= validation.keys()
    assert validation["episodes"] == 2 and validation["metric"] == "mean_return"
    assert read_json(quick.scores) == {
        "test_mean_return": metrics["mean_return"],
        "test_iqm_return": metrics["iqm_return"],
        "test_ci95_low": metrics["ci95_low"],
        "test_ci95_high": metrics["ci95_high"],
        "test_episodes": 5,
        "validation_mean_return": validation["value"],
        "step": metrics["step"],
    }
    assert quick.learning_curve_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert quick.best_policy.is_file() and quick.selection.is_file()
    assert (quick.export / "policy.onnx").is_file() and (quick.export / "policy.pt2").is_file()
    card = read_json(quick.export / "model_card.json")
    assert card["evaluation"]["mean_return"] == metrics["mean_return"]
    assert card["validation"]["value"] == validation["value"]
    # The stages do not depend on rlcore's sources; each run says which rlcore made it.
    assert "rlcore" not in json.dumps(yaml.safe_load((root / "dvc.yaml").read_text())["stages"]["train"].get("deps"))
    for made_by in (card["versions"]["rlcore"], read_json(quick.train_summary)["rlcore"]):
        assert made_by["version"] == rlcore_version()["version"] is not None
        assert re.fullmatch(r"[0-9a-f]{40}", made_by["revision"]), made_by  # this checkout's commit
    # The offline branch, in its own run's folders: nothing of the main run's is overwritten.
    offline = outputs(root, "bc-cartpole")
    assert read_json(offline.metrics)["checkpoint"].startswith("runs/bc-cartpole/")
    assert (offline.export / "policy.onnx").is_file()


@pytest.mark.slow
def test_nothing_changed_nothing_reruns(repo: dict) -> None:
    """What re-runs is asserted, not how long it takes: a timed assertion failed on a loaded machine."""
    root: Path = repo["root"]
    lock = (root / "dvc.lock").read_bytes()
    assert "Data and pipelines are up to date" in dvc("status", cwd=root).stdout
    result = dvc("repro", cwd=root)
    assert ran(result) == set()
    assert (root / "dvc.lock").read_bytes() == lock


@pytest.mark.slow
def test_an_eval_key_reruns_evaluate_select_export_and_nothing_of_train_or_the_offline_branch(repo: dict) -> None:
    """Issue 38: re-selecting the same checkpoint wrote a policy.pt with a new md5 (torch.save named its records after
    the temporary file), so collect and the whole offline branch re-ran. The key changed (the number of test
    episodes) is one the evaluate stage reads but that leaves the validation as it was, so the same checkpoint is
    selected again; a key that changes the selection (eval.episodes may) rightly re-runs collect and the offline
    branch on the newly selected model."""
    root: Path = repo["root"]
    quick = outputs(root, "quick")
    checkpoints = {path.name: md5(path) for path in quick.checkpoints.glob("*.pt")}
    selected, selection = md5(quick.best_policy), read_json(quick.selection)["checkpoint"]
    edit_params(root, eval={**TINY_EVAL, "test_episodes": 6})
    result = dvc("repro", cwd=root)
    assert ran(result) == {"evaluate", "select", "export"}, result.stdout
    assert {path.name: md5(path) for path in quick.checkpoints.glob("*.pt")} == checkpoints
    assert read_json(quick.metrics)["episodes"] == 6
    assert read_json(quick.selection)["checkpoint"] == selection  # the same checkpoint selected: the same bytes
    assert md5(quick.best_policy) == selected
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "eval.test_episodes 6", cwd=root)


@pytest.mark.slow
def test_an_algo_key_reruns_train_and_everything_downstream_of_its_model(repo: dict) -> None:
    """``dvc exp run -S algo.lr=...``: a new model, so the online branch, collect (it rolls the model out) and the
    offline branch trained on the new dataset."""
    root: Path = repo["root"]
    result = dvc("exp", "run", "-n", "lr-high", "-S", "algo.lr=0.003", cwd=root)
    assert ran(result) == set(STAGES + OFFLINE_STAGES), result.stdout
    repo["experiments"]["lr-high"] = read_json(outputs(root, "quick").scores)


@pytest.mark.slow
def test_an_env_key_reruns_train_and_everything_downstream_of_its_model(repo: dict) -> None:
    """The online branch's stages only (``dvc exp run ... export``): the offline branch's re-run on a new model is the
    algo-key experiment's check."""
    root: Path = repo["root"]
    result = dvc("exp", "run", "-n", "few-envs", "-S", "algo.lr=0.001", "-S", "env.num_envs=8", "export", cwd=root)
    assert ran(result) == set(STAGES), result.stdout
    repo["experiments"]["few-envs"] = read_json(outputs(root, "quick").scores)


@pytest.mark.slow
def test_dvc_exp_show_compares_the_experiments_on_their_test_scores(repo: dict) -> None:
    """Both experiments with their params and the selected model's test score, IQM, interval and validation score,
    as numbers (issue 38: reports/metrics.json was git-ignored and not cached, so no experiment held it)."""
    root: Path = repo["root"]
    shown = json.loads(dvc("exp", "show", "--json", cwd=root).stdout)
    experiments = {
        exp["name"]: exp["data"]
        for commit in shown
        for group in commit.get("experiments") or []
        for exp in group["revs"]
    }
    assert set(repo["experiments"]) <= experiments.keys(), list(experiments)
    for name, scores in repo["experiments"].items():
        data = experiments[name]
        shown_scores = data["metrics"]["reports/quick/scores.json"]["data"]
        assert shown_scores == scores
        for key in ("test_mean_return", "test_iqm_return", "test_ci95_low", "test_ci95_high", "validation_mean_return"):
            assert isinstance(shown_scores[key], float | int) and not isinstance(shown_scores[key], bool), key
    params = {name: experiments[name]["params"]["params.yaml"]["data"] for name in repo["experiments"]}
    assert params["lr-high"]["algo"]["lr"] == 0.003 and params["lr-high"]["env"]["num_envs"] == 16
    assert params["few-envs"]["algo"]["lr"] == 0.001 and params["few-envs"]["env"]["num_envs"] == 8


@pytest.mark.slow
def test_dvc_plots_diff_draws_both_experiments_learning_curves(repo: dict) -> None:
    root: Path = repo["root"]
    result = dvc("plots", "diff", "lr-high", "few-envs", "--json", cwd=root)
    curve = json.loads(result.stdout)["data"]["runs/quick/dvclive/plots/metrics/eval/mean_return.tsv"]
    revisions = {point["rev"] for entry in curve for point in entry["content"]["data"]["values"]}
    assert revisions == {"lr-high", "few-envs"}, revisions


@pytest.mark.slow
def test_dvc_exp_apply_restores_an_experiment_s_model_and_scores(repo: dict) -> None:
    root: Path = repo["root"]
    dvc("exp", "apply", "lr-high", cwd=root)
    assert read_json(outputs(root, "quick").scores) == repo["experiments"]["lr-high"]
    assert yaml.safe_load((root / "params.yaml").read_text())["algo"]["lr"] == 0.003
    assert "Data and pipelines are up to date" in dvc("status", cwd=root).stdout


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
    result = run_in_process(["train", "--params", "offline.yaml", "--set", "name=pulled"], root, limit=300)
    assert result.returncode == 0 and "training bc on" in result.stderr, result


@pytest.mark.slow
def test_training_in_a_fresh_git_repository_without_commits_logs_its_metrics(project: Path) -> None:
    """dvclive 3.49 raises on `git init` without a commit; the run must not fail for that. One PPO rollout (16 envs x
    32 steps) and its evaluation: dvclive logs at both."""
    from conftest import QUICK, sets

    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    one_rollout = [*QUICK, "train.max_steps=512", "train.eval_every=512"]
    result = run_in_process(["train", *sets(one_rollout)], project, limit=300)
    assert result.returncode == 0, result
    assert "no commit yet?" in result.stderr
    metrics = json.loads((project / "runs" / "quick" / "dvclive" / "metrics.json").read_text())
    assert metrics["step"] == 512
