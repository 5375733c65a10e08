"""ReplayBuffer: ring storage, termination vs truncation, n-step returns, and its .npz checkpoint."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcore.common.errors import CheckpointError
from rlcore.data.replay import FIELDS, ReplayBuffer
from rlcore.data.replay_stack import ReplayStack

GAMMA = 0.9


def make_buffer(
    capacity: int = 16,
    num_envs: int = 1,
    n_step: int = 1,
    obs_shape: tuple[int, ...] = (3,),
    action_shape: tuple[int, ...] = (),
    action_dtype: type = np.int64,
    gamma: float = GAMMA,
) -> ReplayBuffer:
    return ReplayBuffer(capacity, obs_shape, action_shape, action_dtype, num_envs, gamma, n_step)


def no_flags(num_envs: int) -> np.ndarray:
    return np.zeros(num_envs, dtype=bool)


def fill(buffer: ReplayBuffer, vector_steps: int, num_envs: int, seed: int = 0, continuing: bool = False) -> None:
    """Add ``vector_steps`` random vector steps (some episode ends, some invalid rows). ``continuing``: each
    step's obs is the previous step's next_obs (episodes go on; stored once), else unrelated draws."""
    rng = np.random.default_rng(seed)
    obs_shape = buffer.observations.shape[1:]
    action_shape = buffer.actions.shape[1:]
    next_obs = rng.standard_normal((num_envs, *obs_shape)).astype(np.float32)
    for _ in range(vector_steps):
        obs = next_obs if continuing else rng.standard_normal((num_envs, *obs_shape)).astype(np.float32)
        next_obs = rng.standard_normal((num_envs, *obs_shape)).astype(np.float32)
        if np.issubdtype(buffer.actions.dtype, np.integer):
            actions = rng.integers(0, 5, size=(num_envs, *action_shape)).astype(buffer.actions.dtype)
        else:
            actions = rng.uniform(-1, 1, size=(num_envs, *action_shape)).astype(buffer.actions.dtype)
        buffer.add(
            obs,
            actions,
            rng.standard_normal(num_envs).astype(np.float32),
            next_obs,
            np.zeros(num_envs, bool) if continuing else rng.random(num_envs) < 0.1,
            np.zeros(num_envs, bool) if continuing else rng.random(num_envs) < 0.1,
            np.ones(num_envs, bool) if continuing else rng.random(num_envs) < 0.9,
        )


def stored_rows(buffer: ReplayBuffer) -> list[tuple]:
    """The stored transitions, oldest first, as hashable tuples (obs, action, reward, next_obs, discount)."""
    slots = buffer.slots()
    obs, next_obs = buffer.observation(buffer.obs_write[slots]), buffer.observation(buffer.next_write[slots])
    return [
        (
            tuple(obs[i].tolist()),
            buffer.actions[slot].tolist(),
            float(buffer.rewards[slot]),
            tuple(next_obs[i].tolist()),
            float(buffer.discounts[slot]),
        )
        for i, slot in enumerate(slots)
    ]


# --- 1. ring storage -------------------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    capacity=st.integers(1, 50),
    num_envs=st.integers(1, 4),
    vector_steps=st.integers(1, 120),
    data=st.data(),
)
def test_sampled_transitions_are_exactly_ones_added_across_wrap_around(
    capacity: int, num_envs: int, vector_steps: int, data: st.DataObject
) -> None:
    flags = st.lists(st.booleans(), min_size=num_envs, max_size=num_envs).map(lambda xs: np.array(xs, dtype=bool))
    buffer = make_buffer(capacity=capacity, num_envs=num_envs, n_step=1)
    gamma32 = float(np.float32(GAMMA))
    added: list[tuple] = []  # valid transitions, in insertion order
    invalid: set[float] = set()  # counters of rows that were marked invalid
    counter = 0
    for step in range(vector_steps):
        valid, terminated, truncated = data.draw(flags), data.draw(flags), data.draw(flags)
        counters = counter + np.arange(num_envs)
        counter += num_envs
        envs = np.arange(num_envs)
        obs = np.stack([counters, envs, np.full(num_envs, step)], axis=1).astype(np.float32)
        next_obs = obs + np.float32(0.25)
        actions = (counters + 1000).astype(np.int64)
        rewards = (counters * 0.5).astype(np.float32)
        buffer.add(obs, actions, rewards, next_obs, terminated, truncated, valid)
        for env in range(num_envs):
            if valid[env]:
                discount = 0.0 if terminated[env] else gamma32
                added.append(
                    (
                        tuple(obs[env].tolist()),
                        int(actions[env]),
                        float(rewards[env]),
                        tuple(next_obs[env].tolist()),
                        discount,
                    )
                )
            else:
                invalid.add(float(counters[env]))

    # These observations never repeat (next_obs is not the next obs), so each transition needs two rows: the
    # buffer keeps the most recent transitions whose rows fit, oldest first, and at least the capacity's
    # share of its observation rows.
    assert min(len(added), (buffer.obs_capacity - 2 * num_envs) // 2, capacity) <= len(buffer) <= capacity
    stored = stored_rows(buffer)
    assert stored == added[len(added) - len(buffer) :]
    recent = set(stored)
    assert all(row[0][0] not in invalid for row in stored)
    if not added:
        return
    batch = buffer.sample(256, np.random.default_rng(0))
    for i in range(256):
        row = (
            tuple(batch["obs"][i].tolist()),
            int(batch["actions"][i]),
            float(batch["rewards"][i]),
            tuple(batch["next_obs"][i].tolist()),
            float(batch["discounts"][i]),
        )
        assert row in recent, f"sampled {row} is not among the {capacity} most recent transitions added"
        assert row[0][0] not in invalid


def reference_transitions(steps: list[tuple], num_envs: int, n_step: int) -> list[tuple]:
    """What a buffer storing both observations of every transition would hold, in insertion order: the n-step
    windows of ``rlcore.data.replay`` written out plainly. ``steps``: (obs, actions, rewards, next_obs, terminated,
    truncated, valid) per vector step."""
    gamma32, out = float(np.float32(GAMMA)), []
    windows: list[list[tuple]] = [[] for _ in range(num_envs)]

    def emit(window: list[tuple], next_obs: tuple, terminal: bool) -> None:
        ret = float(np.float32(sum(GAMMA**k * r for k, (_, _, r) in enumerate(window))))
        discount = 0.0 if terminal else float(np.float32(GAMMA ** len(window)))
        out.append((window[0][0], window[0][1], ret, next_obs, discount))

    for obs, actions, rewards, next_obs, terminated, truncated, valid in steps:
        for env in np.flatnonzero(valid):
            if n_step == 1:
                discount = 0.0 if terminated[env] else gamma32
                out.append((tuple(obs[env].tolist()), int(actions[env]), float(rewards[env]),
                            tuple(next_obs[env].tolist()), discount))  # fmt: skip
                continue
            window = windows[env]
            window.append((tuple(obs[env].tolist()), int(actions[env]), float(rewards[env])))
            if terminated[env] or truncated[env]:
                while window:
                    emit(window, tuple(next_obs[env].tolist()), bool(terminated[env]))
                    window.pop(0)
            elif len(window) == n_step:
                emit(window, tuple(next_obs[env].tolist()), False)
                window.pop(0)
    return out


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(8, 80),
    num_envs=st.integers(1, 4),
    n_step=st.sampled_from([1, 3]),
    vector_steps=st.integers(1, 150),
    data=st.data(),
)
def test_episodes_of_ten_steps_store_each_observation_once_and_keep_capacity_transitions(
    capacity: int, num_envs: int, n_step: int, vector_steps: int, data: st.DataObject
) -> None:
    """Envs stepped as gymnasium's next-step autoreset does: episodes of 10 steps (ended by termination or
    truncation, drawn), then a reset step that is no transition. An episode's obs is its previous next_obs,
    so the buffer writes 11 rows per 10 transitions, holds exactly the last ``capacity`` transitions and
    samples what a buffer of two copies per transition would."""
    buffer = make_buffer(capacity=capacity, num_envs=num_envs, n_step=n_step)
    episode, t = np.zeros(num_envs, int), data.draw(st.lists(st.integers(0, 9), min_size=num_envs, max_size=num_envs))
    t = np.array(t)
    resetting = np.zeros(num_envs, dtype=bool)
    current = np.stack([np.arange(num_envs), episode, t], axis=1).astype(np.float32)
    steps = []
    for step in range(vector_steps):
        ends = t == 9
        terminated = ends & np.array(data.draw(st.lists(st.booleans(), min_size=num_envs, max_size=num_envs)))
        truncated = ends & ~terminated
        episode_next = np.where(resetting, episode + 1, episode)
        t_next = np.where(resetting, 0, np.minimum(t + 1, 9))
        next_obs = np.stack([np.arange(num_envs), episode_next, t_next], axis=1).astype(np.float32)
        actions = np.full(num_envs, step, dtype=np.int64)
        rewards = (t + 1).astype(np.float32)
        valid = ~resetting
        entry = (current, actions, rewards, next_obs, terminated & valid, truncated & valid, valid)
        buffer.add(*entry)
        steps.append(entry)
        resetting = valid & ends
        episode, t, current = episode_next, t_next, next_obs

    expected = reference_transitions(steps, num_envs, n_step)
    assert len(buffer) == min(len(expected), capacity)
    assert stored_rows(buffer) == expected[len(expected) - len(buffer) :]
    valid_steps = sum(int(entry[-1].sum()) for entry in steps)
    episodes_started = sum(int(entry[-1].sum()) for entry in steps[:1]) + sum(
        int((entry[-1] & ~prev[-1]).sum()) for prev, entry in itertools.pairwise(steps)
    )
    assert buffer.obs_writes == valid_steps + episodes_started  # one row per step, one more per episode start
    if expected:
        batch = buffer.sample(64, np.random.default_rng(0))
        stored = set(stored_rows(buffer))
        for i in range(64):
            row = (tuple(batch["obs"][i].tolist()), int(batch["actions"][i]), float(batch["rewards"][i]),
                   tuple(batch["next_obs"][i].tolist()), float(batch["discounts"][i]))  # fmt: skip
            assert row in stored


def test_observation_storage_is_one_and_an_eighth_rows_per_transition() -> None:
    buffer = make_buffer(capacity=80_000, num_envs=16, n_step=1, obs_shape=(4, 84, 84))
    assert buffer.obs_capacity == 90_000 + 2 * 16 * 2
    assert buffer.observations.shape == (90_064, 4, 84, 84)


def fill_with_episodes(buffer: ReplayBuffer, episode_steps: int, vector_steps: int) -> None:
    """Every env runs episodes of ``episode_steps`` steps (same-step resets, every observation distinct): each
    episode needs ``episode_steps + 1`` observation rows for its ``episode_steps`` transitions."""
    envs = buffer.num_envs
    counter = 0
    obs = np.zeros((envs, 1), dtype=np.float32)
    for env in range(envs):
        obs[env] = counter = counter + 1
    for step in range(vector_steps):
        ended = np.full(envs, (step + 1) % episode_steps == 0)
        next_obs = np.zeros_like(obs)
        for env in range(envs):
            next_obs[env] = counter = counter + 1
        buffer.add(
            obs,
            np.zeros(envs, np.int64),
            np.ones(envs, np.float32),
            next_obs,
            ended,
            no_flags(envs),
            np.ones(envs, dtype=bool),
        )
        obs = next_obs.copy()
        for env in np.flatnonzero(ended):
            obs[env] = counter = counter + 1  # the reset observation of the next episode: a new row


@pytest.mark.parametrize("episode_steps", [9, 4])
def test_episodes_of_nine_steps_keep_a_full_buffer_and_of_four_steps_drop_transitions_early(episode_steps: int) -> None:
    # 9 steps: 10 rows per 9 transitions (1.11 < 1.125): the ring holds every transition of a full buffer.
    # 4 steps: 5 rows per 4 transitions (1.25): the ring holds about 1.125 / 1.25 of them, so the oldest go early.
    buffer = make_buffer(capacity=800, num_envs=4, n_step=1, obs_shape=(1,))
    fill_with_episodes(buffer, episode_steps, vector_steps=1000)
    rows_per_transition = (episode_steps + 1) / episode_steps
    if rows_per_transition <= 1.125:
        assert len(buffer) == 800
    else:
        assert 800 * 1.125 / rows_per_transition - 8 <= len(buffer) < 800
    # Whatever was kept reads intact rows: with 4 envs counting in turn, every next observation is its
    # observation + 4 (an overwritten row would break that).
    assert {round(row[3][0] - row[0][0]) for row in stored_rows(buffer)} == {4}


# --- 2. termination vs truncation ------------------------------------------------------------------------------------


def test_terminated_stores_zero_discount_and_truncated_or_normal_store_gamma() -> None:
    buffer = make_buffer(num_envs=3, n_step=1, obs_shape=(1,))
    obs = np.array([[0.0], [1.0], [2.0]], dtype=np.float32)
    buffer.add(
        obs,
        np.array([0, 1, 2]),
        np.ones(3, dtype=np.float32),
        obs + 10,
        terminated=np.array([True, False, False]),
        truncated=np.array([False, True, False]),
        valid=np.ones(3, dtype=bool),
    )
    assert len(buffer) == 3
    by_env = {int(row[0][0]): row[4] for row in stored_rows(buffer)}
    assert by_env == {0: 0.0, 1: float(np.float32(GAMMA)), 2: float(np.float32(GAMMA))}
    assert buffer.discounts.dtype == np.float32


# --- 3. n-step returns -----------------------------------------------------------------------------------------------


def run_two_env_episode(end: str) -> ReplayBuffer:
    """n_step=3: env 0 plays 5 steps (rewards 1..5) ending by ``end``; env 1 interleaves another episode.

    Observations are ``[env, t]``. Env 1: t=0,1 (rewards 10, 20) then terminates; t=2 is an autoreset row
    (invalid, reward 999); t=3,4 (rewards 30, 40) start an episode still in progress at the end.
    """
    buffer = make_buffer(capacity=32, num_envs=2, n_step=3, obs_shape=(2,))
    env1_rewards = [10.0, 20.0, 999.0, 30.0, 40.0]
    for t in range(5):
        obs = np.array([[0, t], [1, t]], dtype=np.float32)
        next_obs = np.array([[0, t + 1], [1, t + 1]], dtype=np.float32)
        buffer.add(
            obs,
            np.array([t, 100 + t]),
            np.array([t + 1.0, env1_rewards[t]], dtype=np.float32),
            next_obs,
            terminated=np.array([end == "terminated" and t == 4, t == 1]),
            truncated=np.array([end == "truncated" and t == 4, False]),
            valid=np.array([True, t != 2]),
        )
    return buffer


def transitions_of(buffer: ReplayBuffer, env: int) -> dict[int, tuple]:
    """env's stored transitions keyed by start time t: (action, reward, next_obs, discount)."""
    out = {}
    for obs, action, reward, next_obs, discount in stored_rows(buffer):
        if obs[0] == env:
            t = int(obs[1])
            assert t not in out, f"start t={t} of env {env} stored twice"
            out[t] = (int(action), reward, next_obs, discount)
    return out


def n_step_return(rewards: list[float]) -> float:
    return float(np.float32(sum(GAMMA**k * r for k, r in enumerate(rewards))))


def f32(x: float) -> float:
    return float(np.float32(x))


def test_n_step_returns_match_hand_computed_episode_ending_by_termination() -> None:
    buffer = run_two_env_episode("terminated")
    env0 = transitions_of(buffer, 0)
    assert env0 == {
        0: (0, n_step_return([1, 2, 3]), (0.0, 3.0), f32(0.729)),
        1: (1, n_step_return([2, 3, 4]), (0.0, 4.0), f32(0.729)),
        2: (2, n_step_return([3, 4, 5]), (0.0, 5.0), 0.0),
        3: (3, n_step_return([4, 5]), (0.0, 5.0), 0.0),
        4: (4, n_step_return([5]), (0.0, 5.0), 0.0),
    }
    # the hand-computed numbers themselves
    assert env0[0][1] == pytest.approx(1 + 0.9 * 2 + 0.81 * 3)
    assert env0[2][1] == pytest.approx(3 + 0.9 * 4 + 0.81 * 5)
    assert env0[3][1] == pytest.approx(4 + 0.9 * 5)
    assert env0[4][1] == pytest.approx(5.0)


def test_n_step_returns_match_hand_computed_episode_ending_by_truncation() -> None:
    buffer = run_two_env_episode("truncated")
    assert transitions_of(buffer, 0) == {
        0: (0, n_step_return([1, 2, 3]), (0.0, 3.0), f32(0.9**3)),
        1: (1, n_step_return([2, 3, 4]), (0.0, 4.0), f32(0.9**3)),
        2: (2, n_step_return([3, 4, 5]), (0.0, 5.0), f32(0.9**3)),
        3: (3, n_step_return([4, 5]), (0.0, 5.0), f32(0.9**2)),
        4: (4, n_step_return([5]), (0.0, 5.0), f32(0.9)),
    }


@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_n_step_windows_of_interleaved_env_stay_separate(end: str) -> None:
    buffer = run_two_env_episode(end)
    # env 1: its first episode ends (terminated) after 2 steps, the autoreset row is dropped, and its
    # second episode (2 steps, window not yet full) is still pending, so nothing of it is stored.
    assert transitions_of(buffer, 1) == {
        0: (100, n_step_return([10, 20]), (1.0, 2.0), 0.0),
        1: (101, n_step_return([20]), (1.0, 2.0), 0.0),
    }
    assert len(buffer) == 5 + 2
    assert 999.0 not in buffer.rewards[: len(buffer)]


# --- 4. save / load round trip ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_step", "action_shape", "action_dtype", "vector_steps", "continuing"),
    [
        (1, (), np.int64, 40, False),  # discrete, wrapped around several times
        (3, (2,), np.float32, 40, False),  # continuous, n-step, wrapped
        (1, (), np.int64, 3, False),  # not yet full
        (3, (), np.int64, 40, True),  # one long episode: full, wrapped, nothing dropped
    ],
)
def test_save_load_round_trip_is_bit_identical(
    tmp_path: Path,
    n_step: int,
    action_shape: tuple[int, ...],
    action_dtype: type,
    vector_steps: int,
    continuing: bool,
) -> None:
    config = dict(capacity=17, num_envs=2, n_step=n_step, action_shape=action_shape, action_dtype=action_dtype)
    original = make_buffer(**config)
    fill(original, vector_steps, num_envs=2, continuing=continuing)
    if continuing:
        assert len(original) == original.capacity and original.pos != 0
    elif vector_steps == 40:
        # wrapped, ring not aligned; fill's observations never repeat, so rows ran out first: transitions dropped
        assert original.added > original.capacity and original.pos != 0 and len(original) < original.capacity
    path = tmp_path / "replay" / "step_123.npz"
    original.save(path, env_steps=123)

    loaded = make_buffer(**config)
    assert loaded.load(path) == 123
    assert (loaded.pos, loaded.size) == (original.pos, original.size)
    assert (loaded.oldest, loaded.obs_writes) == (original.oldest, original.obs_writes)
    for name in ("observations", "actions", "rewards", "discounts", "obs_write", "next_write"):
        a, b = getattr(original, name), getattr(loaded, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert a.tobytes() == b.tobytes(), name
        assert np.array_equal(a, b), name

    batch_a = original.sample(64, np.random.default_rng(7))
    batch_b = loaded.sample(64, np.random.default_rng(7))
    for name in FIELDS:
        assert batch_a[name].dtype == batch_b[name].dtype
        assert torch.equal(batch_a[name], batch_b[name]), name


# --- 5. load errors --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.5, 0.99])
def test_load_of_truncated_file_raises_checkpoint_error_naming_file(tmp_path: Path, keep: float) -> None:
    source = make_buffer()
    fill(source, 20, num_envs=1)
    path = tmp_path / "step_20.npz"
    source.save(path, env_steps=20)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match=re.escape(str(path))):
        make_buffer().load(path)


@pytest.mark.parametrize(
    ("saved", "loading", "names"),
    [
        (dict(capacity=16), dict(capacity=32), "algo.buffer_size"),
        (dict(n_step=1), dict(n_step=3), "algo.n_step"),
        (dict(n_step=3), dict(n_step=1), "algo.n_step"),
    ],
)
def test_load_from_different_capacity_or_n_step_raises_checkpoint_error_naming_param(
    tmp_path: Path, saved: dict, loading: dict, names: str
) -> None:
    source = make_buffer(**saved)
    fill(source, 30, num_envs=1)
    path = tmp_path / "step_30.npz"
    source.save(path, env_steps=30)
    target = make_buffer(**loading)
    with pytest.raises(CheckpointError, match=re.escape(names)) as info:
        target.load(path)
    assert str(path) in str(info.value)
    assert (target.pos, target.size) == (0, 0)


def test_load_with_wrong_observation_shape_raises_checkpoint_error(tmp_path: Path) -> None:
    source = make_buffer(obs_shape=(3,))
    fill(source, 10, num_envs=1)
    path = tmp_path / "step_10.npz"
    source.save(path, env_steps=10)
    with pytest.raises(CheckpointError, match="obs") as info:
        make_buffer(obs_shape=(4,)).load(path)
    assert str(path) in str(info.value)


# --- 6. atomic save --------------------------------------------------------------------------------------------------


def test_save_over_existing_file_leaves_no_temporary_files(tmp_path: Path) -> None:
    buffer = make_buffer()
    path = tmp_path / "step.npz"
    fill(buffer, 5, num_envs=1, seed=1)
    buffer.save(path, env_steps=5)
    fill(buffer, 30, num_envs=1, seed=2)
    buffer.save(path, env_steps=35)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step.npz"]
    assert make_buffer().load(path) == 35


def test_failed_save_keeps_previous_file_and_leaves_no_temporary_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffer = make_buffer()
    path = tmp_path / "step.npz"
    fill(buffer, 5, num_envs=1)
    buffer.save(path, env_steps=5)
    before = path.read_bytes()

    def half_written(handle, **arrays):  # type: ignore[no-untyped-def]
        handle.write(b"PK\x03\x04 partial")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", half_written)
    fill(buffer, 30, num_envs=1, seed=3)
    with pytest.raises(OSError, match="disk full"):
        buffer.save(path, env_steps=35)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step.npz"]


# --- 7. sample dtypes and shapes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action_shape", "action_dtype", "expected_actions"),
    [
        ((), np.int64, (torch.int64, (8,))),  # discrete
        ((2,), np.float32, (torch.float32, (8, 2))),  # continuous, act_dim 2
    ],
)
def test_sample_returns_torch_tensors_with_expected_dtypes_and_shapes(
    action_shape: tuple[int, ...], action_dtype: type, expected_actions: tuple[torch.dtype, tuple[int, ...]]
) -> None:
    buffer = make_buffer(
        capacity=10, num_envs=3, obs_shape=(4, 3), action_shape=action_shape, action_dtype=action_dtype
    )
    fill(buffer, 6, num_envs=3)
    batch = buffer.sample(8, np.random.default_rng(0))
    assert set(batch) == set(FIELDS)
    assert all(isinstance(value, torch.Tensor) for value in batch.values())
    shapes = {name: (value.dtype, tuple(value.shape)) for name, value in batch.items()}
    assert shapes == {
        "obs": (torch.float32, (8, 4, 3)),
        "next_obs": (torch.float32, (8, 4, 3)),
        "actions": expected_actions,
        "rewards": (torch.float32, (8,)),
        "discounts": (torch.float32, (8,)),
    }


def test_a_replay_stack_gathers_each_seeds_own_sample_and_keeps_its_writes_its_own(tmp_path: Path) -> None:
    """N seeds' buffers moved into one storage (``ReplayStack``, buffers with contents already: a resumed seed's):
    each seed's rows of one gather are its own ``sample`` from an equal generator, an absent seed draws nothing, and
    what a seed adds afterwards lands in its slice only (its save -> load round trip as before)."""
    buffers = [make_buffer(capacity=32, num_envs=2, n_step=2) for _ in range(3)]
    twins = [make_buffer(capacity=32, num_envs=2, n_step=2) for _ in range(3)]
    for k, (buffer, twin) in enumerate(zip(buffers, twins, strict=True)):
        fill(buffer, 10 + 7 * k, 2, seed=k, continuing=True)
        fill(twin, 10 + 7 * k, 2, seed=k, continuing=True)
    stack = ReplayStack(buffers)
    for k, (buffer, twin) in enumerate(zip(buffers, twins, strict=True)):  # seed 2 wraps around, seed 0 does not
        fill(buffer, 5 + 9 * k, 2, seed=10 + k, continuing=True)
        fill(twin, 5 + 9 * k, 2, seed=10 + k, continuing=True)
    for step in range(3):
        rngs = [np.random.default_rng(100 * step + k) for k in range(3)]
        own = [twin.sample(8, np.random.default_rng(100 * step + k)) for k, twin in enumerate(twins)]
        present = [k != step for k in range(3)]
        fields = stack.sample([2, 0, 1], 8, [rngs[k] if present[k] else None for k in (2, 0, 1)])
        for j, k in enumerate((2, 0, 1)):
            assert all(torch.equal(fields[key][j], own[k][key]) for key in FIELDS) == present[k]
            assert (rngs[k].integers(1 << 30) == np.random.default_rng(100 * step + k).integers(1 << 30)) != present[k]
    path = tmp_path / "seed_1.npz"
    buffers[1].save(path, env_steps=5)
    loaded = make_buffer(capacity=32, num_envs=2, n_step=2)
    loaded.load(path)
    assert stored_rows(loaded) == stored_rows(twins[1])
