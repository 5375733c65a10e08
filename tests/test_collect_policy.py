"""``collect.policy`` left null follows a run (issue 38): an offline branch (``base: params.yaml``) rolls out the base
run's selected model, ``models/<base's name>/policy.pt``, so renaming that run needs no other edit; a file without a
base rolls out its own run's model, except an offline run, which is refused in one line. dvc.yaml's collect stage
depends on the same model (the generator's output; no DVC run needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_support import assert_refused, run_in_process
from conftest import PROJECT

from rlcore.common.errors import ConfigError
from rlcore.params import load_params
from rlcore.project.pipeline_file import pipeline_yaml

OFFLINE_ALONE = {"name": "bc-alone", "env": {"id": "CartPole-v1"}, "algo": {"name": "bc"}}
"""An offline run whose file has no base: nothing to roll out but what it names."""


def offline_project(root: Path, base_name: str) -> Path:
    """This repository's params.yaml (its run renamed ``base_name``) and offline.yaml, as they are otherwise."""
    tree = yaml.safe_load((PROJECT / "params.yaml").read_text())
    (root / "params.yaml").write_text(yaml.safe_dump({**tree, "name": base_name}, sort_keys=False))
    (root / "offline.yaml").write_text((PROJECT / "offline.yaml").read_text())
    return root


def collect_stage_of(text: str) -> dict:
    return yaml.safe_load(text)["stages"]["collect"]


def test_offline_branch_rolls_out_the_renamed_base_run_s_selected_model(tmp_path: Path) -> None:
    offline_project(tmp_path, "reach")
    assert load_params(tmp_path / "offline.yaml").collect.policy == "models/reach/policy.pt"
    # the offline run's own name is not the one followed
    assert load_params(tmp_path / "offline.yaml", ["name=other"]).collect.policy == "models/reach/policy.pt"


def test_a_file_without_base_rolls_out_its_own_run_s_selected_model(tmp_path: Path) -> None:
    assert load_params(PROJECT / "params.yaml", ["name=quick"]).collect.policy == "models/quick/policy.pt"


@pytest.mark.parametrize("policy", ["random", "checkpoints/step_1.pt"])
def test_an_explicit_collect_policy_is_kept(tmp_path: Path, policy: str) -> None:
    offline_project(tmp_path, "reach")
    assert load_params(tmp_path / "offline.yaml", [f"collect.policy={policy}"]).collect.policy == policy


def test_an_offline_run_without_base_is_refused_at_collect_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "alone.yaml").write_text(yaml.safe_dump(OFFLINE_ALONE))
    assert load_params(tmp_path / "alone.yaml").collect.policy is None  # train, evaluate... do not need it
    outcome = run_in_process(["collect", "--params", "alone.yaml"], tmp_path)
    assert_refused(outcome, "collect.policy: not set", "set collect.policy to the model to roll out", "base:")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["alone.yaml"]


def test_dvc_yaml_s_collect_stage_depends_on_params_yaml_s_run_by_name() -> None:
    """params.yaml's run is ``${name}`` in dvc.yaml: DVC fills it in, so ``dvc exp run -S name=...`` and a renamed
    run move the dependency with them (the generator's output for this repository)."""
    assert collect_stage_of(pipeline_yaml(PROJECT))["deps"] == ["models/${name}/policy.pt"]


def test_dvc_yaml_s_collect_stage_depends_on_a_renamed_base_file_s_run(tmp_path: Path) -> None:
    offline_project(tmp_path, "reach")
    tree = yaml.safe_load((tmp_path / "params.yaml").read_text())
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "online.yaml").write_text(yaml.safe_dump({**tree, "name": "online-reach"}))
    text = (tmp_path / "offline.yaml").read_text().replace("base: params.yaml", "base: configs/online.yaml")
    (tmp_path / "offline.yaml").write_text(text)
    assert collect_stage_of(pipeline_yaml(tmp_path))["deps"] == ["models/online-reach/policy.pt"]
    assert load_params(tmp_path / "offline.yaml").collect.policy == "models/online-reach/policy.pt"


def test_dvc_yaml_of_an_offline_file_without_base_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text((PROJECT / "params.yaml").read_text())
    (tmp_path / "offline.yaml").write_text(yaml.safe_dump(OFFLINE_ALONE))
    with pytest.raises(ConfigError, match=r"^offline.yaml: collect.policy: not set") as refused:
        pipeline_yaml(tmp_path)
    assert "\n" not in str(refused.value)
