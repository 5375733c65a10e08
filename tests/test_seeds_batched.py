"""``train.seeds`` batched (``train.batch_seeds``, the default), PPO and what is not "member k is the run with
``seed: k``" (that, for every family: ``tests/test_seeds_contract.py``): a batched run killed mid-way resumes each
seed from its own checkpoint; the acting form stacks plain MLPs and names why others act member by member; more seeds
than the memory holds are refused in one line; the seeds' evaluations and categorical draws batched are each seed's
own."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.evaluation.evaluator import EvalResult
from rlcore.params import load_params
from rlcore.stages.train import train_stage
from tests.cli_support import assert_refused, run_in_process
from tests.conftest import PROJECT, preset_text, sets

TINY = [
    "name=seeds",
    "train.max_steps=1024",
    "train.eval_every=512",
    "train.log_every=512",
    "train.eval_episodes=2",
    "train.target_return=null",
    "train.max_wall_seconds=null",
    "train.progress_bar=off",
]
"""PPO CartPole (params.yaml): 16 envs x 32 steps per rollout, a checkpoint after each of the two updates."""
RTOL, ATOL = 1e-5, 1e-6
"""Weights and optimizer moments of a resumed seed against its one-seed run: batched matrix products and masked sums
round differently from the unbatched kernels (measured: at most 6e-8 on the weights after two updates)."""


def train_project(root: Path, overrides: list[str], preset: str = "params.yaml") -> Path:
    """``rlcore train`` of ``preset`` (as params.yaml) with ``overrides`` in ``root`` (created); returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text(preset_text(preset))
    train_stage(load_params(root / "params.yaml", overrides), root)
    return root


def checkpoints(run_dir: Path) -> list[Any]:
    return [load_checkpoint(path) for _, path in list_checkpoints(run_dir / "checkpoints")]


def max_difference(mine: Any, theirs: Any, where: str) -> float:
    """The largest difference between two checkpoints' tensor trees (float tensors close within RTOL and ATOL;
    integer and bool tensors, the random-number states among them, and everything else equal)."""
    if isinstance(mine, torch.Tensor):
        assert isinstance(theirs, torch.Tensor) and mine.dtype == theirs.dtype and mine.shape == theirs.shape, where
        if not mine.is_floating_point():
            assert torch.equal(mine, theirs), where
            return 0.0
        torch.testing.assert_close(mine, theirs, rtol=RTOL, atol=ATOL, msg=where)
        return float((mine.double() - theirs.double()).abs().max()) if mine.numel() else 0.0
    if isinstance(mine, dict):
        assert isinstance(theirs, dict) and mine.keys() == theirs.keys(), where
        return max([max_difference(mine[key], theirs[key], f"{where}/{key}") for key in mine], default=0.0)
    if isinstance(mine, list | tuple):
        assert len(mine) == len(theirs), where
        pairs = enumerate(zip(mine, theirs, strict=True))
        return max([max_difference(a, b, f"{where}[{i}]") for i, (a, b) in pairs], default=0.0)
    assert mine == theirs, f"{where}: {mine!r} != {theirs!r}"
    return 0.0


def untimed(evaluations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in entry.items() if key != "wall_seconds"} for entry in evaluations]


def assert_same_run(batched: Path, single: Path) -> float:
    """Every checkpoint of the seed's folder in a batched run equals the one-seed run's; returns the largest weight
    or optimizer-state difference."""
    ours, theirs = checkpoints(batched), checkpoints(single)
    assert [c.path.name for c in ours] == [c.path.name for c in theirs] and ours, (ours, theirs)
    largest = 0.0
    for mine, other in zip(ours, theirs, strict=True):
        where = mine.path.name
        assert mine.meta["gradient_steps"] > 0
        for key in ("env_steps", "gradient_steps", "updates", "numpy_rng", "skipped_steps"):
            assert mine.meta.get(key) == other.meta.get(key), f"{where} {key}"
        # Discrete actions: the same episodes exactly; Box actions move with the weights' last bits, which 200 steps
        # of Pendulum amplify (a std_return 6.7e-6 apart, relatively, on an AVX512-FP16 Xeon; another run differs by
        # percents).
        curves = untimed(mine.meta["evaluations"]), untimed(other.meta["evaluations"])
        assert len(curves[0]) == len(curves[1]), where
        for ours_entry, their_entry in zip(*curves, strict=True):
            assert ours_entry == pytest.approx(their_entry, rel=1e-4, abs=1e-9), where
        largest = max(largest, max_difference(mine.tensors, other.tensors, where))
    return largest


class KilledAt:
    """An evaluation callback that raises at the first evaluation of ``step`` (a kill of the process there)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def __call__(self, step: int, result: EvalResult) -> bool:
        if step == self.step:
            raise KeyboardInterrupt(f"killed at step {step}")
        return False


@pytest.mark.parametrize(
    "memory", [[], ["policy.memory={type: gru, size: 8, sequence_length: 8}"]], ids=["stacked", "recurrent"]
)
def test_a_killed_batched_run_resumes_every_seed_from_its_own_checkpoint(
    memory: list[str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed after seed 0's checkpoint at 1024 and before seed 1's: the next run resumes seed 0 at 1024 and seed 1
    at 512 (each with its own learning rate from then on; seed 0 finishes first, seed 1 goes on alone) and each ends
    as its one-seed run resumed from the same folder does, whether the seeds are stacked or (a recurrent policy) each
    acts in turn with its own memory and random numbers. Progress lines name their seed."""
    overrides = [*TINY, *memory, "train.max_steps=1536", "train.seeds=[0, 1]"]
    root = tmp_path / "batched"
    root.mkdir()
    shutil.copy(PROJECT / "params.yaml", root / "params.yaml")
    with pytest.raises(KeyboardInterrupt):
        train_stage(load_params(root / "params.yaml", overrides), root, on_evaluation=KilledAt(1024))
    run = root / "runs" / "seeds"
    assert [step for step, _ in list_checkpoints(run / "seed_0" / "checkpoints")] == [512, 1024]
    assert [step for step, _ in list_checkpoints(run / "seed_1" / "checkpoints")] == [512]
    for seed in (0, 1):  # the one-seed runs resume from copies of the killed seeds' folders
        single = tmp_path / f"seed_{seed}"
        shutil.copytree(run / f"seed_{seed}", single / "runs" / "seeds")
        train_project(single, [*overrides[:-1], f"seed={seed}"])
    with caplog.at_level(logging.INFO, logger="rlcore"):
        train_stage(load_params(root / "params.yaml", overrides), root)
    assert "seed 0: env steps 1536 | eval" in caplog.text and "seed 1: env steps 1024 | eval" in caplog.text
    for seed in (0, 1):
        assert checkpoints(run / f"seed_{seed}")[-1].meta["env_steps"] == 1536
        assert_same_run(run / f"seed_{seed}", tmp_path / f"seed_{seed}" / "runs" / "seeds")


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ([], None),
        (["algo.normalize_rewards=true", "algo.grad_accumulation=2", "env.curriculum=[{name: only}]"], None),
        (["algo.reward_signals={rnd: {strength: 0.1}}"], None),  # each seed's own signals, before the update
        (["algo.value_head={type: categorical, bins: 11}"], "a categorical or transformed value head"),
        (["policy.memory={type: gru, size: 8, sequence_length: 8}"], "a RecurrentActorCritic"),
        (["train.precision=bf16"], "train.precision bf16"),
        (["env.id=Taxi-v4", "env.action_mask=info"], "observations other than flat vectors"),
    ],
)
def test_the_acting_form_stacks_plain_mlps_and_names_what_acts_member_by_member(
    overrides: list[str], reason: str | None
) -> None:
    """Every configuration trains its seeds as one program; the seeds' networks are stacked where they are plain
    MLP actor-critics, else each seed's own policy acts and learns in turn, for the reason named."""
    from rlcore.envs.vector import make_vector_env
    from rlcore.registry import algorithm_class
    from rlcore.trainers.on_policy_acting import stacking_problem

    params = load_params(PROJECT / "params.yaml", overrides)
    env = make_vector_env(params.env, 1)  # the spaces the policy sees (a mask packed into a Dict observation)
    env.close()
    spaces = env.single_observation_space, env.single_action_space
    policy = algorithm_class("ppo").make_policy(*spaces, params.policy, params.algo)
    assert stacking_problem(params, policy, torch.device("cpu")) == reason


def test_more_seeds_than_the_memory_holds_are_refused_in_one_line_and_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory holds one seed's run (1.5 times its estimate) but not two: batched, refused before anything is
    written; one after another it trains."""
    import gymnasium as gym

    from rlcore.trainers import memory_estimate

    params = load_params(PROJECT / "params.yaml")
    env = gym.make(params.env.id)
    one = sum(size for size, _ in memory_estimate.estimate(params, env.observation_space, env.action_space).values())
    monkeypatch.setattr(memory_estimate, "available_memory", lambda: int(1.5 * one))
    shutil.copy(PROJECT / "params.yaml", tmp_path / "params.yaml")
    outcome = run_in_process(["train", *sets([*TINY, "train.seeds=[0, 1]"])], tmp_path)
    assert_refused(outcome, "train.seeds: 2 seeds trained together", "train.batch_seeds: false")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["params.yaml"]
    train_project(tmp_path, [*TINY, "train.max_steps=512", "train.seeds=[0, 1]", "train.batch_seeds=false"])
    assert (tmp_path / "runs" / "seeds" / "seed_1" / "train_summary.json").is_file()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_evaluations_run_together_are_each_policys_own_evaluation(env_id: str) -> None:
    """Three policies with their own weights and normalizer statistics, each with its own evaluator (its episode
    seeds; 5 episodes in batches of 2, 2 and 1; a step cap that cuts some): every seed's result from one batched
    forward pass per step is its evaluator's result for its own policy, for all seeds and for a subset of them."""
    from rlcore.evaluation.batched import evaluate_together
    from rlcore.evaluation.evaluator import Evaluator
    from rlcore.nets.policies import ActorCritic
    from rlcore.nets.stacked_actor_critic import StackedActorCritic
    from rlcore.registry import algorithm_class
    from rlcore.trainers.on_policy_acting import greedy_of_seeds

    params = load_params(PROJECT / "params.yaml", [f"env.id={env_id}", "policy.normalize_obs=true"])
    evaluators = [Evaluator(params.env, 5, 100 * k, max_parallel_envs=2, max_episode_steps=40) for k in range(3)]
    space, actions = evaluators[0].env.single_observation_space, evaluators[0].env.single_action_space
    policies: list[ActorCritic] = []
    for k in range(3):
        torch.manual_seed(k)
        policy = algorithm_class("ppo").make_policy(space, actions, params.policy, params.algo)
        assert isinstance(policy, ActorCritic)
        policy.obs_normalizer.update(torch.randn(64, *space.shape, dtype=torch.float64) * (k + 1) + k)
        policies.append(policy)
    stacked = StackedActorCritic(policies)
    try:
        alone = [evaluator.evaluate(policy) for evaluator, policy in zip(evaluators, policies, strict=True)]
        assert len({tuple(result.returns) for result in alone}) == 3  # the seeds differ: a mix-up would show
        assert any(result.truncated for result in alone)  # the step cap applies
        together = evaluate_together(evaluators, greedy_of_seeds(stacked, [0, 1, 2]))
        some = evaluate_together([evaluators[2], evaluators[0]], greedy_of_seeds(stacked, [2, 0]))
    finally:
        for evaluator in evaluators:
            evaluator.close()
    for mine, theirs in [*zip(together, alone, strict=True), (some[0], alone[2]), (some[1], alone[0])]:
        assert mine.lengths == theirs.lengths and mine.truncated == theirs.truncated
        # Discrete: the same greedy actions, the same returns; Box: actions equal up to the batched matmul's rounding.
        np.testing.assert_allclose(mine.returns, theirs.returns, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(("seeds", "envs", "actions"), [(1, 16, 2), (3, 5, 2), (4, 7, 6)])
def test_all_seeds_sampled_at_once_draw_what_each_seeds_categorical_draws(seeds: int, envs: int, actions: int) -> None:
    """``StackedActorCritic.sample_seeds`` (one Exp(1) draw per seed from its generator, one argmax for all) gives
    bitwise the actions ``Categorical.sample()`` of each seed's own distribution draws from torch's global generator,
    and leaves each seed's generator where that draw leaves the global one; probabilities ``multinomial`` refuses
    raise as they do unbatched."""
    from torch.distributions import Categorical

    from rlcore.nets.stacked_actor_critic import StackedActorCritic

    for draw in range(20):
        logits = torch.randn(seeds, envs, actions, generator=torch.Generator().manual_seed(draw)) * (draw % 4 + 1)
        generators = [torch.Generator().manual_seed(1000 * draw + k) for k in range(seeds)]
        batched = StackedActorCritic.sample_seeds(Categorical(logits=logits), generators)
        expected = []
        for k in range(seeds):
            torch.manual_seed(1000 * draw + k)
            expected.append(Categorical(logits=logits[k]).sample())
            assert torch.equal(generators[k].get_state(), torch.get_rng_state())
        assert batched.dtype == torch.int64 and torch.equal(batched, torch.stack(expected))
    broken = torch.zeros(seeds, envs, actions)
    broken[-1, 0, 0] = torch.nan
    with pytest.raises(RuntimeError, match="probability tensor"):
        StackedActorCritic.sample_seeds(Categorical(logits=broken, validate_args=False), generators)
