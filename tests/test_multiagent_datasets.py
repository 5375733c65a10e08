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

from rlcore.data.collection import CollectionPlan, collect_dataset
from rlcore.data.reader import load_dataset, read_metadata
from rlcore.data.schema import DatasetError
from rlcore.data.stream import RowGroupStream
from rlcore.envs.config import EnvConfig
from rlcore.envs.vector import make_vector_env
from rlcore.params import validate_params
from rlcore.stages.collect import collect_stage
from rlcore.trainers import train

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
