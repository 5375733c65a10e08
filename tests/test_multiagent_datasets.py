"""Datasets from PettingZoo Parallel envs (issue 29): one row per agent step with an ``agent`` column, each agent's
part of an episode an episode of its own (``rlcore.data.schema``), the agents in the metadata; ``dataset.agents``
trains an offline algorithm on some agents' transitions, and is refused in one line where it cannot apply."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_multiagent import TINY

from rlcore.config.sections import Params
from rlcore.data.collection import CollectionPlan, collect_dataset
from rlcore.data.reader import load_dataset, read_metadata
from rlcore.data.schema import DatasetError
from rlcore.data.stream import RowGroupStream
from rlcore.envs.config import EnvConfig
from rlcore.envs.vector import make_vector_env
from rlcore.params import validate_params
from rlcore.stages.collect import collect_shard, collect_stage
from rlcore.trainers import train
from rlcore.trainers.sources import DatasetSource

ENV = EnvConfig(id=TINY)


def collect(path: Path, num_envs: int, steps: int | None = None, episodes: int | None = None, seed: int = 3) -> Path:
    plan = CollectionPlan(num_envs, steps, episodes, 0.0, False, seed, row_group_size=4)
    collect_dataset(path, ENV, None, {"kind": "random"}, plan)
    return path


def spaces() -> tuple:
    env = make_vector_env(ENV, 1)
    found = env.single_observation_space, env.single_action_space, TINY
    env.close()
    return found


def test_collection_writes_one_row_per_agent_step_named_by_its_agent(tmp_path: Path) -> None:
    """Hand-checked, one copy seeded 3 (observations [own step count, 3, one-hot]): b terminates at its 2nd step
    (reward 3 per step), so its episode is written first (id 0); a's 4 steps (reward 1, truncated at 4) are episode
    1. Random actions: log-probability -log 2."""
    path = collect(tmp_path / "tiny.parquet", num_envs=1, episodes=2)
    table = pq.read_table(path)
    assert table.column_names[-1] == "agent" and str(table.schema.field("agent").type) == "string"
    rows = table.to_pydict()
    assert rows["agent"] == ["b", "b", "a", "a", "a", "a"]
    assert rows["episode_id"] == [0, 0, 1, 1, 1, 1] and rows["step"] == [0, 1, 0, 1, 2, 3]
    b, a = [0.0, 1.0], [1.0, 0.0]
    assert rows["observation"] == [[0, 3, *b], [1, 3, *b], [0, 3, *a], [1, 3, *a], [2, 3, *a], [3, 3, *a]]
    assert rows["next_observation"] == [[1, 3, *b], [2, 3, *b], [1, 3, *a], [2, 3, *a], [3, 3, *a], [4, 3, *a]]
    assert rows["reward"] == [3, 3, 1, 1, 1, 1]
    assert rows["terminated"] == [False, True, False, False, False, False]
    assert rows["truncated"] == [False, False, False, False, False, True]
    assert set(rows["action"]) <= {0, 1}
    np.testing.assert_allclose(rows["log_prob"], -math.log(2), rtol=1e-6, atol=0)
    metadata = read_metadata(path)
    assert metadata["agents"] == ["a", "b"] and metadata["episodes"] == 2 and metadata["transitions"] == 6
    data = load_dataset(path, *spaces())  # every check of a read, rows_sha256 (over the agent column too) included
    assert data.agent is not None and data.agent.tolist() == rows["agent"]


def test_a_step_budget_counts_agent_steps_and_cuts_each_agents_episode(tmp_path: Path) -> None:
    """2 copies (4 rows) for 10 agent steps: steps 1 and 2 give 4 rows each (b terminates at 2, its episodes are
    written), step 3 gives a's 2 rows only (b has left: no rows); a's episodes are cut there, kept, truncated."""
    path = collect(tmp_path / "steps.parquet", num_envs=2, steps=10)
    data = load_dataset(path, *spaces())
    assert len(data) == 10 and data.agent is not None
    assert data.agent.tolist() == ["b", "b", "b", "b", "a", "a", "a", "a", "a", "a"]
    assert data.episode_id.tolist() == [0, 0, 1, 1, 2, 2, 2, 3, 3, 3]
    assert data.terminated.tolist() == [False, True] * 2 + [False] * 6
    assert data.truncated.tolist() == [False] * 6 + [True] + [False] * 2 + [True]


def test_dataset_agents_keep_those_agents_rows_read_whole_and_streamed(tmp_path: Path) -> None:
    path = collect(tmp_path / "tiny.parquet", num_envs=2, episodes=8)
    data = load_dataset(path, *spaces())
    only_b = data.of_agents(["b"], path)
    assert only_b.agent is not None and set(only_b.agent) == {"b"} and len(only_b) == int((data.agent == "b").sum())
    np.testing.assert_array_equal(only_b.obs[:, -2:], np.tile([0.0, 1.0], (len(only_b), 1)))
    assert len(data.of_agents(["a", "b"], path)) == len(data) and data.of_agents(None, path) is data
    stream = RowGroupStream(path, *spaces(), 1000, 4, 0, 0.0, 1000, agents=["b"])
    assert stream.rows == len(only_b)
    streamed = stream.batch(0, np.random.default_rng(0), 64)
    np.testing.assert_array_equal(streamed["obs"][:, -2:].numpy(), np.tile([0.0, 1.0], (64, 1)))


def test_dataset_agents_naming_an_absent_agent_is_refused_in_one_line(tmp_path: Path) -> None:
    path = collect(tmp_path / "tiny.parquet", num_envs=1, episodes=2)
    data = load_dataset(path, *spaces())
    message = r"dataset.agents: .*tiny.parquet has no rows of agent 'c' \(its agents: a, b\)$"
    with pytest.raises(DatasetError, match=message):
        data.of_agents(["a", "c"], path)
    with pytest.raises(DatasetError, match=message):
        RowGroupStream(path, *spaces(), 1000, 4, 0, 0.0, 1000, agents=["a", "c"])


def test_bc_trains_on_one_agents_transitions(tmp_path: Path) -> None:
    """BC on b's rows only of the two-agent env: it trains, and evaluates its episodes by the mean over agents, as
    any multi-agent run does (a earns 4, b 6, whatever the actions)."""
    path = collect(tmp_path / "tiny.parquet", num_envs=2, episodes=16)
    tree = {
        "env": {"id": TINY},
        "algo": {"name": "bc", "batch_size": 8},
        "dataset": {"path": str(path), "agents": ["b"], "validation_fraction": 0.25},
        "train": {"max_steps": 20, "eval_every": 20, "log_every": 20, "eval_episodes": 2, "progress_bar": False},
    }
    summary = train(validate_params(tree), tmp_path / "bc")
    assert summary["gradient_steps"] == 20 and summary["evaluations"][-1]["mean_return"] == 5.0


def test_the_rows_digest_covers_the_agent_column(tmp_path: Path) -> None:
    """Rows relabelled to another agent after collection (metadata kept) are refused: rows_sha256 differs."""
    path = collect(tmp_path / "tiny.parquet", num_envs=1, episodes=2)
    table = pq.read_table(path)
    relabelled = table.set_column(
        table.schema.get_field_index("agent"), "agent", pa.array(["a"] * table.num_rows, pa.string())
    )
    raw = pq.ParquetFile(path).metadata.metadata[b"rlcore"]
    pq.write_table(relabelled.replace_schema_metadata({b"rlcore": raw}), tmp_path / "relabelled.parquet")
    with pytest.raises(DatasetError, match="rows_sha256 differs"):
        load_dataset(tmp_path / "relabelled.parquet", *spaces())


def test_the_collect_stage_merges_multi_agent_shards_with_their_agents(tmp_path: Path) -> None:
    """``rlcore collect``'s stage, two shards of 2 episodes each: the merged file keeps the agent column and the
    agents in its metadata, and its episodes are the shards' back to back."""
    tree = {
        "env": {"id": TINY},
        "algo": {"name": "ppo"},
        "collect": {"policy": "random", "steps": None, "episodes": 4, "num_envs": 1, "shards": 2},
    }
    path = collect_stage(validate_params(tree), tmp_path)
    metadata = read_metadata(path)
    assert metadata["agents"] == ["a", "b"] and metadata["episodes"] == 4 and metadata["transitions"] == 12
    data = load_dataset(path, *spaces())
    assert data.agent is not None and data.agent.tolist() == ["b", "b", "a", "a", "a", "a"] * 2


# --- groups (policy.groups at collection, dataset.groups in training) -------------------------------------------

ADVERSARY = {"id": "pettingzoo:mpe2.simple_adversary_v3", "kwargs": {"N": 2, "max_cycles": 25}}
SPREAD = {"id": "pettingzoo:mpe2.simple_spread_v3", "kwargs": {"N": 3, "max_cycles": 25}}
SPREAD_GROUPS = {"lead": ["agent_0"], "rest": ["agent_[12]"]}
SPREAD_GROUP_OF = {"agent_0": "lead", "agent_1": "rest", "agent_2": "rest"}
"""SPREAD_GROUPS' fnmatch patterns applied by hand to simple_spread's agents."""


def grouped_params(env: dict, groups: dict | None, episodes: int, shards: int = 1) -> Params:
    """A PPO run's params (``policy.groups`` where given) collecting random actions in 2 copies; ``episodes`` counts
    agents' episodes."""
    collect = {"policy": "random", "steps": None, "episodes": episodes, "num_envs": 2, "row_group_size": 40}
    tree = {"env": env, "policy": {"groups": groups}, "algo": {"name": "ppo"}, "collect": collect | {"shards": shards}}
    return validate_params(tree)


def collect_grouped(root: Path, env: dict, groups: dict | None, episodes: int, shards: int = 1) -> Path:
    """``rlcore collect``'s stage with :func:`grouped_params`."""
    return collect_stage(grouped_params(env, groups, episodes, shards), root)


def env_spaces(env: dict) -> tuple:
    vector_env = make_vector_env(EnvConfig(**env), 1)
    found = vector_env.single_observation_space, vector_env.single_action_space, env["id"]
    vector_env.close()
    return found


@pytest.fixture(scope="module")
def spread_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 simple_spread episodes of 25 steps (12 agents' episodes, 300 rows) collected with SPREAD_GROUPS."""
    return collect_grouped(tmp_path_factory.mktemp("spread"), SPREAD, SPREAD_GROUPS, episodes=12)


def test_collection_with_policy_groups_names_each_rows_group_after_its_agent(tmp_path: Path) -> None:
    """simple_adversary with the preset's groups: the ``group`` column follows ``agent``, and each row's group is the
    one whose pattern its agent matches (``adversary_*`` -> adversaries, ``agent_*`` -> good), checked row by row;
    the metadata lists each group's agents and the read verifies rows_sha256 over both columns."""
    groups = {"adversaries": ["adversary_*"], "good": ["agent_*"]}
    path = collect_grouped(tmp_path, ADVERSARY, groups, episodes=6)
    table = pq.read_table(path)
    assert table.column_names[-2:] == ["agent", "group"] and str(table.schema.field("group").type) == "string"
    agents, labels = table.column("agent").to_pylist(), table.column("group").to_pylist()
    assert len(labels) == 150 and sorted(set(agents)) == ["adversary_0", "agent_0", "agent_1"]
    for agent, group in zip(agents, labels, strict=True):
        assert group == ("adversaries" if agent.startswith("adversary_") else "good"), (agent, group)
    metadata = read_metadata(path)
    assert metadata["groups"] == {"adversaries": ["adversary_0"], "good": ["agent_0", "agent_1"]}
    assert list(metadata)[list(metadata).index("agents") + 1] == "groups"
    data = load_dataset(path, *env_spaces(ADVERSARY))
    assert data.group is not None and data.group.tolist() == labels and data.agent is not None


def test_without_policy_groups_a_multi_agent_dataset_is_what_it_was_before_group_columns(tmp_path: Path) -> None:
    """No ``group`` column, no ``groups`` key, and the rows_sha256 this collection recorded before they existed
    (pinned from that code; the whole file was byte for byte the same then)."""
    path = collect(tmp_path / "tiny.parquet", num_envs=2, episodes=8)
    assert pq.ParquetFile(path).schema_arrow.names[-2:] == ["log_prob", "agent"]
    metadata = read_metadata(path)
    assert "groups" not in metadata and load_dataset(path, *spaces()).group is None
    assert metadata["rows_sha256"] == "da0a78f10f8eab5646fc72365886b715d3be307d3674175cef333713bb8c9d41"


def test_groups_add_only_the_group_column_and_the_groups_key(tmp_path: Path) -> None:
    """The same collection with and without ``policy.groups``: the same rows and metadata besides the group column,
    the ``groups`` key and the rows' digest."""
    plain = collect_grouped(tmp_path / "plain", SPREAD, None, episodes=6)
    grouped = collect_grouped(tmp_path / "grouped", SPREAD, SPREAD_GROUPS, episodes=6)
    assert pq.read_table(grouped).drop_columns(["group"]).equals(pq.read_table(plain))
    without = {key: value for key, value in read_metadata(grouped).items() if key not in ("groups", "rows_sha256")}
    assert without == {key: value for key, value in read_metadata(plain).items() if key != "rows_sha256"}


def test_the_rows_digest_covers_the_group_column(spread_dataset: Path, tmp_path: Path) -> None:
    """Rows moved to another group after collection (metadata kept) are refused: rows_sha256 differs."""
    table = pq.read_table(spread_dataset)
    moved = table.set_column(
        table.schema.get_field_index("group"), "group", pa.array(["lead"] * table.num_rows, pa.string())
    )
    raw = pq.ParquetFile(spread_dataset).metadata.metadata[b"rlcore"]
    pq.write_table(moved.replace_schema_metadata({b"rlcore": raw}), tmp_path / "moved.parquet")
    with pytest.raises(DatasetError, match="rows_sha256 differs"):
        load_dataset(tmp_path / "moved.parquet", *env_spaces(SPREAD))


def test_the_collect_stage_merges_grouped_shards_and_recollects_a_shard_of_other_groups(tmp_path: Path) -> None:
    """Two shards merged keep the group column and the groups; a shard left by an interrupted collection is kept only
    if its groups are the params' (here it was collected without groups: collected again, with them)."""
    collect_shard(grouped_params(SPREAD, None, episodes=12, shards=2), tmp_path, 0)
    path = collect_grouped(tmp_path, SPREAD, SPREAD_GROUPS, episodes=12, shards=2)
    assert read_metadata(path)["groups"] == {"lead": ["agent_0"], "rest": ["agent_1", "agent_2"]}
    data = load_dataset(path, *env_spaces(SPREAD))
    assert data.agent is not None and data.group is not None and len(data) == 300
    assert data.group.tolist() == [SPREAD_GROUP_OF[agent] for agent in data.agent]


def test_dataset_groups_keep_those_groups_rows_read_whole_and_streamed(spread_dataset: Path) -> None:
    """``rest`` is agent_1's and agent_2's rows (their one-hot, the last 3 observation values, never agent_0's)."""
    table = pq.read_table(spread_dataset)
    expected = sum(SPREAD_GROUP_OF[agent] == "rest" for agent in table.column("agent").to_pylist())
    assert expected == 200
    data = load_dataset(spread_dataset, *env_spaces(SPREAD))
    rest = data.of_groups(["rest"], spread_dataset)
    assert len(rest) == expected and rest.agent is not None and set(rest.agent) == {"agent_1", "agent_2"}
    assert (rest.obs[:, -3] == 0).all() and (rest.obs[:, -2:].sum(axis=1) == 1).all()
    assert (
        len(data.of_groups(["lead", "rest"], spread_dataset)) == len(data)
        and data.of_groups(None, spread_dataset) is data
    )
    stream = RowGroupStream(spread_dataset, *env_spaces(SPREAD), 1000, 4, 0, 0.0, 1000, groups=["lead"])
    assert stream.rows == 100
    streamed = stream.batch(0, np.random.default_rng(0), 64)
    np.testing.assert_array_equal(streamed["obs"][:, -3:].numpy(), np.tile([1.0, 0.0, 0.0], (64, 1)))


@pytest.mark.parametrize("in_memory", [True, False])
def test_an_offline_run_with_dataset_groups_trains_on_those_groups_rows_only(
    spread_dataset: Path, in_memory: bool
) -> None:
    """The BC run's data source holds ``rest``'s 200 of the 300 rows, read whole or streamed."""
    params = validate_params(
        {
            "env": SPREAD,
            "algo": {"name": "bc", "batch_size": 8},
            "dataset": {
                "path": str(spread_dataset),
                "groups": ["rest"],
                "validation_fraction": 0.0,
                "in_memory": in_memory,
            },
        }
    )
    source = DatasetSource(params, *env_spaces(SPREAD)[:2])
    assert source.batches.rows == 200 and source.held_out is None


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        (["lead", "red"], r"dataset.groups: .*spread.*has no group 'red' \(its groups: lead, rest\)$"),
        (["rst"], r"has no group 'rst' \(its groups: lead, rest\) \(did you mean 'rest'\?\)$"),
    ],
)
def test_dataset_groups_naming_a_group_the_dataset_lacks_is_refused_in_one_line(
    spread_dataset: Path, groups: list[str], message: str
) -> None:
    data = load_dataset(spread_dataset, *env_spaces(SPREAD))
    with pytest.raises(DatasetError, match=message):
        data.of_groups(groups, spread_dataset)
    with pytest.raises(DatasetError, match=message):
        RowGroupStream(spread_dataset, *env_spaces(SPREAD), 1000, 4, 0, 0.0, 1000, groups=groups)


def test_dataset_groups_on_a_dataset_without_groups_is_refused_in_one_line(tmp_path: Path) -> None:
    path = collect(tmp_path / "tiny.parquet", num_envs=1, episodes=2)
    message = r"dataset.groups: .*tiny.parquet has no group column \(it was collected without policy.groups\); "
    with pytest.raises(DatasetError, match=message + "remove dataset.groups$"):
        load_dataset(path, *spaces()).of_groups(["a"], path)
    with pytest.raises(DatasetError, match=message):
        RowGroupStream(path, *spaces(), 1000, 4, 0, 0.0, 1000, groups=["a"])


def test_without_dataset_groups_the_params_tree_is_what_it_was_before_the_key() -> None:
    """A null ``dataset.groups`` is left out of the resolved params (params.yaml, checkpoints, the train fingerprint),
    so an offline run that does not use it keeps the fingerprint it had before the key existed."""
    tree = {"env": {"id": "CartPole-v1"}, "algo": {"name": "bc"}}
    assert "groups" not in validate_params(tree).to_dict()["dataset"]
    grouped = validate_params(tree | {"dataset": {"groups": ["lead"]}})
    assert grouped.to_dict()["dataset"]["groups"] == ["lead"]


def test_bc_trains_on_one_groups_transitions(spread_dataset: Path, tmp_path: Path) -> None:
    """BC on ``lead``'s rows of simple_spread, through the trainer: it trains and evaluates."""
    tree = {
        "env": SPREAD,
        "algo": {"name": "bc", "batch_size": 8},
        "dataset": {"path": str(spread_dataset), "groups": ["lead"], "validation_fraction": 0.25},
        "train": {"max_steps": 20, "eval_every": 20, "log_every": 20, "eval_episodes": 1, "progress_bar": False},
    }
    summary = train(validate_params(tree), tmp_path / "bc")
    assert summary["gradient_steps"] == 20 and summary["evaluations"][-1]["gradient_steps"] == 20
