"""A params file inheriting from another (``base``, issue 38): offline.yaml names what differs from params.yaml and
follows the rest; dvc.yaml lists each key under the file its value comes from, so an env change in params.yaml
re-runs the offline branch and a key offline.yaml sets itself ignores params.yaml's."""

from __future__ import annotations

from pathlib import Path

import yaml
from conftest import PROJECT

from rlcore.config.inheritance import merge, own_and_inherited
from rlcore.params import load_params
from rlcore.project.pipeline_file import pipeline_yaml


def write(path: Path, tree: dict) -> Path:
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def test_offline_yaml_follows_params_yaml_but_for_its_own_keys(tmp_path: Path) -> None:
    for name in ("params.yaml", "offline.yaml"):
        (tmp_path / name).write_text((PROJECT / name).read_text())
    tree = yaml.safe_load((tmp_path / "params.yaml").read_text())
    tree["env"]["kwargs"] = {"sutton_barto_reward": True}  # one key change in params.yaml...
    tree["eval"]["episodes"] = 12
    write(tmp_path / "params.yaml", tree)
    offline = load_params(tmp_path / "offline.yaml")
    assert offline.env.kwargs == {"sutton_barto_reward": True}  # ...and the offline branch follows it
    assert offline.env.num_envs == 1 and offline.eval.episodes == 10  # what offline.yaml sets itself stays
    assert offline.algo.name == "bc" and not hasattr(offline.algo, "n_steps")  # another algorithm: replaced whole
    assert "base" not in offline.to_dict()


def test_dvc_yaml_lists_each_offline_key_under_the_file_it_comes_from() -> None:
    stages = yaml.safe_load(pipeline_yaml(PROJECT))["stages"]
    listed = stages["evaluate_offline"]["params"]
    own = next(entry["offline.yaml"] for entry in listed if isinstance(entry, dict))
    inherited = [entry for entry in listed if isinstance(entry, str)]
    assert "eval.episodes" in own and "eval.episodes" not in inherited
    assert {"env.id", "env.kwargs", "eval.test_episodes"} <= set(inherited)
    assert "env.num_envs" in own and "env.num_envs" not in inherited


def test_merge_and_where_each_key_comes_from() -> None:
    base = {"env": {"id": "A", "kwargs": {"x": 1}}, "algo": {"name": "ppo", "lr": 1}, "tags": [1, 2]}
    own = {"env": {"kwargs": {"y": 2}}, "algo": {"name": "bc"}, "tags": [3]}
    assert merge(base, own) == {"env": {"id": "A", "kwargs": {"x": 1, "y": 2}}, "algo": {"name": "bc"}, "tags": [3]}
    assert own_and_inherited("env", own, base) == (["env.kwargs.y"], ["env.kwargs.x", "env.id"])
    assert own_and_inherited("algo", own, base) == (["algo"], [])
    assert own_and_inherited("seed", own, base) == ([], [])
