"""One update of every registered algorithm on a fixed small batch (issue 10): what each update must do.

For every algorithm in ``rlcore.registry.ALGORITHMS`` and every action-space kind it accepts (CartPole-like
Discrete, Pendulum-like Box; spaces only, no env), one update (``policy_delay`` updates for TD3+BC) must:
return finite metrics with the algorithm's documented keys, change the policy and every parameter each of its
optimizers steps, and count gradient steps; be bitwise reproducible under a seed; and survive a round trip
through ``Algorithm.state_dict`` (the generic state saving of ``rlcore/algos/base.py``), so that a resumed
algorithm continues exactly as the original does. Also: ``rlcore.nets.blocks.TwinQ``'s shapes and its ``taken``.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from rlcore.algos.base import (
    ActorLearnerAlgorithm,
    Algorithm,
    OfflineAlgorithm,
    OffPolicyAlgorithm,
    OnPolicyAlgorithm,
    PopulationAlgorithm,
)
from rlcore.algos.population_tasks import (
    PairResults,
    ParticleSegment,
    PerturbedPairs,
    RolloutResult,
    RolloutTask,
    SegmentResult,
)
from rlcore.config.sections import PolicyConfig
from rlcore.data.rollouts import RolloutBuffer, TrajectoryBatch
from rlcore.nets.blocks import TwinQ
from rlcore.registry import ALGORITHMS

SPACES: dict[str, tuple[spaces.Box, spaces.Space]] = {
    "discrete": (spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2)),  # CartPole-v1
    "box": (spaces.Box(-8.0, 8.0, (3,), np.float32), spaces.Box(-2.0, 2.0, (1,), np.float32)),  # Pendulum-v1
}
CASES = [
    pytest.param(name, kind, id=f"{name}-{kind}")
    for name, algo_cls in ALGORITHMS.items()
    for kind, (_, action_space) in SPACES.items()
    if isinstance(action_space, algo_cls.action_spaces)
]
OFF_POLICY_CASES = [case for case in CASES if issubclass(ALGORITHMS[case.values[0]], OffPolicyAlgorithm)]

BATCH = 32
"""Transitions in an off-policy or offline batch; an on-policy rollout is N_STEPS x N_ENVS."""
N_STEPS, N_ENVS = 8, 4
CONFIG_OVERRIDES: dict[type[Algorithm], dict[str, Any]] = {
    OnPolicyAlgorithm: {"n_steps": N_STEPS, "batch_size": 8, "n_epochs": 2},
    OffPolicyAlgorithm: {"batch_size": BATCH},
    OfflineAlgorithm: {"batch_size": BATCH},
    ActorLearnerAlgorithm: {},
    PopulationAlgorithm: {
        "population_size": 8,
        "pairs_per_task": 3,
        "noise_table_size": 100_000,
        "num_particles": 3,
        "n_steps": N_STEPS,
    },
}
"""Small fields set where the algorithm's config has them; everything else is the default."""

EXPECTED_METRICS: dict[str, set[str] | dict[str, set[str]]] = {
    "ppo": {
        "policy_loss",
        "value_loss",
        "entropy",
        "clip_fraction",
        "approx_kl",
        "explained_variance",
        "learning_rate",
        "clip_range",
        "epochs",
    },
    "a2c": {"policy_loss", "value_loss", "entropy", "explained_variance", "learning_rate"},
    "impala": {
        "policy_loss",
        "value_loss",
        "entropy",
        "explained_variance",
        "mean_rho",
        "clipped_rho_fraction",
        "learning_rate",
    },
    "dqn": {"loss", "q_mean", "epsilon"},
    "sac": {"critic_loss", "actor_loss", "alpha", "entropy", "q_mean"},
    "bc": {"discrete": {"loss", "accuracy"}, "box": {"loss", "mean_abs_error"}},
    "td3bc": {"critic_loss", "actor_loss", "q_mean"},
    "iql": {"value_loss", "critic_loss", "actor_loss", "advantage_mean"},
    "es": {
        "return_mean",
        "return_max",
        "return_min",
        "gradient_norm",
        "update_ratio",
        "weights_norm",
        "aborted_rollouts",
        "learning_rate",
    },
    "svpg": {
        "policy_loss",
        "value_loss",
        "entropy",
        "explained_variance",
        "kernel_bandwidth",
        "kernel_mean",
        "best_particle",
        "learning_rate",
    },
}
"""The keys each algorithm's ``update`` returns (a newly registered algorithm adds its entry here)."""


def family(algo_cls: type[Algorithm]) -> type[Algorithm]:
    for base in (OnPolicyAlgorithm, OffPolicyAlgorithm, OfflineAlgorithm, ActorLearnerAlgorithm, PopulationAlgorithm):
        if issubclass(algo_cls, base):
            return base
    raise AssertionError(f"{algo_cls.__name__} belongs to no algorithm family")


def build(name: str, kind: str, seed: int = 0) -> Algorithm:
    """The policy and the algorithm, their weights drawn under ``torch.manual_seed(seed)``."""
    algo_cls = ALGORITHMS[name]
    overrides = CONFIG_OVERRIDES[family(algo_cls)]
    config = algo_cls.Config(
        name=algo_cls.name, **{key: value for key, value in overrides.items() if key in algo_cls.Config.model_fields}
    )
    observation_space, action_space = SPACES[kind]
    torch.manual_seed(seed)
    policy = algo_cls.make_policy(observation_space, action_space, PolicyConfig(hidden_sizes=[16, 16]), config)
    return algo_cls(policy, config)


def random_actions(kind: str, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Valid actions in the policy's convention: int64 indices, or float32 values within [-2, 2] of shape + (1,)."""
    if kind == "discrete":
        return torch.randint(SPACES[kind][1].n, shape, generator=generator)
    return torch.rand(*shape, 1, generator=generator) * 4.0 - 2.0


def make_batch(algorithm: Algorithm, kind: str) -> Any:
    """The fixed batch of the algorithm's family, from its own seeded generator (the global RNG is untouched)."""
    generator = torch.Generator().manual_seed(1234)
    obs_dim = SPACES[kind][0].shape[0]
    fam = family(type(algorithm))
    if fam is OnPolicyAlgorithm:
        return make_rollout(algorithm, kind, generator)
    if fam is ActorLearnerAlgorithm:
        return make_trajectories(algorithm, kind, generator)
    if fam is PopulationAlgorithm:
        return make_population_results(algorithm, kind, generator)
    batch = {
        "obs": torch.randn(BATCH, obs_dim, generator=generator),
        "actions": random_actions(kind, (BATCH,), generator),
        "rewards": torch.randn(BATCH, generator=generator),
        "next_obs": torch.randn(BATCH, obs_dim, generator=generator),
    }
    ends = torch.rand(BATCH, generator=generator) < 0.25
    if fam is OffPolicyAlgorithm:
        batch["discounts"] = torch.where(ends, 0.0, 0.99).float()
    else:
        batch["terminated"] = ends
    return batch


def make_rollout(algorithm: Algorithm, kind: str, generator: torch.Generator) -> RolloutBuffer:
    """A filled rollout as the on-policy trainer leaves it: values and log-probabilities from the policy, a
    terminated and a truncated episode, the autoreset step after the truncation invalid, advantages computed."""
    obs_dim = SPACES[kind][0].shape[0]
    discrete = kind == "discrete"
    rollout = RolloutBuffer(
        N_STEPS, N_ENVS, (obs_dim,), () if discrete else (1,), torch.int64 if discrete else torch.float32
    )
    rollout.obs.copy_(torch.randn(N_STEPS, N_ENVS, obs_dim, generator=generator))
    rollout.actions.copy_(random_actions(kind, (N_STEPS, N_ENVS), generator))
    rollout.rewards.copy_(torch.randn(N_STEPS, N_ENVS, generator=generator))
    rollout.terminated[3, 0] = rollout.episode_end[3, 0] = True
    rollout.episode_end[5, 2] = True
    rollout.valid[6, 2] = False
    rollout.rewards[6, 2] = 0.0
    policy = algorithm.policy
    with torch.no_grad():
        flat_obs = rollout.flat("obs")
        rollout.log_probs.copy_(policy.distribution(flat_obs).log_prob(rollout.flat("actions")).view(N_STEPS, N_ENVS))
        rollout.values.copy_(policy.value(flat_obs).view(N_STEPS, N_ENVS))
        rollout.next_values[:-1] = rollout.values[1:]
        rollout.next_values[-1] = policy.value(torch.randn(N_ENVS, obs_dim, generator=generator))
    rollout.advantages, rollout.returns = algorithm.advantages(rollout)
    return rollout


def make_trajectories(algorithm: Algorithm, kind: str, generator: torch.Generator) -> TrajectoryBatch:
    """Two actors' trajectories as the actor-learner trainer stacks them: behaviour log-probabilities from a
    perturbed copy of the policy (a lagging actor), a terminated and a truncated episode, an autoreset step."""
    obs_dim = SPACES[kind][0].shape[0]
    obs = torch.randn(N_STEPS + 1, N_ENVS, obs_dim, generator=generator)
    actions = random_actions(kind, (N_STEPS, N_ENVS), generator)
    flat_actions = actions.reshape(N_STEPS * N_ENVS, *actions.shape[2:])
    with torch.no_grad():
        log_probs = algorithm.policy.distribution(obs[:-1].reshape(-1, obs_dim)).log_prob(flat_actions)
    behaviour = log_probs.view(N_STEPS, N_ENVS) + 0.1 * torch.randn(N_STEPS, N_ENVS, generator=generator)
    terminated = torch.zeros(N_STEPS, N_ENVS, dtype=torch.bool)
    episode_end, valid = terminated.clone(), torch.ones(N_STEPS, N_ENVS, dtype=torch.bool)
    terminated[3, 0] = episode_end[3, 0] = True
    episode_end[5, 2] = True
    valid[6, 2] = False
    rewards = torch.randn(N_STEPS, N_ENVS, generator=generator) * valid
    return TrajectoryBatch(obs, actions, behaviour, rewards, terminated, episode_end, valid, torch.tensor([3, 3, 2, 2]))


def make_population_results(
    algorithm: Algorithm, kind: str, generator: torch.Generator
) -> tuple[list[RolloutTask], list[RolloutResult]]:
    """The algorithm's tasks for one iteration and made-up results for them, as workers would return: ES's pairs
    (distinct returns, some rollouts aborted, observation moments), SVPG's segments (a terminated and a truncated
    episode, an autoreset step)."""
    assert isinstance(algorithm, PopulationAlgorithm)
    tasks = algorithm.ask(seed=7, first_env_seed=0)
    obs_dim = SPACES[kind][0].shape[0]
    results: list[RolloutResult] = []
    for task in tasks:
        if isinstance(task, PerturbedPairs):
            pairs = len(task.offsets)
            lengths = torch.randint(1, 50, (pairs, 2), generator=generator).numpy()
            results.append(
                PairResults(
                    task.first_pair,
                    (torch.randn(pairs, 2, generator=generator) * 10).double().numpy(),
                    lengths,
                    lengths == 49,
                    torch.randn(pairs, 2, obs_dim, generator=generator).double().numpy(),
                    torch.rand(pairs, 2, obs_dim, generator=generator).double().numpy(),
                )
            )
        else:
            assert isinstance(task, ParticleSegment)
            batch = make_trajectories(algorithm, kind, generator)
            results.append(
                SegmentResult(
                    task.particle,
                    batch.obs.numpy(),
                    batch.actions.numpy(),
                    batch.rewards.numpy(),
                    batch.terminated.numpy(),
                    batch.episode_end.numpy(),
                    batch.valid.numpy(),
                    np.array([12.0]),
                    np.array([4]),
                )
            )
    return tasks, results


def updates_per_case(algorithm: Algorithm) -> int:
    """Updates until every network has been stepped: TD3+BC's actor learns every ``policy_delay`` updates."""
    return int(getattr(algorithm.config, "policy_delay", 1))


def update(algorithm: Algorithm, batch: Any) -> dict[str, float]:
    if isinstance(algorithm, OnPolicyAlgorithm):
        return algorithm.update(batch, progress=0.0, generator=torch.Generator().manual_seed(0))
    if isinstance(algorithm, PopulationAlgorithm):
        tasks, results = batch
        return algorithm.tell(tasks, results, 0.0)
    return algorithm.update(batch, 0.0)


def flat_state(state: Any, prefix: str = "") -> dict[str, Any]:
    """A nested state dict as {dotted path: tensor or plain value}."""
    if isinstance(state, dict):
        out: dict[str, Any] = {}
        for key, value in state.items():
            out.update(flat_state(value, f"{prefix}{key}."))
        return out
    if isinstance(state, list | tuple):
        out = {}
        for i, value in enumerate(state):
            out.update(flat_state(value, f"{prefix}{i}."))
        return out
    return {prefix.rstrip("."): state.detach().clone() if isinstance(state, torch.Tensor) else state}


def full_state(algorithm: Algorithm) -> dict[str, Any]:
    """The policy's weights and everything the algorithm saves (critics, targets, optimizers, counters)."""
    return flat_state({"policy": algorithm.policy.state_dict(), "algorithm": algorithm.state_dict()})


def assert_identical(first: dict[str, Any], second: dict[str, Any]) -> None:
    assert first.keys() == second.keys(), f"only in one: {sorted(first.keys() ^ second.keys())}"
    different = [
        key
        for key in first
        if not (
            torch.equal(first[key], second[key]) if isinstance(first[key], torch.Tensor) else first[key] == second[key]
        )
    ]
    assert not different, f"differ: {different}"


def through_a_file(state: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint gives back: ``torch.save``, then ``torch.load(weights_only=True)``."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def learned_parameters(algorithm: Algorithm) -> dict[str, torch.Tensor]:
    """What the updates must change: every parameter its optimizers step, and every trainable parameter of the
    policy and of the algorithm's networks (target networks have ``requires_grad`` off)."""
    found: dict[str, torch.Tensor] = {}
    for key, value in vars(algorithm).items():
        if isinstance(value, torch.optim.Optimizer):
            params = [p for group in value.param_groups for p in group["params"]]
            found.update({f"{key}[{i}]": p for i, p in enumerate(params)})
        elif isinstance(value, nn.Module):
            found.update({f"{key}.{n}": p for n, p in value.named_parameters() if p.requires_grad})
    return found


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_one_update_gives_finite_metrics_and_steps_every_network(name: str, kind: str):
    algorithm = build(name, kind)
    batch = make_batch(algorithm, kind)
    assert any(isinstance(value, torch.optim.Optimizer) for value in vars(algorithm).values()), "no optimizer"
    policy_before = {key: p.detach().clone() for key, p in algorithm.policy.named_parameters()}
    learned_before = {key: p.detach().clone() for key, p in learned_parameters(algorithm).items()}

    updates = updates_per_case(algorithm)
    for _ in range(updates):
        metrics = update(algorithm, batch)

    expected = EXPECTED_METRICS[name]
    assert set(metrics) == (expected[kind] if isinstance(expected, dict) else expected)
    assert all(isinstance(value, float) and math.isfinite(value) for value in metrics.values()), metrics
    unchanged = [key for key, p in algorithm.policy.named_parameters() if torch.equal(p, policy_before[key])]
    assert not unchanged, f"policy parameters not updated: {unchanged}"
    learned_after = learned_parameters(algorithm)
    assert learned_after.keys() == learned_before.keys()
    unchanged = [key for key, p in learned_after.items() if torch.equal(p, learned_before[key])]
    assert not unchanged, f"parameters not updated: {unchanged}"
    assert algorithm.gradient_steps >= updates


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_construction_and_update_are_bitwise_reproducible(name: str, kind: str):
    def run() -> tuple[dict[str, Any], list[dict[str, float]]]:
        algorithm = build(name, kind, seed=0)
        batch = make_batch(algorithm, kind)
        metrics = [update(algorithm, batch) for _ in range(updates_per_case(algorithm))]
        return full_state(algorithm), metrics

    first_state, first_metrics = run()
    second_state, second_metrics = run()
    assert_identical(first_state, second_state)
    assert first_metrics == second_metrics


def round_trip(name: str, kind: str) -> list[tuple[dict[str, float], dict[str, float]]]:
    """Save an algorithm after its first updates, load that into a fresh one (other initial weights), then run
    the same updates on both: asserts every parameter, optimizer state and counter stays identical, and
    returns the (original, resumed) metrics of each update after the round trip."""
    original = build(name, kind, seed=0)
    batch = make_batch(original, kind)
    updates = updates_per_case(original)
    for _ in range(updates):
        update(original, batch)

    policy_state = through_a_file(original.policy.state_dict())
    state = through_a_file(original.state_dict())
    resumed = build(name, kind, seed=1)
    resumed.policy.load_state_dict(policy_state)
    resumed.load_state_dict(state)
    assert resumed.gradient_steps == original.gradient_steps
    assert_identical(full_state(resumed), full_state(original))

    # Another actor-and-critic cycle on both, with the same global RNG draws (SAC's and TD3+BC's noise).
    metrics = []
    for step in range(updates):
        torch.manual_seed(100 + step)
        original_metrics = update(original, batch)
        torch.manual_seed(100 + step)
        metrics.append((original_metrics, update(resumed, batch)))
        assert_identical(full_state(resumed), full_state(original))
    return metrics


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_state_dict_round_trip_resumes_with_identical_parameters(name: str, kind: str):
    round_trip(name, kind)


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_state_dict_round_trip_resumes_with_identical_metrics(name: str, kind: str):
    for step, (original_metrics, resumed_metrics) in enumerate(round_trip(name, kind), start=1):
        assert resumed_metrics == original_metrics, f"update {step} after the round trip"


@pytest.mark.parametrize(("name", "kind"), OFF_POLICY_CASES)
@pytest.mark.parametrize("progress", [0.0, 1.0])
def test_explore_returns_valid_actions(name: str, kind: str, progress: float):
    algorithm = build(name, kind)
    obs = torch.randn(BATCH, SPACES[kind][0].shape[0], generator=torch.Generator().manual_seed(5))
    actions = algorithm.explore(obs, progress, torch.Generator().manual_seed(0))
    action_space = SPACES[kind][1]
    if isinstance(action_space, spaces.Discrete):
        assert actions.shape == (BATCH,) and actions.dtype == torch.int64
        assert ((actions >= 0) & (actions < action_space.n)).all()
    else:
        assert actions.shape == (BATCH, 1) and actions.dtype == torch.float32
        assert ((actions >= -2.0) & (actions <= 2.0)).all()
    again = algorithm.explore(obs, progress, torch.Generator().manual_seed(0))
    assert torch.equal(actions, again)


def manual_member(critic: TwinQ, member: int, x: torch.Tensor) -> torch.Tensor:
    """Member ``member`` of the ensemble, computed layer by layer from its own weights."""
    for layer in critic.layers:
        x = x @ layer.weight[member] + layer.bias[member] if hasattr(layer, "weight") else layer(x)
    return x


def test_twin_q_discrete_gives_q_of_every_action_and_taken_gathers_the_actions():
    torch.manual_seed(0)
    critic = TwinQ(obs_features=4, action_dim=3, discrete=True, hidden_sizes=[16, 16], activation="tanh")
    features = torch.randn(5, 4)
    actions = torch.tensor([0, 2, 1, 2, 0])
    with torch.no_grad():
        q = critic(features)
        taken = critic.taken(features, actions)
        assert q.shape == (2, 5, 3)
        assert taken.shape == (2, 5)
        assert torch.equal(taken, q[:, torch.arange(5), actions])
        for member in range(2):
            assert torch.allclose(q[member], manual_member(critic, member, features), atol=1e-6)
    assert not torch.allclose(q[0], q[1]), "the two critics share their weights"


def test_twin_q_box_takes_the_action_as_input():
    torch.manual_seed(0)
    critic = TwinQ(obs_features=3, action_dim=2, discrete=False, hidden_sizes=[16, 16], activation="tanh")
    features, actions = torch.randn(5, 3), torch.rand(5, 2) * 2 - 1
    with torch.no_grad():
        q = critic(features, actions)
        assert q.shape == (2, 5)
        assert torch.equal(critic.taken(features, actions), q)
        for member in range(2):
            expected = manual_member(critic, member, torch.cat([features, actions], dim=-1)).squeeze(-1)
            assert torch.allclose(q[member], expected, atol=1e-6)
        assert not torch.allclose(q, critic(features, -actions)), "the actions are ignored"
        # One-dimensional actions may come as (B,) or (B, 1).
        single = TwinQ(obs_features=3, action_dim=1, discrete=False, hidden_sizes=[8], activation="tanh")
        assert torch.equal(single(features, actions[:, 0]), single(features, actions[:, :1]))
