"""The members contract (issue 39), one parametrized test per family as d3rlpy's shared algorithm test: member k of a
batched update is the one-member update with seed k (weights after three updates within rtol 1e-4, atol 1e-6; the
same gradient and skipped step counts), and a batched update is bitwise deterministic with itself.

On-policy (PPO, A2C): ``update_members`` over ``StackedMembers`` against ``update`` (``OneMember``) per seed, on
rollouts with CartPole's spaces whose valid steps differ per seed (ragged minibatches, padded), with a target KL
that stops some members' updates while others go on, and a member whose rollout holds a NaN advantage (its steps
skipped and counted, the others unharmed). SAC: ``update_members`` over ``StackedSAC`` against ``update``
(``OneSAC``) per seed on synthetic replay batches with Pendulum's and CartPole's shapes, clipped, with a target
interval, and a member whose batch holds a NaN (its critics' and actor's steps skipped and counted per member).

DQN, BC: ``update_members`` over ``StackedNetworks`` against ``update`` (``OneNetwork``) per seed, on synthetic
replay or dataset batches with CartPole's or Pendulum's spaces (double and plain DQN, hard and Polyak target
updates, clipped gradients, AdamW's weight decay), with a member whose batch holds a NaN observation.

Kinds that do not stack (CNN and Dict encoders, DQN's dueling head, TD3+BC, IQL): the lockstep loop's members
(``rlcore.trainers.lockstep.member_steps``) step each its own network by its own ``update``, bitwise the one-member
run's; the MLP kinds are stacked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.algos.a2c import A2C, A2CConfig
from rlcore.algos.base import OnPolicyAlgorithm
from rlcore.algos.bc import BC, BCConfig
from rlcore.algos.dqn import DQN, DQNConfig
from rlcore.algos.iql import IQL, IQLConfig
from rlcore.algos.members import StackedMembers
from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.algos.sac import SAC, SACConfig
from rlcore.algos.sac_members import StackedSAC
from rlcore.algos.td3bc import TD3BC, TD3BCConfig
from rlcore.algos.value_members import NetworkStack, StackedNetworks, stack_batches
from rlcore.config.sections import PolicyConfig
from rlcore.data.replay import FIELDS
from rlcore.data.rollouts import RolloutBuffer
from rlcore.envs.observations import PackedDict
from rlcore.nets.stacked_actor_critic import StackedActorCritic
from rlcore.trainers.lockstep import EachOwn, StackedSACSteps, StackedValue, member_steps
from rlcore.trainers.seed_sessions import SeedSession

SEEDS = [0, 1, 2]
UPDATES = 3
RTOL, ATOL = 1e-4, 1e-6
POLICY = PolicyConfig(hidden_sizes=[64, 64], activation="tanh")


def cartpole_spaces() -> tuple[gym.Space, gym.Space]:
    env = gym.make("CartPole-v1")
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def rollout(seed: int, update: int, steps: int, envs: int, poisoned: bool) -> RolloutBuffer:
    """A synthetic CartPole rollout of ``steps`` x ``envs``; a seed-dependent share of autoreset steps (not trained
    on), so members' valid counts and minibatch counts differ; ``poisoned``: one NaN advantage."""
    g = torch.Generator().manual_seed(1_000 * seed + update)
    buffer = RolloutBuffer(steps, envs, (4,), (), torch.int64)
    shape = (steps, envs)
    buffer.obs = torch.randn(*shape, 4, generator=g) * torch.tensor([0.5, 0.5, 0.05, 0.5])
    buffer.actions = torch.randint(2, shape, generator=g)
    buffer.log_probs = torch.log(torch.rand(shape, generator=g) * 0.4 + 0.3)
    buffer.values = torch.randn(shape, generator=g) * 5
    buffer.advantages = torch.randn(shape, generator=g)
    buffer.returns = buffer.values + buffer.advantages
    buffer.valid = torch.rand(shape, generator=g) > 0.02 + 0.1 * seed
    if poisoned:
        buffer.advantages[0, 0] = float("nan")
        buffer.valid[0, 0] = True
    return buffer


@dataclass(frozen=True)
class Family:
    """What the contract needs of an algorithm: ``make(seed)`` (the one-seed run's algorithm: torch seeded, then the
    policy built), ``data(seed, update)``, ``single(algorithm, data, generator)`` (one update of one member) and
    ``batched(algorithms, data, generators)`` (one update of all; a callable keeping the stacked state between
    updates), ``weights(algorithm)``."""

    name: str
    make: Callable[[int], Any]
    data: Callable[[int, int], Any]
    single: Callable[[Any, Any, torch.Generator], dict[str, float]]
    batched: Callable[[list[Any]], Callable[[list[Any], list[torch.Generator]], list[dict[str, float]]]]


def on_policy(kind: type[OnPolicyAlgorithm[Any, Any]], config: Any, steps: int, poisoned_seed: int | None) -> Family:
    observation_space, action_space = cartpole_spaces()

    def make(seed: int) -> Any:
        torch.manual_seed(seed)
        return kind(kind.make_policy(observation_space, action_space, POLICY, config), config)

    def batched(algorithms: list[Any]) -> Callable[[list[Any], list[torch.Generator]], list[dict[str, float]]]:
        own = [algorithm.optimizer for algorithm in algorithms]
        stacked = StackedActorCritic([algorithm.policy for algorithm in algorithms], own)

        def update(data: list[Any], generators: list[torch.Generator]) -> list[dict[str, float]]:
            metrics = kind.update_members(
                StackedMembers(algorithms, stacked, data), [0.5] * len(algorithms), generators
            )
            for k in range(len(algorithms)):
                stacked.write_weights(k)
                stacked.write_optimizers(k)
            return metrics

        return update

    return Family(
        name=kind.name,
        make=make,
        data=lambda seed, update: rollout(seed, update, steps, 16, seed == poisoned_seed and update == 1),
        single=lambda algorithm, data, generator: algorithm.update(data, 0.5, generator),
        batched=batched,
    )


def replay_batch(seed: int, update: int, discrete: bool, poisoned: bool) -> dict[str, torch.Tensor]:
    """A synthetic replay batch of 64 transitions with Pendulum's shapes (Box actions in [-2, 2]) or CartPole's
    (discrete); ``poisoned``: a NaN observation (Box: the critics' and the actor's losses not finite) or reward
    (discrete: the critics' loss only)."""
    g = torch.Generator().manual_seed(1_000 * seed + update)
    size, width = 64, 4 if discrete else 3
    obs = torch.randn(size, width, generator=g)
    actions = torch.randint(2, (size,), generator=g) if discrete else torch.rand(size, 1, generator=g) * 4 - 2
    batch = {
        "obs": obs,
        "next_obs": obs + 0.1 * torch.randn(size, width, generator=g),
        "actions": actions,
        "rewards": torch.randn(size, generator=g),
        "discounts": torch.full((size,), 0.99),
    }
    if poisoned:
        batch["rewards" if discrete else "obs"][0] = float("nan")
    return batch


def drawing(generator: torch.Generator, shape: tuple[int, ...] | None = None) -> Any:
    """Run what follows on torch's global generator set to ``generator``'s state (as the trainer runs each seed's
    update on its own generator state), advancing ``generator``; with ``shape``: SAC's two standard normal draws."""
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(generator.get_state())
        out = None if shape is None else torch.stack([torch.empty(shape).normal_() for _ in range(2)])
        generator.set_state(torch.get_rng_state())
    return out


def sac(config: SACConfig, discrete: bool, poisoned_seed: int | None) -> Family:
    """SAC: ``update_members`` over ``StackedSAC`` (each member's noise drawn from its generator) against ``update``
    (``OneSAC``, drawing from the global generator set to that state)."""
    observation_space = gym.spaces.Box(-5.0, 5.0, (4 if discrete else 3,))
    action_space = gym.spaces.Discrete(2) if discrete else gym.spaces.Box(-2.0, 2.0, (1,))

    def make(seed: int) -> Any:
        torch.manual_seed(seed)
        return SAC(SAC.make_policy(observation_space, action_space, POLICY, config), config)

    def single(algorithm: SAC, data: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, float]:
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(generator.get_state())
            metrics = algorithm.update(data, 0.5)
            generator.set_state(torch.get_rng_state())
        return metrics

    def batched(algorithms: list[Any]) -> Callable[[list[Any], list[torch.Generator]], list[dict[str, float]]]:
        members = StackedSAC(algorithms)

        def update(data: list[Any], generators: list[torch.Generator]) -> list[dict[str, float]]:
            shape = None if discrete else (len(data[0]["obs"]), 1)
            noise = None if discrete else torch.stack([drawing(g, shape) for g in generators])
            members.load(stack_batches(data, FIELDS), noise)
            metrics = SAC.update_members(members)
            members.write_back()
            return metrics

        return update

    return Family(
        name="sac",
        make=make,
        data=lambda seed, update: replay_batch(seed, update, discrete, seed == poisoned_seed and update == 1),
        single=single,
        batched=batched,
    )


def value_family(kind: Any, config: Any, env_id: str, head: str, poisoned_seed: int | None) -> Family:
    """DQN or BC (``update_members`` over ``rlcore.algos.value_members``) on synthetic replay or dataset batches with
    ``env_id``'s spaces; ``poisoned_seed``: its second update's batch holds a NaN (its step skipped and counted)."""
    env = gym.make(env_id)
    observation_space, action_space = env.observation_space, env.action_space
    env.close()

    def make(seed: int) -> Any:
        torch.manual_seed(seed)
        return kind(kind.make_policy(observation_space, action_space, POLICY, config), config)

    def data(seed: int, update: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(1_000 * seed + update)
        size, obs_shape = 64, tuple(observation_space.shape or ())
        batch = {
            "obs": torch.randn(size, *obs_shape, generator=g),
            "next_obs": torch.randn(size, *obs_shape, generator=g),
        }
        batch["rewards"], batch["discounts"] = torch.randn(size, generator=g), torch.full((size,), 0.99)
        if isinstance(action_space, gym.spaces.Discrete):
            batch["actions"] = torch.randint(int(action_space.n), (size,), generator=g)
        else:
            batch["actions"] = torch.rand(size, *(action_space.shape or ()), generator=g) * 4 - 2
        if seed == poisoned_seed and update == 1:
            batch["obs"][0, 0] = float("nan")
        return batch

    def batched(algorithms: list[Any]) -> Callable[[list[Any], list[torch.Generator]], list[dict[str, float]]]:
        stack = NetworkStack(algorithms)

        def update(data: list[Any], generators: list[torch.Generator]) -> list[dict[str, float]]:
            metrics: list[dict[str, float]] = kind.update_members(
                StackedNetworks(stack, stack_batches(data, stack.batch_keys)), [0.5] * len(data)
            )
            for k in range(len(algorithms)):
                stack.write_back(k)
            return metrics

        return update

    return Family(
        name=kind.name,
        make=make,
        data=data,
        single=lambda algorithm, batch, generator: algorithm.update(batch, 0.5),
        batched=batched,
    )


FAMILIES = {
    "sac-clipped": lambda: sac(SACConfig(name="sac", max_grad_norm=0.5), False, None),
    "sac-nonfinite": lambda: sac(SACConfig(name="sac", target_update_interval=2), False, 1),
    "sac-discrete-nonfinite": lambda: sac(SACConfig(name="sac", max_grad_norm=1.0), True, 2),
    "ppo": lambda: on_policy(PPO, PPOConfig(lr=1e-3, n_steps=32, batch_size=128, n_epochs=4), 32, None),
    # Seed 0 stops within its first update's epochs, seed 2 later; seed 1 never (its KL stays lower).
    "ppo-target-kl": lambda: on_policy(
        PPO, PPOConfig(lr=1e-3, n_steps=32, batch_size=128, n_epochs=4, target_kl=0.021), 32, None
    ),
    "ppo-nonfinite": lambda: on_policy(PPO, PPOConfig(lr=1e-3, n_steps=32, batch_size=128, n_epochs=2), 32, 1),
    # Two minibatches per optimizer step (ragged: members' valid counts differ), their losses weighted by share.
    "ppo-accumulation": lambda: on_policy(
        PPO, PPOConfig(lr=1e-3, n_steps=32, batch_size=64, n_epochs=2, grad_accumulation=2), 32, None
    ),
    "a2c": lambda: on_policy(A2C, A2CConfig(n_steps=8), 8, None),
    "a2c-accumulation": lambda: on_policy(A2C, A2CConfig(n_steps=8, grad_accumulation=2), 8, None),
    "a2c-adam-nonfinite": lambda: on_policy(
        A2C, A2CConfig(n_steps=8, optimizer="adam", normalize_advantage=True), 8, 2
    ),
    # Targets copied every 2nd step (member k's on its own schedule), gradients clipped per member.
    "dqn": lambda: value_family(DQN, DQNConfig(target_update_interval=2, max_grad_norm=1.0), "CartPole-v1", "q", None),
    "dqn-plain-polyak-nonfinite": lambda: value_family(
        DQN, DQNConfig(double_dqn=False, target_update_interval=1, tau=0.5), "CartPole-v1", "q", 1
    ),
    "bc-nonfinite": lambda: value_family(BC, BCConfig(), "CartPole-v1", "logits", 2),
    "bc-box": lambda: value_family(BC, BCConfig(weight_decay=0.01), "Pendulum-v1", "mean", None),
}


def weights(algorithm: Any) -> list[torch.Tensor]:
    """The policy's weights, and SAC's critics, targets and log alpha."""
    modules = [algorithm.policy] + [
        getattr(algorithm, name) for name in ("critic", "critic_target") if hasattr(algorithm, name)
    ]
    tensors = [param for module in modules for param in module.parameters()]
    tensors += [algorithm.log_alpha] if hasattr(algorithm, "log_alpha") else []
    return [tensor.detach().clone() for tensor in tensors]


def run_batched(family: Family) -> tuple[list[Any], list[list[dict[str, float]]]]:
    algorithms = [family.make(seed) for seed in SEEDS]
    generators = [torch.Generator().manual_seed(seed) for seed in SEEDS]
    update = family.batched(algorithms)
    metrics = [update([family.data(seed, i) for seed in SEEDS], generators) for i in range(UPDATES)]
    return algorithms, metrics


@pytest.mark.parametrize("case", list(FAMILIES))
def test_member_k_of_a_batched_update_is_the_one_member_update_with_seed_k(case: str) -> None:
    family = FAMILIES[case]()
    batched, batched_metrics = run_batched(family)
    for k, seed in enumerate(SEEDS):
        alone = family.make(seed)
        generator = torch.Generator().manual_seed(seed)
        metrics = [family.single(alone, family.data(seed, i), generator) for i in range(UPDATES)]
        assert (batched[k].gradient_steps, batched[k].skipped_steps) == (alone.gradient_steps, alone.skipped_steps)
        for mine, theirs in zip(weights(batched[k]), weights(alone), strict=True):
            torch.testing.assert_close(mine, theirs, rtol=RTOL, atol=ATOL)
        for i in range(UPDATES):
            assert batched_metrics[i][k].keys() == metrics[i].keys()
            for key, value in metrics[i].items():
                assert batched_metrics[i][k][key] == pytest.approx(value, rel=1e-4, abs=1e-5, nan_ok=True), key
    assert len({algorithm.gradient_steps for algorithm in batched}) > 1 or "kl" not in case


@pytest.mark.parametrize(
    "case", ["sac-nonfinite", "ppo-target-kl", "a2c-adam-nonfinite", "dqn-plain-polyak-nonfinite", "bc-box"]
)
def test_a_batched_update_is_bitwise_deterministic(case: str) -> None:
    first, first_metrics = run_batched(FAMILIES[case]())
    again, again_metrics = run_batched(FAMILIES[case]())
    for mine, theirs in zip(first, again, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(weights(mine), weights(theirs), strict=True))
    assert repr(first_metrics) == repr(again_metrics)


def test_a_member_with_a_nan_advantage_skips_its_steps_and_the_others_step() -> None:
    algorithms, _ = run_batched(FAMILIES["ppo-nonfinite"]())
    assert [algorithm.skipped_steps > 0 for algorithm in algorithms] == [False, True, False]
    assert all(torch.isfinite(param).all() for algorithm in algorithms for param in algorithm.policy.parameters())


@pytest.mark.parametrize(("case", "poisoned"), [("dqn-plain-polyak-nonfinite", 1), ("bc-nonfinite", 2)])
def test_a_value_member_with_a_nan_observation_skips_its_step_and_the_others_step(case: str, poisoned: int) -> None:
    algorithms, metrics = run_batched(FAMILIES[case]())
    assert [algorithm.skipped_steps for algorithm in algorithms] == [int(k == poisoned) for k in range(len(SEEDS))]
    assert [m["loss"] != m["loss"] for m in metrics[1]] == [k == poisoned for k in range(len(SEEDS))]  # NaN
    assert all(torch.isfinite(param).all() for algorithm in algorithms for param in algorithm.policy.parameters())


IMAGE = gym.spaces.Box(0, 255, (3, 12, 12), dtype=np.uint8)
VECTOR, DISCRETE, BOX = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(3), gym.spaces.Box(-2.0, 2.0, (2,))
DICT = PackedDict(
    gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (8, 8), np.uint8), "vector": gym.spaces.Box(-1, 1, (3,))})
)
"""A ``Dict`` observation as the policies see it: packed into one Box (``rlcore.envs.observations``)."""
CNN = PolicyConfig(hidden_sizes=[16], encoder="small_cnn")
KINDS: dict[str, tuple[Any, Any, gym.Space, gym.Space, PolicyConfig, type]] = {
    "dqn-cnn": (DQN, DQNConfig(), IMAGE, DISCRETE, CNN, EachOwn),
    "dqn-dueling": (DQN, DQNConfig(dueling=True), VECTOR, DISCRETE, POLICY, EachOwn),
    "dqn-mlp": (DQN, DQNConfig(), VECTOR, DISCRETE, POLICY, StackedValue),
    "sac-dict": (SAC, SACConfig(name="sac", max_grad_norm=1.0), DICT, BOX, POLICY, EachOwn),
    "sac-cnn-discrete": (SAC, SACConfig(name="sac"), IMAGE, DISCRETE, CNN, EachOwn),
    "sac-mlp": (SAC, SACConfig(name="sac"), VECTOR, BOX, POLICY, StackedSACSteps),
    "bc-cnn": (BC, BCConfig(), IMAGE, DISCRETE, CNN, EachOwn),
    "bc-mlp": (BC, BCConfig(), VECTOR, BOX, POLICY, StackedValue),
    "td3bc": (TD3BC, TD3BCConfig(name="td3bc"), VECTOR, BOX, POLICY, EachOwn),
    "iql": (IQL, IQLConfig(name="iql"), VECTOR, DISCRETE, POLICY, EachOwn),
}
"""Each kind: its algorithm, config, observation and action spaces, policy config and the form its members take."""


@dataclass
class SessionView:
    """What the member steps read of a seed's training session: its algorithm, progress and generator."""

    algorithm: Any
    progress_fraction: float = 0.5
    generator: torch.Generator = field(default_factory=torch.Generator)


@dataclass
class Member:
    """A seed of the lockstep loop as the member steps read it, with its own state of torch's global generator."""

    session: SessionView
    torch_rng: torch.Tensor = field(default_factory=torch.get_rng_state)
    one_seed_run = False
    own_rng = SeedSession.own_rng


def kind_batch(seed: int, update: int, observations: gym.Space, actions: gym.Space) -> dict[str, torch.Tensor]:
    """A synthetic replay or dataset batch of 16 transitions of these spaces (every field each algorithm reads)."""
    g = torch.Generator().manual_seed(1_000 * seed + update)

    def sample(space: gym.Space) -> torch.Tensor:
        if isinstance(space, gym.spaces.Discrete):
            return torch.randint(int(space.n), (16,), generator=g)
        if space.dtype == np.uint8:
            return torch.randint(256, (16, *space.shape), generator=g, dtype=torch.uint8)
        return torch.rand(16, *space.shape, generator=g) * 2 - 1

    return {
        "obs": sample(observations),
        "next_obs": sample(observations),
        "actions": sample(actions),
        "rewards": torch.randn(16, generator=g),
        "discounts": torch.full((16,), 0.99),
        "terminated": torch.zeros(16, dtype=torch.bool),
    }


@pytest.mark.parametrize("kind", list(KINDS))
def test_member_k_of_the_lockstep_steps_is_the_one_member_update_with_seed_k(kind: str) -> None:
    """Two members of ``kind`` step in the form the kind takes (each its own network: bitwise each seed's own
    update; stacked: within rtol 1e-4), three steps, each seed's generator its own."""
    algo, config, observations, actions, policy, form = KINDS[kind]

    def make(seed: int) -> Any:
        torch.manual_seed(seed)
        return algo(algo.make_policy(observations, actions, policy, config), config)

    members = []
    for seed in SEEDS[:2]:
        algorithm = make(seed)
        members.append(Member(SessionView(algorithm)))  # its generator state: as its session left it
    steps = member_steps(members)  # type: ignore[arg-type]
    assert type(steps) is form
    for update in range(UPDATES):
        steps.step([kind_batch(seed, update, observations, actions) for seed in SEEDS[:2]])
    steps.write_back()
    for k, seed in enumerate(SEEDS[:2]):
        alone = make(seed)
        for update in range(UPDATES):
            alone.update(kind_batch(seed, update, observations, actions), 0.5)
        for mine, theirs in zip(weights(members[k].session.algorithm), weights(alone), strict=True):
            if form is EachOwn:
                assert torch.equal(mine, theirs), kind
            else:
                torch.testing.assert_close(mine, theirs, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kind", ["dqn-mlp", "sac-mlp", "bc-mlp"])
def test_a_member_absent_from_a_stacked_step_is_its_run_without_that_step(kind: str) -> None:
    """Seed 1 has no batch at the second step (its update phase was shorter): it sits that step out (weights,
    optimizer state, counters and target untouched) and ends as its one-member run of the other two steps."""
    algo, config, observations, actions, policy, form = KINDS[kind]

    def make(seed: int) -> Any:
        torch.manual_seed(seed)
        return algo(algo.make_policy(observations, actions, policy, config), config)

    members = [Member(SessionView(make(seed))) for seed in SEEDS[:2]]
    steps = member_steps(members)  # type: ignore[arg-type]
    assert type(steps) is form
    for update in range(UPDATES):
        steps.step(
            [kind_batch(seed, update, observations, actions) for seed in SEEDS[:1]]
            + [None if update == 1 else kind_batch(SEEDS[1], update, observations, actions)]
        )
    steps.write_back()
    alone = make(SEEDS[1])
    for update in (0, 2):
        alone.update(kind_batch(SEEDS[1], update, observations, actions), 0.5)
    absent = members[1].session.algorithm
    assert (absent.gradient_steps, absent.skipped_steps) == (alone.gradient_steps, alone.skipped_steps) == (2, 0)
    for mine, theirs in zip(weights(absent), weights(alone), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    ("kind", "algo", "config", "actions"),
    [
        ("dqn", DQN, DQNConfig(exploration_fraction=1.0), DISCRETE),  # epsilon 0.525 at progress 0.5: both branches
        ("sac", SAC, SACConfig(name="sac"), BOX),
        ("sac-discrete", SAC, SACConfig(name="sac"), DISCRETE),
    ],
)
def test_stacked_members_act_for_every_seed_as_each_seed_alone(kind: str, algo: Any, config: Any, actions: Any) -> None:
    """The stacked forms act for every member in one forward pass (``MemberSteps.explore``), each member's draw from
    its own session's generator: the actions its own algorithm's ``explore`` draws from that generator (within rtol
    1e-4; discrete actions equal), and each generator left in the state its own draw leaves it, for one env row and
    for several."""

    def make(seed: int) -> Any:
        torch.manual_seed(seed)
        return algo(algo.make_policy(VECTOR, actions, POLICY, config), config)

    members = [Member(SessionView(make(seed), generator=torch.Generator().manual_seed(100 + seed))) for seed in SEEDS]
    steps = member_steps(members)  # type: ignore[arg-type]
    assert steps.stacked
    for rows in (1, 4, 1):
        obs = [torch.randn(rows, *VECTOR.shape) for _ in SEEDS]
        alone = [torch.Generator() for _ in SEEDS]
        for generator, member in zip(alone, members, strict=True):
            generator.set_state(member.session.generator.get_state())
        explored = steps.explore(obs)
        assert explored is not None
        for k, member in enumerate(members):
            algorithm = member.session.algorithm
            theirs = algorithm.explore(obs[k], member.session.progress_fraction, alone[k])
            torch.testing.assert_close(explored[k], theirs, rtol=RTOL, atol=ATOL)
            assert torch.equal(member.session.generator.get_state(), alone[k].get_state()), f"{kind} seed {k}"
