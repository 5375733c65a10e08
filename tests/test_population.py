"""Population-based learners (issue 18): OpenAI-ES and SVPG, their rollout tasks and runners.

Hand-computed pieces (centered ranks, the ES step, the Stein direction), the rollout tasks on a real worker,
ES's determinism whatever the runner and the number of workers, resume, a Dask worker killed mid-iteration,
and the presets' learning thresholds on the held-out test score.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import PROJECT, outputs

from rlcore.algos.es import ES, centered_ranks, merge_moments
from rlcore.algos.noise_table import noise_rows, noise_table
from rlcore.algos.population_tasks import PairResults, PerturbedPairs
from rlcore.algos.svpg import SVPG, actor_parameters, rbf_kernel, stein_direction
from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.common.errors import ConfigError
from rlcore.common.files import read_json
from rlcore.nets.blocks import ObsNormalizer
from rlcore.params import load_params
from rlcore.stages import evaluate_stage, export_stage, select_stage, train_stage
from rlcore.trainers.population import iteration_seed
from rlcore.workers.population.runners import DevRunner, LocalRunner

# `serial` (run alone, after the others): the tests with worker processes (local or Dask) running side by side,
# for their timing. The others run in this process (the dev runner, SVPG), seeded: the same on a busy machine.

ES_PRESET = PROJECT / "configs" / "es-cartpole.yaml"
SVPG_PRESET = PROJECT / "configs" / "svpg-cartpole.yaml"
QUICK = ["train.progress_bar=off", "train.target_return=null"]
SMALL_ES = [*QUICK, "algo.population_size=16", "algo.pairs_per_task=2", "train.eval_episodes=2"]
"""8 pairs in 4 tasks: work for every worker; short periodic evaluations."""


def _es_params(*overrides: str):
    return load_params(ES_PRESET, [*SMALL_ES, *overrides])


def _checkpoint_tensors(root: Path, name: str, index: int) -> tuple[str, dict]:
    checkpoints = list_checkpoints(root / "runs" / name / "checkpoints")
    assert len(checkpoints) > index, [path.name for _, path in checkpoints]
    path = checkpoints[index][1]
    return path.name, load_checkpoint(path).tensors


def _assert_same_tensors(first: dict, second: dict, where: str = "") -> None:
    if isinstance(first, torch.Tensor):
        assert torch.equal(first, second), where
    elif isinstance(first, dict):
        assert first.keys() == second.keys(), where
        for key in first:
            _assert_same_tensors(first[key], second[key], f"{where}.{key}")
    elif isinstance(first, list | tuple):
        for i, (a, b) in enumerate(zip(first, second, strict=True)):
            _assert_same_tensors(a, b, f"{where}.{i}")
    else:
        assert first == second, where


# --- the pieces, by hand ----------------------------------------------------------------------------------------


def test_centered_ranks_span_minus_half_to_half_and_ties_share_their_mean_rank():
    returns = np.array([[1.0, 3.0], [3.0, 0.0]])
    # sorted: 0 (rank 0), 1 (rank 1), 3 and 3 (ranks 2 and 3: both 2.5); ranks / 3 - 0.5
    expected = np.array([[1 / 3 - 0.5, 2.5 / 3 - 0.5], [2.5 / 3 - 0.5, -0.5]])
    assert np.allclose(centered_ranks(returns), expected)
    assert np.allclose(centered_ranks(np.array([5.0, -2.0, 7.0])), [0.0, -0.5, 0.5])


def test_the_noise_table_is_built_once_per_process_from_its_seed_and_is_read_only():
    table = noise_table(3, 1000)
    assert table is noise_table(3, 1000)
    assert table.dtype == np.float32 and not table.flags.writeable
    assert np.array_equal(table, np.random.default_rng(3).standard_normal(1000, dtype=np.float32))
    assert np.array_equal(noise_rows(table, [5, 0], 3), np.stack([table[5:8], table[0:3]]))


def test_an_es_step_with_plain_sgd_moves_theta_by_the_rank_weighted_noise():
    params = load_params(
        ES_PRESET,
        ["algo.optimizer=sgd", "algo.momentum=0", "algo.lr=1", "algo.weight_decay=0", "algo.population_size=6"],
    )
    es = _es_algorithm(params)
    tasks = es.ask(seed=1, first_env_seed=100)
    assert [task.env_seed for task in tasks] == [100]  # 3 pairs in one task: pair j starts from seed 100 + j
    returns = np.array([[10.0, 0.0], [0.0, 10.0], [5.0, 5.0]])
    results = [PairResults(0, returns, np.ones((3, 2), np.int64), np.zeros((3, 2), bool), *_no_obs(3))]
    before = torch.nn.utils.parameters_to_vector(es.policy.parameters()).detach().clone()
    es.tell(tasks, results, 0.0)
    after = torch.nn.utils.parameters_to_vector(es.policy.parameters()).detach()
    # ranks of [10, 0, 0, 10, 5, 5] (ties averaged): 10 -> 4.5, 0 -> 0.5, 5 -> 2.5; / 5 - 0.5
    weights = np.array([0.8, -0.8, 0.0])  # F+ - F- per pair
    eps = noise_rows(noise_table(0, params.algo.noise_table_size), tasks[0].offsets, before.numel())
    expected = before + torch.from_numpy(weights @ eps / 6).float()  # lr 1, ascent; / the number of rollouts
    assert torch.allclose(after, expected, atol=1e-6)
    assert es.iterations == 1 and torch.equal(es.theta.detach(), after)


def _es_algorithm(params) -> ES:
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    with torch.random.fork_rng():  # seeded initial weights, whatever ran before; the caller's generator untouched
        torch.manual_seed(0)
        policy = ES.make_policy(env.observation_space, env.action_space, params.policy, params.algo)
    return ES(policy, params.algo)


def _no_obs(pairs: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((pairs, 2, 4)), np.zeros((pairs, 2, 4))


def test_observation_moments_merged_rollout_by_rollout_equal_one_update_on_all_observations():
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randn(n, 3, generator=generator) * (i + 1) + i for i, n in enumerate((5, 1, 12))]
    merged, direct = ObsNormalizer((3,), 10.0, True), ObsNormalizer((3,), 10.0, True)
    for batch in batches:
        merge_moments(merged, len(batch), batch.double().mean(0).numpy(), batch.double().var(0, unbiased=False).numpy())
    direct.update(torch.cat(batches))
    for key in ("mean", "var", "count"):
        assert torch.allclose(getattr(merged, key), getattr(direct, key)), key


def test_the_stein_direction_of_two_particles_matches_the_hand_computed_one():
    theta = torch.tensor([[0.0], [1.0]])
    gradients = torch.tensor([[1.0], [-1.0]])
    # squared distances [[0, 1], [1, 0]]: median 0.5, h = 0.5 / log 3, k_12 = exp(-1 / h) = 1 / 9
    kernel, bandwidth = rbf_kernel(theta)
    assert bandwidth == pytest.approx(0.5 / math.log(3))
    assert kernel[0, 1].item() == pytest.approx(1 / 9)
    phi, _ = stein_direction(theta, gradients, temperature=1.0)
    # phi_1 = (1 * 1 + 1/9 * (-1) + 2/h * 1/9 * (0 - 1)) / 2, and phi_2 = -phi_1 by symmetry
    expected = (8 / 9 - 4 * math.log(3) / 9) / 2
    assert phi[0, 0].item() == pytest.approx(expected)
    assert phi[1, 0].item() == pytest.approx(-expected)
    # A high temperature leaves the repulsion: the particles move apart.
    far, _ = stein_direction(theta, gradients, temperature=1e6)
    assert far[0, 0] < 0 < far[1, 0]


# --- the tasks on a real worker ---------------------------------------------------------------------------------


def test_mirrored_rollouts_start_from_the_same_seed_and_a_step_budget_aborts_them():
    params = _es_params("algo.runner=dev")
    runner = DevRunner(params.model_dump(mode="json"))
    es = _es_algorithm(params)
    flat = np.stack([runner.worker.codec.encode(es.policy)])
    task = PerturbedPairs(
        0, (11, 9_000, 77), env_seed=40, noise_std=0.0, noise_seed=0, noise_table_size=2**20, max_steps=None
    )
    with runner:
        (result,) = runner.run(0, flat, [task])
        assert isinstance(result, PairResults)
        # sigma 0: both rollouts of a pair are the same parameters from the same seed, so the same episode (a sigma of
        # 1e-9 still moves float32 weights below 0.01 by an ulp, which can flip an action whose logits nearly tie)
        assert np.array_equal(result.returns[:, 0], result.returns[:, 1])
        assert np.array_equal(result.obs_mean[:, 0], result.obs_mean[:, 1])
        assert len({tuple(mean) for mean in result.obs_mean[:, 0]}) == 3  # pairs have their own seeds
        assert np.array_equal(result.lengths, result.returns.astype(np.int64)) and not result.aborted.any()
        assert result.env_steps == int(result.lengths.sum())
        (capped,) = runner.run(0, flat, [dataclasses.replace(task, max_steps=5)])
    assert isinstance(capped, PairResults)
    assert (capped.lengths <= 5).all() and np.array_equal(capped.aborted, capped.lengths == 5)
    assert capped.aborted.any()


def test_an_env_that_never_ends_needs_a_rollout_budget_and_every_rollout_is_then_aborted(tmp_path: Path):
    never = ["env.id=recording_env:NeverEnding-v0", "eval.max_episode_steps=20", "algo.runner=dev"]
    with pytest.raises(ConfigError, match=r"algo.max_rollout_steps: recording_env:NeverEnding-v0 has no time limit"):
        train_stage(_es_params(*never), tmp_path)
    assert not (tmp_path / "runs").exists()
    params = _es_params(
        *never, "algo.max_rollout_steps=30", "train.max_steps=100", "train.eval_every=100", "train.log_every=100"
    )
    train_stage(params, tmp_path)
    curve = read_json(tmp_path / "runs" / params.name / "dvclive" / "metrics.json")["train"]
    assert curve["aborted_rollouts"] == 16 and curve["episode_length"] == 30


def test_es_params_are_checked_in_one_line():
    with pytest.raises(ConfigError, match=r"algo.population_size: .*must be even"):
        load_params(ES_PRESET, ["algo.population_size=7"])
    with pytest.raises(ConfigError, match=r"algo.noise_table_size: must hold at least the policy's 386 parameters"):
        _es_algorithm(load_params(ES_PRESET, ["algo.noise_table_size=100"]))


# --- determinism and resume -------------------------------------------------------------------------------------


@pytest.mark.serial
@pytest.mark.slow  # three whole ES runs, three worker processes (the costliest test left in `make test-fast`)
def test_es_parameters_after_3_iterations_are_identical_with_1_and_2_workers_and_in_process(tmp_path: Path):
    # A checkpoint after every iteration; observation normalization on, so its statistics (merged in pair order)
    # count too. Same seed -> same noise offsets, env seeds and task split whatever runs the tasks.
    common = ["policy.normalize_obs=true", "train.eval_every=1", "train.max_steps=1500"]
    runs = {
        "one": _es_params(*common, "algo.runner=local", "algo.num_workers=1"),
        "two": _es_params(*common, "algo.runner=local", "algo.num_workers=2"),
        "dev": _es_params(*common, "algo.runner=dev"),
    }
    third = {}
    for label, params in runs.items():
        train_stage(params, tmp_path / label)
        third[label] = _checkpoint_tensors(tmp_path / label, params.name, 2)
    assert third["one"][0] == third["two"][0] == third["dev"][0]  # the same env steps after 3 iterations
    assert third["one"][1]["policy"]["obs_normalizer.count"] > 100
    _assert_same_tensors(third["one"][1], third["two"][1], "1 vs 2 workers")
    _assert_same_tensors(third["one"][1], third["dev"][1], "workers vs in-process")


@pytest.mark.slow
def test_a_resumed_es_run_ends_with_the_parameters_of_an_uninterrupted_one(tmp_path: Path):
    params = _es_params("algo.runner=dev", "train.eval_every=1", "train.max_steps=2500")
    train_stage(params, tmp_path / "whole")
    checkpoints = list_checkpoints(tmp_path / "whole" / "runs" / params.name / "checkpoints")
    assert len(checkpoints) >= 4
    train_stage(params, tmp_path / "resumed", resume_from=checkpoints[1][1])
    whole = _checkpoint_tensors(tmp_path / "whole", params.name, -1 + len(checkpoints))
    resumed_list = list_checkpoints(tmp_path / "resumed" / "runs" / params.name / "checkpoints")
    resumed = resumed_list[-1][1].name, load_checkpoint(resumed_list[-1][1]).tensors
    assert resumed[0] == whole[0]
    _assert_same_tensors(whole[1], resumed[1], "resumed")


def test_iteration_seeds_differ_between_iterations_and_runs():
    seeds = {iteration_seed(seed, iteration) for seed in (0, 1) for iteration in range(50)}
    assert len(seeds) == 100


# --- lost workers -----------------------------------------------------------------------------------------------


def _kill_a_child_once(prefix: str, ready: Callable[[], bool], killed: list[int], stop: threading.Event) -> None:
    """SIGKILL one child process named ``prefix...`` as soon as ``ready()``."""
    while not stop.is_set():
        children = [p for p in multiprocessing.active_children() if p.name.startswith(prefix)]
        if children and ready():
            os.kill(children[0].pid, signal.SIGKILL)
            killed.append(children[0].pid)
            return
        time.sleep(0.005)


@pytest.mark.serial
@pytest.mark.slow
def test_a_killed_local_worker_is_replaced_and_its_tasks_are_re_issued(caplog: pytest.LogCaptureFixture):
    params = _es_params("algo.runner=local", "algo.num_workers=2", "algo.population_size=64")
    tree = params.model_dump(mode="json")
    es = _es_algorithm(params)
    weights = np.stack([DevRunner(tree).worker.codec.encode(es.policy)])
    tasks = es.ask(seed=5, first_env_seed=0)
    expected = DevRunner(tree).run(0, weights, tasks)
    killed: list[int] = []
    stop = threading.Event()
    with LocalRunner(tree, 2, timeout_seconds=60) as runner:
        runner.run(0, weights, tasks)  # both workers up and warm
        started = threading.Event()
        killer = threading.Thread(
            target=_kill_a_child_once, args=("rlcore-rollout-worker-", started.is_set, killed, stop), daemon=True
        )
        killer.start()
        with caplog.at_level(logging.WARNING, logger="rlcore"):
            started.set()
            results = runner.run(1, weights, tasks)
        stop.set()
        killer.join(timeout=5)
    assert killed and runner.replacements == 1
    assert any(f"(pid {killed[0]}) died" in r.getMessage() and "re-issued" in r.getMessage() for r in caplog.records)
    for got, want in zip(results, expected, strict=True):  # the iteration completed, every result as in-process
        assert np.array_equal(got.returns, want.returns) and np.array_equal(got.lengths, want.lengths)


@pytest.mark.serial
@pytest.mark.slow
def test_es_on_a_dask_cluster_survives_a_worker_killed_mid_iteration(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    # The training stage (what the pipeline flow's train task runs) on a LocalCluster of 2 worker processes; one
    # is SIGKILLed right after the first checkpoint, while the next iteration's tasks run.
    common = ["algo.population_size=32", "algo.pairs_per_task=4", "train.max_steps=15000", "train.eval_every=5000"]
    params = _es_params(*common, "algo.runner=dask", "algo.num_workers=2")
    checkpoints = tmp_path / "dask" / "runs" / params.name / "checkpoints"
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(
        target=_kill_a_child_once,
        args=("Dask Worker process", lambda: any(checkpoints.glob("step_*.pt")), killed, stop),
        daemon=True,
    )
    killer.start()
    try:
        with caplog.at_level(logging.WARNING, logger="rlcore"):
            train_stage(params, tmp_path / "dask")
    finally:
        stop.set()
        killer.join(timeout=5)
    assert killed, "no Dask worker process was found to kill"
    messages = [record.getMessage() for record in caplog.records if record.name == "rlcore"]
    assert any("lost during iteration" in m for m in messages), messages
    # Every iteration completed with the results an in-process run computes: the same parameters at the end.
    dev = _es_params(*common, "algo.runner=dev")
    train_stage(dev, tmp_path / "dev")
    last = len(list_checkpoints(checkpoints)) - 1
    on_dask, in_process = (
        _checkpoint_tensors(tmp_path / "dask", params.name, last),
        _checkpoint_tensors(tmp_path / "dev", dev.name, last),
    )
    assert on_dask[0] == in_process[0]
    _assert_same_tensors(on_dask[1]["policy"], in_process[1]["policy"], "policy")


# --- SVPG -------------------------------------------------------------------------------------------------------


def test_svpg_publishes_a_copy_of_the_particle_with_the_best_recent_training_returns():
    import gymnasium as gym

    params = load_params(SVPG_PRESET, ["algo.num_particles=3", "algo.best_window=2"])
    env = gym.make("CartPole-v1")
    torch.manual_seed(0)
    policy = SVPG.make_policy(env.observation_space, env.action_space, params.policy, params.algo)
    svpg = SVPG(policy, params.algo)
    distinct = [torch.nn.utils.parameters_to_vector(actor_parameters(p)) for p in svpg.particles]
    assert not torch.equal(distinct[0], distinct[1])  # particles start apart
    for particle, returns in enumerate(([10.0, 30.0], [50.0], [100.0, 5.0, 15.0])):  # windows: 20, 50, 10 (last 2)
        svpg._remember(particle, np.array(returns))
    svpg._publish_best()
    assert svpg.best == 1
    for key, value in svpg.particles[1].state_dict().items():
        assert torch.equal(value, svpg.policy.state_dict()[key]), key


# --- learning -------------------------------------------------------------------------------------------------


def _learn(preset: Path, tmp_path: Path) -> dict:
    params = load_params(preset, ["train.progress_bar=off"])
    train_stage(params, tmp_path)
    evaluate_stage(params, tmp_path)
    select_stage(params, tmp_path)
    metrics = read_json(outputs(tmp_path).metrics)
    assert metrics["episodes"] == 100
    return metrics


@pytest.mark.serial
@pytest.mark.slow
def test_es_preset_with_two_worker_processes_reaches_475_on_the_test_score(tmp_path: Path):
    # configs/es-cartpole.yaml: seed 0, 32 rollouts per iteration on 2 local worker processes; stops at a periodic
    # evaluation of 500 (about 76k env steps, 12 iterations), within its 1M-step budget.
    metrics = _learn(ES_PRESET, tmp_path)
    assert metrics["mean_return"] >= 475, metrics


@pytest.mark.slow
def test_svpg_preset_reaches_475_on_the_test_score_and_exports_its_best_particle(tmp_path: Path):
    # configs/svpg-cartpole.yaml: seed 0, 4 particles x 16 envs x 8 steps per iteration, in-process; stops at a
    # periodic evaluation of 500 (about 70k env steps), within its 1M-step budget.
    metrics = _learn(SVPG_PRESET, tmp_path)
    assert metrics["mean_return"] >= 475, metrics
    params = load_params(SVPG_PRESET, ["train.progress_bar=off"])
    export_stage(params, tmp_path)
    card = read_json(outputs(tmp_path).export / "model_card.json")
    assert card["algorithm"] == "svpg"
    assert (outputs(tmp_path).export / "policy.onnx").is_file()
