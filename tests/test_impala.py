"""IMPALA and its actors (issue 13): trajectories and weights between processes, real subprocess and Dask actors,
a killed actor replaced mid-run, and the preset's learning threshold on the held-out test score."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import PROJECT, outputs

from rlcore.common.files import read_json
from rlcore.data.rollouts import TrajectoryBatch
from rlcore.params import load_params
from rlcore.registry import algorithm_class
from rlcore.stages import evaluate_stage, select_stage, train_stage
from rlcore.workers.actors.actor import Actor, ActorSpec
from rlcore.workers.actors.runners import DevRunner, _refresh
from rlcore.workers.weights import WeightsCodec

# `serial` (run alone, after the others): the tests with actor processes (local or Dask) running side by side, for
# their timing and IMPALA's learning, and the one whose learner thread finishes a write 50 ms later. The others run
# in this process (the dev runner), seeded: the same on a busy machine.

PRESET = PROJECT / "configs" / "impala-cartpole.yaml"
QUICK = ["train.progress_bar=off", "train.target_return=null"]


def _params(*overrides: str):
    return load_params(PRESET, [*QUICK, *overrides])


def _spec(params, actor_id: int = 0, env_seed: int = 0) -> ActorSpec:
    return ActorSpec(params.model_dump(mode="json"), actor_id, env_seed, sampling_seed=123)


def _summary(root: Path, params) -> dict:
    return read_json(root / "runs" / params.name / "train_summary.json")


def _curve(root: Path, params) -> dict:
    return read_json(root / "runs" / params.name / "dvclive" / "metrics.json")


def test_an_actor_trajectory_has_the_batch_layout_and_counts_its_episodes():
    params = _params("algo.trajectory_length=300", "env.num_envs=3")
    actor = Actor(_spec(params, actor_id=1, env_seed=7))
    codec = WeightsCodec(actor.policy)
    actor.set_weights(5, codec.encode(actor.policy))
    trajectory = actor.rollout()
    actor.close()
    assert trajectory["obs"].shape == (301, 3, 4) and trajectory["actions"].shape == (300, 3)
    assert trajectory["version"] == 5 and trajectory["actor_id"] == 1
    # Every valid step of an episode that ended inside the trajectory is counted once in its return.
    ended = int(trajectory["episode_end"].sum())
    assert len(trajectory["episode_returns"]) == ended > 0
    assert trajectory["episode_lengths"].sum() <= int(trajectory["valid"].sum())
    batch = TrajectoryBatch.stack([trajectory, {**trajectory, "version": 4}])
    assert batch.obs.shape == (301, 6, 4) and batch.obs.dtype == torch.float32
    assert batch.versions.tolist() == [5, 5, 5, 4, 4, 4]
    assert batch.env_steps == 1800


def test_weights_codec_round_trips_every_tensor_of_the_policy_bitwise():
    params = _params("policy.normalize_obs=true")
    algo_cls = algorithm_class("impala")
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    source = algo_cls.make_policy(env.observation_space, env.action_space, params.policy, params.algo)
    with torch.no_grad():
        for tensor in source.state_dict().values():
            tensor.copy_(torch.randn(tensor.shape, dtype=tensor.dtype))
    target = algo_cls.make_policy(env.observation_space, env.action_space, params.policy, params.algo)
    codec = WeightsCodec(source)
    codec.decode_into(target, codec.encode(source))
    for key, value in source.state_dict().items():
        assert torch.equal(value, target.state_dict()[key]), key


@pytest.mark.serial
def test_an_actor_copies_published_weights_only_when_the_write_is_complete():
    params = _params()
    actor = Actor(_spec(params))
    codec = WeightsCodec(actor.policy)
    flat = codec.encode(actor.policy) * 2.0  # exact in float32 too
    version = np.array([3, 2], dtype=np.int64)  # the learner began writing version 3, finished version 2
    writer = threading.Timer(0.05, lambda: version.__setitem__(1, 3))  # ... and finishes it a moment later
    writer.start()
    _refresh(actor, flat, version)
    writer.join()
    actor.close()
    assert actor.version == 3
    assert np.array_equal(codec.encode(actor.policy), flat)


def test_dev_runner_runs_are_reproducible_and_report_the_policy_lag(tmp_path: Path):
    params = _params("algo.runner=dev", "train.max_steps=4096", "train.eval_every=2048")
    for run in ("a", "b"):
        train_stage(params, tmp_path / run)
    first, second = (_summary(tmp_path / run, params)["evaluations"] for run in ("a", "b"))
    strip = [[{k: v for k, v in e.items() if k != "wall_seconds"} for e in s] for s in (first, second)]
    assert strip[0] == strip[1]
    curve = _curve(tmp_path / "a", params)["train"]
    # In-process actors act with the newest weights: every trajectory of a batch has lag 0.
    assert curve["policy_lag"] == 0.0 and curve["dropped_trajectories"] == 0.0
    with DevRunner(lambda actor_id, incarnation: [_spec(params, actor_id, 100 * actor_id)], 2) as runner:
        actor = runner.actors[0].actors[0]
        runner.start([actor.codec.encode(actor.policy)], 0)
        trajectories = runner.collect(3, 0)
    assert [t["actor_id"] for t in trajectories] == [0, 1, 0]


def _kill_one_process_when_running(prefix: str, checkpoints: Path, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL one child process named ``prefix...`` once the run has written its first checkpoint (its actors
    have been sending for a while)."""
    while not stop.is_set():
        actors = [p for p in multiprocessing.active_children() if p.name.startswith(prefix)]
        if list(checkpoints.glob("step_*.pt")) and actors:
            os.kill(actors[0].pid, signal.SIGKILL)
            killed.append(actors[0].pid)
            return
        time.sleep(0.02)


def _train_killing_one(params, root: Path, prefix: str) -> list[int]:
    killed: list[int] = []
    stop = threading.Event()
    checkpoints = root / "runs" / params.name / "checkpoints"
    killer = threading.Thread(
        target=_kill_one_process_when_running, args=(prefix, checkpoints, killed, stop), daemon=True
    )
    killer.start()
    try:
        train_stage(params, root)
    finally:
        stop.set()
        killer.join(timeout=5)
    assert killed, f"no {prefix!r} process was found to kill"
    return killed


@pytest.mark.serial
@pytest.mark.slow
def test_killing_an_actor_process_mid_run_replaces_it_and_the_run_finishes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    params = _params("algo.runner=local", "train.max_steps=40000", "train.eval_every=8192")
    with caplog.at_level(logging.WARNING, logger="rlcore"):
        killed = _train_killing_one(params, tmp_path, "rlcore-actor-")
    summary = _summary(tmp_path, params)
    assert summary["env_steps"] >= 40000
    assert any(
        f"(pid {killed[0]}) died" in record.getMessage() and "replaced" in record.getMessage()
        for record in caplog.records
    ), [r.getMessage() for r in caplog.records]
    assert _curve(tmp_path, params)["train"]["actor_replacements"] >= 1
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("rlcore-actor-")]


@pytest.mark.serial
@pytest.mark.slow
def test_dask_actors_on_a_local_cluster_train_and_survive_a_lost_worker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    # A LocalCluster of 2 worker processes (deploy.dask_address null); one worker is killed once both run.
    params = _params("algo.runner=dask", "train.max_steps=60000", "train.eval_every=8192")
    with caplog.at_level(logging.WARNING, logger="rlcore"):
        _train_killing_one(params, tmp_path, "Dask Worker process")
    assert _summary(tmp_path, params)["env_steps"] >= 60000
    messages = [record.getMessage() for record in caplog.records if record.name == "rlcore"]
    assert any("lost its worker; Dask restarted it" in m for m in messages), messages
    assert _curve(tmp_path, params)["train"]["learner_busy_fraction"] > 0


@pytest.mark.serial
@pytest.mark.slow
def test_impala_preset_with_two_actor_processes_reaches_475_on_the_test_score(tmp_path: Path):
    # configs/impala-cartpole.yaml: 2 subprocess actors x 8 envs, seed 0, its budget; the selected model's
    # 100 held-out test episodes are what counts.
    params = load_params(PRESET, ["train.progress_bar=off"])
    assert params.algo.runner == "local" and params.algo.num_actors == 2
    train_stage(params, tmp_path)
    evaluate_stage(params, tmp_path)
    select_stage(params, tmp_path)
    metrics = read_json(outputs(tmp_path).metrics)
    assert metrics["episodes"] == 100
    assert metrics["env_steps"] <= params.train.max_steps + 2 * 8 * 8
    assert metrics["mean_return"] >= 475, metrics


def test_a_recurrent_learner_unrolls_each_trajectory_from_the_actor_s_state_and_reproduces_its_log_probs():
    """policy.memory for IMPALA: the actor carries its LSTM state across trajectories (and resets it after each
    autoreset step); each trajectory carries the state it started from; the learner's unroll from that state,
    with the same weights, gives back the actor's behaviour log-probs exactly (log rho = 0), resets included."""
    params = _params("algo.trajectory_length=120", "env.num_envs=3", "policy.memory={type: lstm, size: 16}")
    actor = Actor(_spec(params, env_seed=3))
    codec = WeightsCodec(actor.policy)
    actor.set_weights(0, codec.encode(actor.policy))
    first, second = actor.rollout(), actor.rollout()
    end_state = actor.state
    actor.close()
    assert first["initial_state"].shape == (3, 2, 16) and not first["initial_state"].any()  # episodes start at zero
    assert second["initial_state"].any()  # ...and go on across trajectories with the state they had
    assert int((~first["valid"]).sum()) > 0, "no episode ended: the resets are not exercised"

    algorithm_cls = algorithm_class("impala")
    learner = algorithm_cls.make_policy(actor.env.single_observation_space, actor.env.single_action_space,
                                        params.policy, params.algo)  # fmt: skip
    codec.decode_into(learner, codec.encode(actor.policy))
    for trajectory in (first, second):
        batch = TrajectoryBatch.stack([trajectory])
        steps, envs = batch.rewards.shape
        reset_after = torch.cat([~batch.valid, torch.zeros(1, envs, dtype=torch.bool)])
        with torch.no_grad():
            unrolled, after = learner.sequence_features(batch.obs, batch.initial_state, reset_after)
            dist = learner.distribution_of(unrolled[:steps].reshape(steps * envs, -1))
            log_probs = dist.log_prob(batch.actions.reshape(steps * envs)).reshape(steps, envs)
        assert torch.allclose(log_probs, batch.behaviour_log_probs, atol=1e-5)
    # The state after the second trajectory's last step (before its bootstrap observation) is the actor's.
    with torch.no_grad():
        _, after = learner.sequence_features(batch.obs[:-1], batch.initial_state, ~batch.valid)
    assert torch.allclose(after, end_state, atol=1e-5)


def test_a_recurrent_impala_run_trains_evaluates_and_selects_through_the_dev_runner(tmp_path: Path):
    params = _params(
        "algo.runner=dev", "policy.memory={type: gru, size: 16}", "train.max_steps=4096", "train.eval_every=2048"
    )
    train_stage(params, tmp_path)
    summary = _summary(tmp_path, params)
    assert summary["env_steps"] >= 4096 and summary["gradient_steps"] > 0
    curve = _curve(tmp_path, params)["train"]
    assert np.isfinite(curve["policy_loss"]) and np.isfinite(curve["mean_rho"])
    evaluate_stage(params, tmp_path)
    select_stage(params, tmp_path)
    metrics = read_json(outputs(tmp_path).metrics)
    assert metrics["episodes"] == params.eval.test_episodes and np.isfinite(metrics["mean_return"])
