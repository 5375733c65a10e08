"""Bad input, as a user meets it through the real ``rlcore`` command.

The contract for every user error: exit status 2, no traceback, and exactly one line on stderr,
``error: ...``, that names the key or file and says what was expected. And a failed command
never overwrites good output: the checkpoints, the selected model, the reports and the export
stay byte for byte what they were.

The commands run in this process (``cli_support.run_in_process``: the console script's entry point, its stdout and
stderr captured, process-wide state put back), which spares each test the ~2 s start-up of a real process. The
Prefect refusals still run the real ``rlcore`` executable: Prefect reads ``PREFECT_API_URL`` once per process, and
they keep the console script itself (exit status and stderr of a real process) covered.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import torch
from cli_support import Outcome, run_in_process
from conftest import PROJECT, QUICK, one_line_error, rlcore, sets

CHECKPOINTS = Path("runs/quick/checkpoints")
OUTPUT_DIRS = ("runs", "models", "reports", "export")
COMMAND_SECONDS = 600
"""Time limit of one command (``conftest.rlcore``'s): some of these train, evaluate or export before they fail."""


def in_process(*args: str, cwd: Path) -> Outcome:
    """``rlcore ARGS`` in ``cwd``, run in this process; read the result as that of the real command."""
    return run_in_process(list(args), cwd, limit=COMMAND_SECONDS)


def outputs(root: Path) -> dict[str, str]:
    """sha256 of every file (hidden ones included) under the pipeline's output folders."""
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for folder in OUTPUT_DIRS
        for path in sorted((root / folder).rglob("*"))
        if path.is_file()
    }


def truncate_to_half(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size // 2)


@pytest.fixture(scope="module")
def pipeline_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One project through train -> evaluate -> select -> export (QUICK); tests copy it, never change it."""
    root = tmp_path_factory.mktemp("pipeline")
    for name in ("params.yaml", "dvc.yaml", ".dvcignore", "prefect.toml"):
        shutil.copy(PROJECT / name, root / name)
    for stage in ("train", "evaluate", "select", "export"):
        outcome = in_process(stage, *sets(QUICK), cwd=root)
        assert outcome.returncode == 0, outcome
    assert len(list((root / CHECKPOINTS).glob("step_*.pt"))) == 4
    return root


@pytest.fixture
def finished(pipeline_project: Path, tmp_path: Path) -> Path:
    """A private copy of the finished pipeline project."""
    return shutil.copytree(pipeline_project, tmp_path / "project")


def latest_checkpoint(root: Path) -> Path:
    return sorted((root / CHECKPOINTS).glob("step_*.pt"))[-1]


# --- params: keys, types, values -------------------------------------------------------------


def test_unknown_params_key_suggests_the_closest_key(project: Path) -> None:
    params = project / "params.yaml"
    text = params.read_text()
    assert text.count("\n  lr: ") == 1
    params.write_text(text.replace("\n  lr: ", "\n  lrr: "))
    result = in_process("train", cwd=project)
    one_line_error(result, "params.yaml", "unknown key 'algo.lrr'", "did you mean 'algo.lr'")


def test_a_key_of_other_algorithms_names_the_algorithms_that_take_it(project: Path) -> None:
    result = in_process(
        "train", "--params", str(PROJECT / "configs" / "dqn-cartpole.yaml"),
        "--set", "algo.reward_signals={rnd: {strength: 0.1}}", cwd=project,
    )  # fmt: skip
    one_line_error(result, "algo.reward_signals: not a key of dqn (it belongs to a2c, ppo)")


def test_misspelt_section_suggests_the_section(project: Path) -> None:
    params = project / "params.yaml"
    text = params.read_text()
    assert text.count("\ntrain:") == 1
    params.write_text(text.replace("\ntrain:", "\ntrian:"))
    result = in_process("train", cwd=project)
    one_line_error(result, "params.yaml", "unknown key 'trian'", "did you mean 'train'")


def test_wrong_type_names_the_key_and_the_value(project: Path) -> None:
    result = in_process("train", "--set", "train.max_steps=abc", cwd=project)
    one_line_error(result, "train.max_steps", "integer", "'abc'")


def test_negative_learning_rate_says_it_must_be_positive(project: Path) -> None:
    result = in_process("train", "--set", "algo.lr=-0.1", cwd=project)
    one_line_error(result, "algo.lr:", "must be > 0", "-0.1")


def test_unknown_env_id_suggests_a_registered_one(project: Path) -> None:
    result = in_process("train", "--set", "env.id=CartPol-v1", cwd=project)
    one_line_error(result, "env.id", "'CartPol-v1'", "did you mean 'CartPole-v1'")


def test_a_wrapper_named_by_its_module_before_the_concept_folders_names_the_new_path(project: Path) -> None:
    wrapper = "env.wrappers=[{wrapper: rlcore.partial_observation.KeepObservations, kwargs: {indices: [0]}}]"
    result = in_process("train", "--set", wrapper, cwd=project)
    moved = "rlcore.partial_observation moved to rlcore.envs.partial_observation"
    one_line_error(result, "env.wrappers", moved, "write rlcore.envs.partial_observation.KeepObservations")


def test_unknown_algorithm_lists_the_known_ones(project: Path) -> None:
    from rlcore.registry import registered_algorithms

    result = in_process("train", "--set", "algo.name=ppx", cwd=project)
    one_line_error(result, "algo.name", "unknown algorithm 'ppx'", f"known: {', '.join(registered_algorithms())}")


def test_missing_params_file_is_named(project: Path) -> None:
    result = in_process("train", "--params", "nope.yaml", cwd=project)
    one_line_error(result, "nope.yaml", "params file not found")


def test_params_file_that_is_not_yaml_is_named_with_the_line(project: Path) -> None:
    (project / "broken.yaml").write_text("seed: 0\nalgo: [1, 2\n")
    result = in_process("train", "--params", "broken.yaml", cwd=project)
    one_line_error(result, "broken.yaml", "not valid YAML", "(line ")


def test_params_file_that_is_not_a_mapping_is_named(project: Path) -> None:
    (project / "list.yaml").write_text("- seed\n- algo\n")
    result = in_process("train", "--params", "list.yaml", cwd=project)
    one_line_error(result, "list.yaml", "expected a mapping", "got list")


@pytest.mark.parametrize("item", ["algo.lr", pytest.param("=0.1", marks=pytest.mark.slow)])
def test_set_without_key_and_equals_sign_shows_the_expected_form(project: Path, item: str) -> None:
    result = in_process("train", "--set", item, cwd=project)
    one_line_error(result, f"--set {item!r}", "expected KEY=VALUE")


def test_set_below_a_value_says_it_is_not_a_section(project: Path) -> None:
    result = in_process("train", "--set", "env.id.version=2", cwd=project)
    one_line_error(result, "--set env.id.version", "env.id is a value, not a section")


# --- checkpoints ----------------------------------------------------------------------------


@pytest.mark.slow
def test_evaluate_names_a_truncated_checkpoint_and_keeps_the_evaluations(finished: Path) -> None:
    truncated = latest_checkpoint(finished)
    truncate_to_half(truncated)
    before = outputs(finished)
    # -q: evaluate logs one line per checkpoint it evaluated before reaching the broken one.
    result = in_process("-q", "evaluate", *sets(QUICK), cwd=finished)
    one_line_error(result, f"{CHECKPOINTS / truncated.name}:", "truncated or corrupt")
    assert outputs(finished) == before


@pytest.mark.slow
def test_resume_from_a_truncated_checkpoint_names_it_and_keeps_the_others(finished: Path) -> None:
    truncated = latest_checkpoint(finished)
    truncate_to_half(truncated)
    before = outputs(finished)
    assert len([key for key in before if key.startswith(f"{CHECKPOINTS.as_posix()}/step_")]) == 4
    resume_from = (CHECKPOINTS / truncated.name).as_posix()
    result = in_process("train", *sets(QUICK), "--resume-from", resume_from, cwd=finished)
    one_line_error(result, f"{resume_from}:", "truncated or corrupt")
    assert outputs(finished) == before


@pytest.mark.slow
def test_resuming_an_interrupted_run_falls_back_past_its_truncated_latest_checkpoint(finished: Path) -> None:
    (finished / "runs/quick/train_summary.json").unlink()  # as if training had been killed
    truncated = latest_checkpoint(finished)
    truncate_to_half(truncated)
    kept = truncated.read_bytes()
    earlier = sorted(truncated.parent.glob("step_*.pt"))[-2]
    result = in_process("train", *sets(QUICK), cwd=finished)
    assert result.returncode == 0, result.stderr
    # Said, naming the file; resumed from the newest readable checkpoint; the damaged file kept aside.
    assert f"{truncated.name}: not a readable checkpoint" in result.stderr
    assert f"from {earlier.name}" in result.stderr
    assert truncated.with_name(truncated.name + ".corrupt").read_bytes() == kept
    assert (finished / "runs/quick/train_summary.json").is_file()


@pytest.mark.slow
def test_resume_from_a_missing_checkpoint_is_named(finished: Path) -> None:
    before = outputs(finished)
    result = in_process("train", *sets(QUICK), "--resume-from", "elsewhere/step.pt", cwd=finished)
    one_line_error(result, "elsewhere/step.pt:", "checkpoint not found")
    assert outputs(finished) == before


@pytest.mark.slow
def test_resume_from_another_algorithms_checkpoint_is_refused(finished: Path) -> None:
    payload = torch.load(latest_checkpoint(finished), map_location="cpu", weights_only=True)
    assert payload["algo"] == "ppo"
    payload["algo"] = "dqn"
    torch.save(payload, finished / "from_dqn.pt")
    before = outputs(finished)
    result = in_process("train", *sets(QUICK), "--resume-from", "from_dqn.pt", cwd=finished)
    one_line_error(result, "from_dqn.pt:", "written by algorithm 'dqn'", "params say 'ppo'")
    # Resuming from outside the run's folder replaces the run: a refused checkpoint must not.
    assert outputs(finished) == before


@pytest.mark.slow
def test_env_kwargs_the_env_refuses_keep_the_finished_run(finished: Path) -> None:
    before = outputs(finished)
    result = in_process("train", *sets([*QUICK, "env.kwargs.no_such_arg=1"]), cwd=finished)
    one_line_error(result, "env.kwargs", "CartPole-v1", "no_such_arg")
    assert outputs(finished) == before


# --- no good output overwritten -------------------------------------------------------------


@pytest.mark.slow
def test_bad_export_param_keeps_the_export(finished: Path) -> None:
    before = outputs(finished)
    assert {"export/quick/policy.onnx", "export/quick/model_card.json", "reports/quick/metrics.json"} <= before.keys()
    result = in_process("export", *sets([*QUICK, "export.parity_atol=-1"]), cwd=finished)
    one_line_error(result, "export.parity_atol", "must be > 0", "-1")
    assert outputs(finished) == before


@pytest.mark.slow
def test_bad_select_metric_keeps_the_selected_model_and_metrics(finished: Path) -> None:
    before = outputs(finished)
    assert {"models/quick/policy.pt", "reports/quick/metrics.json", "export/quick/policy.onnx"} <= before.keys()
    result = in_process("select", *sets([*QUICK, "select.metric=bogus"]), cwd=finished)
    one_line_error(result, "select.metric", "'bogus'", "'mean_return'")
    assert outputs(finished) == before


@pytest.mark.slow
def test_export_names_a_truncated_best_policy_and_keeps_the_export(finished: Path) -> None:
    truncate_to_half(finished / "models/quick/policy.pt")
    before = outputs(finished)
    assert {"export/quick/policy.onnx", "export/quick/policy.pt2", "export/quick/model_card.json"} <= before.keys()
    result = in_process("export", *sets(QUICK), cwd=finished)
    one_line_error(result, "models/quick/policy.pt:", "truncated or corrupt")
    assert outputs(finished) == before


@pytest.mark.slow
def test_failed_parity_check_keeps_the_previous_export(finished: Path) -> None:
    before = outputs(finished)
    # ONNX Runtime and torch differ by ~1e-7 in float32: no real export meets this tolerance.
    tolerance = ["export.parity_atol=1e-30", "export.parity_rtol=0"]
    result = in_process("export", *sets([*QUICK, *tolerance]), cwd=finished)
    one_line_error(result, "policy.onnx", "exceeds export.parity_atol 1e-30 + export.parity_rtol 0")
    # Byte-identical, and no staging folder left behind in export/.
    assert outputs(finished) == before
    export = finished / "export" / "quick"
    assert sorted(p.name for p in export.iterdir()) == ["model_card.json", "policy.onnx", "policy.pt2"]


# --- off-policy params and algorithm/env fit ----------------------------------------------------


def test_replay_buffer_smaller_than_the_batch_is_refused(project: Path) -> None:
    result = in_process(
        "train",
        "--params",
        str(PROJECT / "configs" / "dqn-cartpole.yaml"),
        *sets(["algo.buffer_size=32", "algo.batch_size=64"]),
        cwd=project,
    )
    one_line_error(result, "algo.buffer_size", ">= algo.batch_size (64)", "got 32")


def test_batch_size_of_zero_is_refused(project: Path) -> None:
    result = in_process(
        "train",
        "--params",
        str(PROJECT / "configs" / "sac-pendulum.yaml"),
        *sets(["algo.batch_size=0"]),
        cwd=project,
    )
    one_line_error(result, "algo.batch_size", "must be >= 1", "got 0")


@pytest.mark.parametrize(
    ("tau", "expected"),
    [("0", "must be > 0"), ("1.5", "must be <= 1"), pytest.param("-0.1", "must be > 0", marks=pytest.mark.slow)],
)
def test_tau_outside_zero_one_is_refused(project: Path, tau: str, expected: str) -> None:
    result = in_process(
        "train",
        "--params",
        str(PROJECT / "configs" / "sac-pendulum.yaml"),
        *sets([f"algo.tau={tau}"]),
        cwd=project,
    )
    one_line_error(result, "algo.tau", expected, f"got {tau}")


def test_dqn_on_a_box_action_space_is_refused_before_any_output(project: Path) -> None:
    result = in_process(
        "train",
        "--params",
        str(PROJECT / "configs" / "dqn-cartpole.yaml"),
        *sets(["env.id=Pendulum-v1", "env.num_envs=1"]),
        cwd=project,
    )
    one_line_error(result, "algo.name", "dqn needs a Discrete action space", "Pendulum-v1", "Box")
    assert not (project / "runs").exists()


@pytest.mark.slow
def test_algorithm_mismatch_keeps_a_finished_run(finished: Path) -> None:
    before = outputs(finished)
    dqn = str(PROJECT / "configs" / "dqn-cartpole.yaml")
    # --replace: past the refusal to replace a finished run trained with other params, to the algorithm's own check.
    result = in_process("train", "--replace", "--params", dqn, *sets([*QUICK, "env.id=Pendulum-v1"]), cwd=finished)
    one_line_error(result, "dqn needs a Discrete action space")
    assert outputs(finished) == before


# --- Prefect task runners -------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    ["pipeline", pytest.param("collect-flow", marks=pytest.mark.slow), pytest.param("sweep", marks=pytest.mark.slow)],
)
def test_dask_without_a_prefect_server_is_refused_before_any_flow_starts(project: Path, command: str) -> None:
    overrides = ["deploy.task_runner=dask", "collect.policy=random"]
    result = rlcore(command, *sets(overrides), cwd=project, check=False, env={"PREFECT_API_URL": ""})
    one_line_error(result, "deploy.task_runner: dask needs a running Prefect server: set PREFECT_API_URL")
    assert not (project / "runs").exists() and not (project / "data").exists() and not (project / ".optuna").exists()


def test_deploy_serve_without_a_prefect_server_is_refused(project: Path) -> None:
    result = rlcore("deploy", "serve", cwd=project, check=False, env={"PREFECT_API_URL": ""})
    one_line_error(result, "deploy serve needs a running Prefect server", "set PREFECT_API_URL")


def test_a_relative_output_path_that_climbs_out_of_the_project_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "params.yaml").write_text((PROJECT / "params.yaml").read_text())
    result = in_process(
        "collect", *sets(["collect.policy=random", "collect.output=../elsewhere/x.parquet"]), cwd=project
    )
    one_line_error(result, "collect.output:", "points outside the project")
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("preset", sorted(path.name for path in (PROJECT / "configs").glob("*.yaml")))
def test_every_preset_in_configs_is_valid_params(preset: str) -> None:
    """A preset edited by hand (a renamed key, a value out of range) fails here, not in a user's first run."""
    from rlcore.params import load_params

    params = load_params(PROJECT / "configs" / preset)
    assert params.name == preset.removesuffix(".yaml")


# --- files that are not what a key names --------------------------------------------------------------------------


def test_a_pickle_torch_refuses_is_refused_without_torchs_advice_to_load_it_unsafely(tmp_path: Path) -> None:
    """torch's message for such a file says to retry with ``weights_only=False``, which runs whatever the file holds."""
    import fractions

    from rlcore.common.checkpoints import load_checkpoint
    from rlcore.common.errors import CheckpointError

    path = tmp_path / "foreign.pt"
    torch.save({"value": fractions.Fraction(1, 3)}, path)
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(path)
    message = str(refused.value)
    assert "weights_only" not in message and "\n" not in message
    assert message.startswith(f"{path}: not a readable checkpoint") and "fractions.Fraction" in message


def test_every_path_a_user_gives_is_checked_to_be_a_regular_file(tmp_path: Path) -> None:
    """A device or a pipe is "not a regular file" (it was "not found", or a read that never ends), a folder "is a
    folder", a missing path "not found": one check (``rlcore.common.errors.file_problem``) for every path-taking key."""
    import os

    from rlcore.common.checkpoints import load_checkpoint
    from rlcore.common.errors import RLCoreError, file_problem
    from rlcore.config.reading import read_text_file
    from rlcore.data.reader import read_metadata

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert file_problem(Path("/dev/zero"), "checkpoint") == (
        "not a regular file (a device, a pipe or a socket), so not a checkpoint"
    )
    assert (
        file_problem(fifo, "params file") == "not a regular file (a device, a pipe or a socket), so not a params file"
    )
    assert file_problem(tmp_path, "dataset") == "is a folder, not a dataset"
    assert file_problem(tmp_path / "nope", "dataset") == "dataset not found"
    for read in (load_checkpoint, read_text_file, read_metadata):
        for path in (Path("/dev/zero"), fifo):
            with pytest.raises(RLCoreError, match=r": not a regular file \(a device, a pipe or a socket\), so not a"):
                read(path)
