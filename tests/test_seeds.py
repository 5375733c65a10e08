"""``train.seeds`` through the pipeline: one run per seed in ``runs/<name>/seed_<k>/``, each (one after another)
the run with ``seed: k`` (same evaluations, bitwise-equal weights), evaluated, selected per seed, aggregated over
seeds, the best seed exported; a killed run resumes the seed it was training and keeps the finished ones; bad seed
lists are refused in one line. Batched seeds, member k the run with ``seed: k`` for every algorithm family:
``tests/test_seeds_contract.py``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_trees_match, outputs

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.common.files import read_json
from tests.cli_support import assert_refused, run_in_process
from tests.conftest import sets

TINY = [
    "name=seeds",
    "train.max_steps=1024",
    "train.eval_every=512",
    "train.eval_episodes=2",
    "train.target_return=null",
    "train.progress_bar=off",
    "eval.episodes=2",
    "eval.test_episodes=4",
    "export.parity_observations=50",
    "train.batch_seeds=false",
]
"""PPO CartPole (params.yaml) at the smallest budget with two checkpoints: 16 envs x 32 steps per rollout; the seeds
one after another, bitwise their one-seed runs (batched seeds: ``tests/test_seeds_contract.py``)."""
SCORES = ("mean_return", "iqm_return", "ci95_low", "ci95_high", "std_return", "min_return", "max_return", "episodes")


def stage(root: Path, name: str, *overrides: str) -> str:
    """Run stage ``name`` of the ``rlcore`` command in ``root``; its log lines (stderr)."""
    outcome = run_in_process([name, *sets([*TINY, *overrides])], root, limit=300)
    assert outcome.returncode == 0, outcome
    (root / f"{name}.log").write_text(outcome.stderr)
    return outcome.stderr


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder``: (size, modification time in ns)."""
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != ".lock"
    }


def scores_of(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: entry[key] for key in ("step", "env_steps", "returns", *SCORES)} for entry in candidates]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project through train, evaluate, select and export with ``train.seeds: [0, 1]``."""
    root = tmp_path_factory.mktemp("seeds")
    for name in ("params.yaml", "dvc.yaml"):
        (root / name).write_text((Path(__file__).parents[1] / name).read_text())
    for name in ("train", "evaluate", "select", "export"):
        stage(root, name, "train.seeds=[0, 1]")
    return root


def checkpoints(run_dir: Path) -> list[Any]:
    return [load_checkpoint(path) for _, path in list_checkpoints(run_dir / "checkpoints")]


def evaluated(candidate: dict[str, Any]) -> dict[str, Any]:
    """An evaluation without what names its run (the folder, the seed, the file's hash: its metadata holds the
    command and ``train.seeds``)."""
    return {key: value for key, value in candidate.items() if key not in ("train_seed", "checkpoint", "sha256")}


def untimed(evaluation: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in evaluation.items() if key != "wall_seconds"}


@pytest.mark.slow
def test_each_seed_is_the_run_with_that_seed(seeded: Path, tmp_path: Path) -> None:
    """Seeds one after another (``train.batch_seeds: false``): seed 1 of ``train.seeds: [0, 1]`` has the evaluations
    of the one-seed run with ``seed: 1`` and bitwise the same checkpoints (weights, optimizer state, RNG states,
    counters). Batched seeds, equal within float rounding for every family: ``tests/test_seeds_contract.py``."""
    (tmp_path / "params.yaml").write_text((seeded / "params.yaml").read_text())
    stage(tmp_path, "train", "seed=1")
    stage(tmp_path, "evaluate", "seed=1")
    single = read_json(outputs(tmp_path).reports / "evaluations.json")
    several = read_json(outputs(seeded).reports / "evaluations.json")
    assert "train_seed" not in single["candidates"][0] and "train_seeds" not in single  # the one-seed format
    assert several["train_seeds"] == [0, 1]
    of_seed_1 = [entry for entry in several["candidates"] if entry["train_seed"] == 1]
    assert [entry["checkpoint"].split("/")[:3] for entry in of_seed_1] == [["runs", "seeds", "seed_1"]] * 2
    assert [evaluated(entry) for entry in of_seed_1] == [evaluated(entry) for entry in single["candidates"]]
    assert scores_of(of_seed_1) == scores_of(single["candidates"])
    ours, theirs = checkpoints(seeded / "runs" / "seeds" / "seed_1"), checkpoints(tmp_path / "runs" / "seeds")
    assert len(ours) == len(theirs) == 2
    assert ours[0].meta["gradient_steps"] > 0, "no update before the first checkpoint: raise its step"
    for mine, single_run in zip(ours, theirs, strict=True):
        where = mine.path.name
        assert_trees_match(mine.tensors, single_run.tensors, where)
        for key in ("numpy_rng", "env_steps", "gradient_steps", "updates"):
            assert_trees_match(mine.meta.get(key), single_run.meta.get(key), f"{where} meta {key}")
        curves = [[untimed(entry) for entry in run.meta["evaluations"]] for run in (mine, single_run)]
        assert_trees_match(*curves, f"{where} meta evaluations")


@pytest.mark.slow
def test_select_reports_every_seed_and_their_aggregate(seeded: Path) -> None:
    run = seeded / "runs" / "seeds"
    for seed in (0, 1):
        assert (run / f"seed_{seed}" / "train_summary.json").is_file()
        assert (run / f"seed_{seed}" / "dvclive" / "plots" / "metrics" / "eval" / "mean_return.tsv").is_file()
    assert not (run / "checkpoints").exists() and not (run / "train_summary.json").exists()
    metrics = read_json(outputs(seeded).metrics)
    selection = read_json(outputs(seeded).selection)
    assert set(metrics["per_seed"]) == {"0", "1"}
    aggregate = metrics["aggregate"]
    assert aggregate["num_runs"] == 2 and aggregate["seeds"] == [0, 1]
    tests = [metrics["per_seed"][seed]["test"]["mean_return"] for seed in ("0", "1")]
    assert aggregate["mean"] == pytest.approx(sum(tests) / 2, rel=1e-12, abs=1e-9)
    low, high = aggregate["iqm_ci95"]
    assert min(tests) <= low <= aggregate["iqm"] <= high <= max(tests)
    # The best seed on validation is exported; the top-level scores are its selected model's.
    best = selection["train_seed"]
    assert metrics["train_seed"] == best
    validations = {int(seed): record["validation"]["value"] for seed, record in metrics["per_seed"].items()}
    assert validations[best] == max(validations.values())
    assert selection["checkpoint"].startswith(f"runs/seeds/seed_{best}/checkpoints/")
    assert metrics["mean_return"] == metrics["per_seed"][str(best)]["test"]["mean_return"]
    # Every evaluate and select line about a checkpoint names its seed.
    for name, start in (("evaluate", "evaluated "), ("select", "test score of ")):
        lines = [line for line in (seeded / f"{name}.log").read_text().splitlines() if line.startswith(start)]
        assert lines and all(line.startswith((f"{start}seed 0 ", f"{start}seed 1 ")) for line in lines), lines
    report = (outputs(seeded).report).read_text()
    assert "seed_curves.png" in report and "performance_profile.png" in report
    # The aggregate over seeds leads the report; the selected seed's own test score follows it.
    assert report.index("**Test score over 2 seeds: IQM") < report.index("**Test score:")
    assert f"## The selected seed: {best}" in report
    for picture in ("seed_curves.png", "performance_profile.png", "learning_curve.png"):
        assert (outputs(seeded).reports / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    card = read_json(outputs(seeded).export / "model_card.json")
    assert card["train_seed"] == best and card["aggregate_over_seeds"]["num_runs"] == 2
    assert card["params"]["seed"] == best and card["params"]["train"]["seeds"] is None


@pytest.mark.slow
def test_select_gives_the_probability_of_improvement_over_a_baseline_with_seeds(seeded: Path, tmp_path: Path) -> None:
    """``select.baseline_run`` naming a run of seeds (here a copy of this one, as if selected as run ``base``, its
    test scores lowered by 1000): metrics.json's ``baseline`` has P(X > Y) = 1 over 2 and 2 runs, the report says it."""
    root = tmp_path / "project"
    shutil.copytree(seeded, root, ignore=shutil.ignore_patterns("export"))
    shutil.copytree(root / "runs" / "seeds", root / "runs" / "base")
    record = read_json(outputs(root, "seeds").metrics)
    record["checkpoint"] = record["checkpoint"].replace("runs/seeds/", "runs/base/")
    for entry in record["per_seed"].values():
        entry["test"]["mean_return"] -= 1000.0
    outputs(root, "base").reports.mkdir()
    outputs(root, "base").metrics.write_text(json.dumps(record))
    stage(root, "select", "train.seeds=[0, 1]", "select.baseline_run=base")
    metrics = read_json(outputs(root, "seeds").metrics)
    assert metrics["per_seed"] == read_json(outputs(seeded).metrics)["per_seed"]  # select is repeatable
    baseline = metrics["baseline"]
    assert baseline["run"] == "base" and baseline["scores_from"] == "reports/base/metrics.json"
    assert (baseline["num_runs_x"], baseline["num_runs_y"]) == (2, 2)
    assert baseline["seeds_x"] == baseline["seeds_y"] == [0, 1]
    assert baseline["probability_of_improvement"] == 1.0
    assert baseline["probability_of_improvement_ci95"] == [1.0, 1.0]
    report = (outputs(root, "seeds").report).read_text()
    assert "P(`seeds` > `base`): **1.00**, 95% CI [1.00, 1.00]" in report
    assert "over 2 runs of `seeds` and 2 runs of `base`" in report
    assert (outputs(root, "seeds").reports / "baseline_comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_killed_run_resumes_its_unfinished_seed_and_keeps_the_finished_one(seeded: Path, tmp_path: Path) -> None:
    """Seed 0 finished, seed 1 killed after its first checkpoint: training again leaves seed 0's files as they were
    and finishes seed 1 from its checkpoint (kept as it was; a resumed run is not bitwise the uninterrupted one:
    its envs restart at the checkpoint)."""
    import shutil

    root = tmp_path / "project"
    shutil.copytree(seeded, root, ignore=shutil.ignore_patterns("reports", "models", "export"))
    seed_1 = root / "runs" / "seeds" / "seed_1"
    (seed_1 / "train_summary.json").unlink()
    first, last = [path for _, path in list_checkpoints(seed_1 / "checkpoints")]
    last.unlink()
    finished = snapshot(root / "runs" / "seeds" / "seed_0")
    kept = (first.stat().st_mtime_ns, first.read_bytes())
    outcome = run_in_process(["train", *sets([*TINY, "train.seeds=[0, 1]"])], root, limit=300)
    assert outcome.returncode == 0, outcome
    assert snapshot(root / "runs" / "seeds" / "seed_0") == finished
    assert (first.stat().st_mtime_ns, first.read_bytes()) == kept
    assert read_json(seed_1 / "train_summary.json")["checkpoints"] == [first.name, last.name]
    assert last.is_file()


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        ("[]", ("train.seeds:", "1 to 64 seeds", "got 0")),
        ("[-1]", ("train.seeds:", "[0, 2**32)", "got -1")),
        ("[4294967296]", ("train.seeds:", "[0, 2**32)")),
        ("[0, 1, 0]", ("train.seeds:", "distinct", "got 0 twice")),
        ("[0.5]", ("train.seeds.0:", "integer")),
        ("3", ("train.seeds:", "list")),
        ("[" + ", ".join(str(seed) for seed in range(65)) + "]", ("train.seeds:", "1 to 64 seeds", "got 65")),
    ],
    ids=["none", "negative", "2**32", "duplicate", "non-integer", "a number", "65 seeds"],
)
def test_bad_seed_lists_are_refused_in_one_line_and_write_nothing(value: str, fragments: tuple[str, ...]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "params.yaml").write_text((Path(__file__).parents[1] / "params.yaml").read_text())
        outcome = run_in_process(["train", "--set", f"train.seeds={value}"], root)
        assert_refused(outcome, *fragments)
        assert sorted(os.listdir(root)) == ["params.yaml"]


def test_a_sweep_refuses_train_seeds(tmp_path: Path) -> None:
    """A sweep's trials train ``sweep.seeds``, one run each: ``train.seeds`` is refused in one line, as a key to
    search too."""
    (tmp_path / "params.yaml").write_text((Path(__file__).parents[1] / "params.yaml").read_text())
    space = "sweep.space={algo.lr: {type: float, low: 0.0001, high: 0.001}}"
    outcome = run_in_process(["sweep", "--set", space, "--set", "train.seeds=[0, 1]"], tmp_path)
    assert_refused(outcome, "train.seeds:", "sweep.seeds")
    outcome = run_in_process(
        ["sweep", "--set", "sweep.space={train.seeds: {type: categorical, choices: [[0]]}}"], tmp_path
    )
    assert_refused(outcome, "sweep.space.train.seeds:", "sweep.seeds")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["params.yaml"]


def test_a_seed_of_train_seeds_has_the_fingerprint_of_the_one_seed_run() -> None:
    """What makes a seed's folder resumable by the one-seed run with that seed, and back: ``train.seeds`` is not part
    of the fingerprint (so the runs from before the key existed keep theirs), ``seed`` is."""
    from rlcore.params import load_params
    from rlcore.stages.seeds import seed_params
    from rlcore.trainers.fingerprint import train_fingerprint

    params_file = Path(__file__).parents[1] / "params.yaml"
    several = load_params(params_file, ["train.seeds=[0, 3]"])
    single = load_params(params_file, ["seed=3"])
    assert seed_params(several, 3) == single
    assert train_fingerprint(seed_params(several, 3), {}) == train_fingerprint(single, {})
    assert train_fingerprint(several, {}) == train_fingerprint(load_params(params_file), {})
    assert train_fingerprint(single, {}) != train_fingerprint(load_params(params_file), {})


@pytest.mark.slow
def test_a_killed_process_resumes_the_seed_it_was_training(tmp_path: Path) -> None:
    """``rlcore train`` with ``train.seeds: [0, 1]`` killed (SIGKILL) during seed 1: the next ``rlcore train`` keeps
    seed 0's finished run untouched, resumes seed 1 from its latest checkpoint and finishes it."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import RLCORE

    (tmp_path / "params.yaml").write_text((Path(__file__).parents[1] / "params.yaml").read_text())
    budget = 8192  # seed 1: 6,144 env steps (12 rollouts) between its second checkpoint and its end to be killed in
    overrides = sets(
        [
            "name=killed",
            f"train.max_steps={budget}",
            "train.eval_every=1024",
            "train.eval_episodes=2",
            "train.target_return=null",
            "train.max_wall_seconds=null",
            "train.progress_bar=off",
            "train.seeds=[0, 1]",
            "train.batch_seeds=false",
        ]
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    run = tmp_path / "runs" / "killed"
    child = subprocess.Popen(
        [RLCORE, "train", *overrides], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 240
    while len(list_checkpoints(run / "seed_1" / "checkpoints")) < 2 and child.poll() is None:
        assert time.monotonic() < deadline, "seed 1 wrote no second checkpoint in time"
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert (run / "seed_0" / "train_summary.json").is_file()
    assert not (run / "seed_1" / "train_summary.json").exists(), "killed after seed 1 finished: raise its budget"
    last_step = list_checkpoints(run / "seed_1" / "checkpoints")[-1][0]
    finished = snapshot(run / "seed_0")

    result = subprocess.run(
        [RLCORE, "train", *overrides], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "seed 0: finished" in result.stderr and f"at env step {last_step}" in result.stderr, result.stderr
    assert snapshot(run / "seed_0") == finished
    assert read_json(run / "seed_1" / "train_summary.json")["env_steps"] == budget
