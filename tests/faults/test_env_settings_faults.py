"""Env settings (issue 15) under bad input and SIGKILL:

- bad ``env.parameters``, ``env.curriculum``, ``eval.settings`` and ``select.setting`` are refused by every stage
  that reads them, in one ``error:`` line naming the key (and the env, for a parameter it lacks), exit status 2,
  nothing written or removed (a finished run stays byte for byte what it was);
- a curriculum run SIGKILLed in its second lesson resumes, re-run, in its second lesson (its start step kept), and
  its lesson curve has no missing or doubled rows.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from cli_support import assert_refused, run_in_process
from conftest import PROJECT, RLCORE, outputs, preset_text

from rlcore.common.checkpoints import load_checkpoint

from .run_support import checkpoint_name, kill, read_json, read_tsv, start, wait_until, write_params

BAD = [
    ("env.parameters={lenght: 0.5}", ("env.parameters.lenght", "CartPole-v1 has no parameter 'lenght'", "'length'")),
    (
        "env.parameters={masscart: {sampler: uniform, low: 2.0, high: 0.5}}",
        ("env.parameters.masscart", "low must be <= high"),
    ),
    (
        "env.parameters={force_mag: {sampler: gaussian, mean: 10.0, std: -1.0}}",
        ("env.parameters.force_mag", "std", "greater than or equal to 0", "-1"),
    ),
    ("env.parameters={total_mass: 2.0}", ("env.parameters.total_mass", "computes 'total_mass'")),
    (
        "env.curriculum=[{name: a, parameters: {length: 0.25}, until: {measure: progress, threshold: 0.5}}, "
        "{name: b, until: {measure: progress, threshold: 0.9}}]",
        ("env.curriculum.1.until", "last lesson", "has no until"),
    ),
    (
        "env.curriculum=[{name: a, until: {measure: eval_score, threshold: 100}}, {name: b}]",
        ("env.curriculum.0.until.measure", "'eval_return' or 'progress'", "eval_score"),
    ),
    ("env.curriculum=[{name: a, parameters: {lenght: 0.25}}]", ("env.curriculum.0.parameters.lenght", "CartPole-v1")),
    (
        "eval.settings=[{name: x, parameters: {gravity_zz: 1.0}}]",
        ("eval.settings.0.parameters.gravity_zz", "CartPole-v1"),
    ),
    ("select.setting=long-pole", ("select.setting", "'long-pole' is not one of eval.settings")),
    # Values outside a known env's valid range (issue 26, item 4): broken physics, refused at load.
    ("env.parameters={length: 0}", ("env.parameters.length", "CartPole-v1's 'length' must be > 0, got 0")),
    ("env.parameters={masscart: -0.1}", ("env.parameters.masscart", "must be > 0, got -0.1")),
    (
        "env.parameters={masspole: {sampler: uniform, low: -0.5, high: 1.0}}",
        ("env.parameters.masspole", "must be > 0; a uniform sampler from -0.5 to 1"),
    ),
    (
        "env.parameters={length: {sampler: gaussian, mean: 0.5, std: 0.1}}",
        ("env.parameters.length", "must be > 0; a gaussian sampler is unclipped"),
    ),
    (
        "env.curriculum=[{name: a, parameters: {length: 1.0}, until: {measure: progress, threshold: 0.5}}, "
        "{name: b, parameters: {length: 0}}]",
        ("env.curriculum.1.parameters.length", "must be > 0, got 0"),
    ),
    (
        "eval.settings=[{name: neg, parameters: {masscart: -0.1}}]",
        ("eval.settings.0.parameters.masscart", "CartPole-v1's 'masscart' must be > 0, got -0.1"),
    ),
]


def _finished_project(root: Path) -> Path:
    """params.yaml and a finished run of its name (checkpoints, summary, curves) a refused command must not touch."""
    (root / "params.yaml").write_text((PROJECT / "params.yaml").read_text())
    run = root / "runs" / "ppo-cartpole"
    (run / "checkpoints").mkdir(parents=True)
    (run / "dvclive").mkdir()
    (run / "checkpoints" / checkpoint_name(4096)).write_bytes(os.urandom(256))
    (run / "train_summary.json").write_text(json.dumps({"env_steps": 4096}))
    outputs(root).reports.mkdir(parents=True)
    (outputs(root).evaluations).write_text("{}")
    return root


def _snapshot(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "/"
        for path in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("override,fragments", BAD, ids=[fragments[0] for _, fragments in BAD])
@pytest.mark.parametrize("stage", ["train", "evaluate", "select"])
def test_bad_env_settings_are_refused_in_one_line_and_nothing_is_written(
    tmp_path: Path, stage: str, override: str, fragments: tuple[str, ...]
) -> None:
    root = _finished_project(tmp_path)
    before = _snapshot(root)
    outcome = run_in_process([stage, "--set", override], root)
    assert_refused(outcome, *fragments)
    assert _snapshot(root) == before


@pytest.mark.parametrize("preset", ["configs/impala-cartpole.yaml", "offline.yaml"])
def test_a_curriculum_is_refused_where_the_trainer_has_no_envs_of_its_own(tmp_path: Path, preset: str) -> None:
    root = _finished_project(tmp_path)
    (root / Path(preset).name).write_text(preset_text(preset))
    before = _snapshot(root)
    outcome = run_in_process(["train", "--params", Path(preset).name, "--set", "env.curriculum=[{name: only}]"], root)
    assert_refused(outcome, "env.curriculum:", "curricula work with on-policy and off-policy algorithms")
    assert _snapshot(root) == before


CURRICULUM = {
    "name": "curriculum",
    "train": {
        "max_steps": 16384,
        "eval_every": 2048,
        "log_every": 2048,
        "eval_episodes": 3,
        "target_return": None,
        "progress_bar": "off",
    },
    "env": {
        "curriculum": [
            {"name": "long-pole", "parameters": {"length": 1.0}, "until": {"measure": "progress", "threshold": 0.25}},
            {"name": "default"},
        ]
    },
}
"""Lesson 2 starts at the evaluation of step 4,096 (a quarter of the budget): checkpoints from 4,096 on hold it."""


@pytest.mark.slow
def test_a_run_killed_in_its_second_lesson_resumes_in_its_second_lesson(tmp_path: Path) -> None:
    write_params(PROJECT / "params.yaml", tmp_path / "params.yaml", CURRICULUM)
    run = tmp_path / "runs" / "curriculum"
    proc = start([RLCORE, "train"], tmp_path, tmp_path / "first.log")
    killed_at = run / "checkpoints" / checkpoint_name(8192)
    assert wait_until(killed_at.exists, proc, timeout=300), (tmp_path / "first.log").read_text()
    assert kill(proc), "the run finished before the kill"
    assert not (run / "train_summary.json").exists()
    state = load_checkpoint(killed_at).meta["curriculum"]
    assert (state["lesson"], state["lesson_start"]) == ("default", 4096)

    proc = start([RLCORE, "train"], tmp_path, tmp_path / "second.log")
    assert proc.wait(timeout=300) == 0, (tmp_path / "second.log").read_text()
    log = (tmp_path / "second.log").read_text()
    assert "resuming" in log and "in lesson 'default' (started at step 4096)" in log, log
    assert "lesson 'long-pole' complete" not in log  # the first lesson was not run again
    summary = read_json(run / "train_summary.json")
    assert summary["curriculum"]["started"] == [
        {"lesson": "long-pole", "index": 0, "step": 0},
        {"lesson": "default", "index": 1, "step": 4096},
    ]
    assert [(row["env_steps"], row["lesson"]) for row in summary["evaluations"]] == [
        (step, "long-pole" if step <= 4096 else "default") for step in range(2048, 16385, 2048)
    ]
    lesson_curve = read_tsv(run / "dvclive" / "plots" / "metrics" / "curriculum" / "lesson.tsv")
    assert [step for step, _ in lesson_curve] == list(range(2048, 16385, 2048))  # none missing, none doubled
