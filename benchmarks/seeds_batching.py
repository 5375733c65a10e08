"""Benchmark: N seeds' PPO updates as one batched program (``rlcore.nets.stacked``) vs N unbatched updates in turn.

Prints one JSON line per case and N. One "update" is what ``PPO.update`` does with one rollout: ``n_epochs`` passes,
each seed's minibatch order drawn from that seed's own generator, per minibatch the clipped-surrogate loss, the value
loss and the entropy, per-seed gradient-norm clipping and an Adam step. Three ways to do it for N seeds:

- ``sequential``: N ``rlcore.algos.ppo.PPO`` objects, ``PPO.update`` on each one's rollout in turn (what N runs cost
  today, minus their envs);
- ``vmap``: one :class:`rlcore.nets.stacked.StackedPolicies`, the per-seed loss (the PPO arithmetic for one policy)
  run under ``torch.func.vmap`` over ``functional_call`` (:func:`vmapped_backward`: rlcore no longer has this form),
  one Adam over the stacked parameters, ``clip_grad_norms_`` per seed;
- ``bmm``: the same stacked parameters, the loss written batched by hand on ``StackedPolicies.mlp`` (each layer one
  ``torch.baddbmm``, every reduction over the seed's own samples); valid for vector observations without
  normalization (the policy's encoder and normalizer are then the identity).

The rollouts are synthetic (CartPole-shaped observations, random actions, advantages and returns; every step valid),
the same for the three. Before timing, one update from the same initial weights checks that ``vmap`` and ``bmm``
end within ``max_weight_difference`` of ``sequential`` per seed (float32 summation order; see tests/test_stacked.py).

Cases (``--cases``): ``ppo-preset`` is ``params.yaml``'s geometry (16 envs x 32 steps = 512 transitions, 5 epochs,
minibatches of 256: 10 gradient steps); ``ppo-sb3`` is SB3's default PPO geometry (2048 transitions, 10 epochs,
minibatches of 64: 320 gradient steps); ``wide`` is SAC's network for HalfCheetah, [256, 256] relu, at SAC's batch
of 256 (2048 transitions, 10 epochs: 80 gradient steps; PPO's loss, not SAC's); ``small-relu`` the same with the
[64, 64] relu network of the SAC Pendulum and DQN CartPole presets (the PPO preset's is tanh, whose CPU kernel costs
more than a 64-wide matrix product per element). Timings: medians of ``--repeats`` updates after
one untimed one, the three ways interleaved, of the wall time (``*_seconds``) and of the process's CPU time
(``*_cpu_seconds``: with 1 torch thread the work itself, what a busy machine disturbs least); speedups are
sequential / batched. ``load_average_1min`` is the machine's at the end of the case.

    OMP_NUM_THREADS=1 python benchmarks/seeds_batching.py [--seeds-counts 1 2 4 8 16] [--repeats 3] [--cases ...]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributions import Categorical  # noqa: E402
from torch.func import functional_call, vmap  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit  # noqa: E402

from rlcore.algos.ppo import PPO, PPOConfig, clipped_surrogate  # noqa: E402
from rlcore.config.sections import PolicyConfig  # noqa: E402
from rlcore.data.rollouts import RolloutBuffer  # noqa: E402
from rlcore.nets.policies import ActorCritic  # noqa: E402
from rlcore.nets.stacked import StackedPolicies  # noqa: E402
from rlcore.objectives.schedules import scheduled  # noqa: E402
from rlcore.params import load_params  # noqa: E402

CASES: dict[str, list[str]] = {
    "ppo-preset": [],
    "ppo-sb3": ["algo.n_steps=128", "algo.batch_size=64", "algo.n_epochs=10"],
    "wide": [
        "algo.n_steps=128",
        "algo.batch_size=256",
        "algo.n_epochs=10",
        "policy.hidden_sizes=[256,256]",
        "policy.activation=relu",
    ],
    "small-relu": ["algo.n_steps=128", "algo.batch_size=256", "algo.n_epochs=10", "policy.activation=relu"],
}
PROGRESS = 0.5
"""Where in training the timed update is (drives the linear learning-rate schedule)."""

Batch = tuple[torch.Tensor, ...]


def spaces() -> tuple[gym.Space, gym.Space]:
    env = gym.make("CartPole-v1")
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def make_policy_fn(policy_config: PolicyConfig, algo: PPOConfig) -> Callable[[], ActorCritic]:
    observation_space, action_space = spaces()
    return lambda: PPO.make_policy(observation_space, action_space, policy_config, algo)


def rollout(seed: int, algo: PPOConfig, num_envs: int) -> RolloutBuffer:
    """A synthetic rollout, every step valid, drawn from ``seed``."""
    g = torch.Generator().manual_seed(10_000 + seed)
    buffer = RolloutBuffer(algo.n_steps, num_envs, (4,), (), torch.int64)
    shape = (algo.n_steps, num_envs)
    buffer.obs = torch.randn(*shape, 4, generator=g) * torch.tensor([0.5, 0.5, 0.05, 0.5])
    buffer.actions = torch.randint(2, shape, generator=g)
    buffer.log_probs = torch.log(torch.rand(shape, generator=g) * 0.4 + 0.3)
    buffer.values = torch.randn(shape, generator=g) * 5
    buffer.advantages = torch.randn(shape, generator=g)
    buffer.returns = buffer.values + buffer.advantages
    return buffer


class Sequential:
    """N unbatched PPO learners, each updated on its own rollout in turn."""

    def __init__(self, seeds: list[int], make_policy: Callable[[], ActorCritic], algo: PPOConfig) -> None:
        self.learners = []
        for seed in seeds:
            torch.manual_seed(seed)
            self.learners.append(PPO(make_policy(), algo))
        self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]

    def update(self, rollouts: list[RolloutBuffer]) -> None:
        for learner, buffer, generator in zip(self.learners, rollouts, self.generators, strict=True):
            learner.update(buffer, PROGRESS, generator)

    def state_dicts(self) -> list[dict[str, torch.Tensor]]:
        return [learner.policy.state_dict() for learner in self.learners]


def ppo_loss(
    policy: ActorCritic,
    obs: torch.Tensor,
    actions: torch.Tensor,
    old_log_probs: torch.Tensor,
    old_values: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    algo: PPOConfig,
    clip: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``PPO.update``'s minibatch loss for one seed (one minibatch per optimizer step), and its diagnostics
    (policy loss, value loss, entropy, clip fraction, approximate KL) as a tensor instead of ``.item()`` calls."""
    features = policy.features(obs)
    dist = policy.distribution_of(features)
    log_ratio = dist.log_prob(actions) - old_log_probs
    ratio = log_ratio.exp()
    adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    policy_loss = -clipped_surrogate(ratio, adv, clip, algo.dual_clip).mean()
    value_loss = policy.value_loss_of(features, returns, old_values, algo.clip_range_vf)
    entropy = dist.entropy().mean()
    loss = policy_loss + algo.vf_coef * value_loss - algo.ent_coef * entropy
    with torch.no_grad():
        kl = ((ratio - 1) - log_ratio).mean()
        clipped = ((ratio - 1).abs() > clip).float().mean()
    return loss, torch.stack([policy_loss.detach(), value_loss.detach(), entropy.detach(), clipped, kl])


def ppo_loss_by_hand(stacked: StackedPolicies[ActorCritic], batch: Batch, algo: PPOConfig, clip: float) -> Any:
    """:func:`ppo_loss` for every seed at once without vmap: (N, B, ...) tensors, reductions over dim 1. Only for
    vector observations without normalization and a scalar value head (the features are the observations)."""
    obs, actions, old_log_probs, old_values, advantages, returns = batch
    dist = Categorical(logits=stacked.mlp("actor", obs), validate_args=False)
    log_ratio = dist.log_prob(actions) - old_log_probs
    ratio = log_ratio.exp()
    adv = (advantages - advantages.mean(1, keepdim=True)) / (advantages.std(1, keepdim=True) + 1e-8)
    policy_loss = -clipped_surrogate(ratio, adv, clip, algo.dual_clip).mean(1)
    values = stacked.mlp("critic.net", obs).squeeze(-1)
    if algo.clip_range_vf is not None:
        values = old_values + (values - old_values).clamp(-algo.clip_range_vf, algo.clip_range_vf)
    value_loss = (returns - values).square().mean(1)
    entropy = dist.entropy().mean(1)
    losses = policy_loss + algo.vf_coef * value_loss - algo.ent_coef * entropy
    losses.sum().backward()
    with torch.no_grad():
        kl = ((ratio - 1) - log_ratio).mean(1)
        clipped = ((ratio - 1).abs() > clip).float().mean(1)
    return torch.stack([policy_loss.detach(), value_loss.detach(), entropy.detach(), clipped, kl], dim=1)


class _Bound(nn.Module):
    """Calls ``fn(policy, *args)``: what lets ``functional_call`` run any function of a policy."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(self.policy, *args)


def vmapped_backward(
    stacked: StackedPolicies[ActorCritic], loss_fn: Callable[..., Any], *args: torch.Tensor
) -> torch.Tensor:
    """``loss_fn(policy, *args_k)`` (a loss and its diagnostics) for every seed under ``torch.func.vmap`` over
    ``functional_call``, the losses' sum back-propagated into the stacked parameters; the diagnostics, (N, ...)."""
    bound = _Bound(stacked.template)

    def one(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], *seed_args: torch.Tensor) -> Any:
        named = {f"policy.{name}": value for name, value in {**params, **buffers}.items()}
        return functional_call(bound, named, (loss_fn, *seed_args))

    losses, diagnostics = vmap(one)(stacked.params, stacked.buffers, *args)
    losses.sum().backward()
    return diagnostics


def stacked_policies(seeds: list[int], make_policy: Callable[[], ActorCritic]) -> StackedPolicies[ActorCritic]:
    """Each seed's policy as its unbatched run initializes it (torch seeded, then built), stacked."""
    policies = []
    for seed in seeds:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            policies.append(make_policy())
    return StackedPolicies(policies)


class Stacked:
    """N seeds in one :class:`StackedPolicies`, updated by one vmapped (or hand-batched) program."""

    def __init__(
        self, seeds: list[int], make_policy: Callable[[], ActorCritic], algo: PPOConfig, by_hand: bool
    ) -> None:
        self.stacked = stacked_policies(seeds, make_policy)
        self.algo, self.by_hand = algo, by_hand
        self.optimizer = torch.optim.Adam(self.stacked.parameters(), lr=algo.lr, eps=algo.adam_eps, fused=True)
        self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]

    def update(self, rollouts: list[RolloutBuffer]) -> dict[str, list[float]]:
        algo, stacked = self.algo, self.stacked
        lr = scheduled(algo.lr, algo.lr_schedule, PROGRESS)
        clip = scheduled(algo.clip_range, algo.clip_range_schedule, PROGRESS)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        fields = ("obs", "actions", "log_probs", "values", "advantages", "returns")
        data = [torch.stack([buffer.flat(name) for buffer in rollouts]) for name in fields]  # (N, T * E, ...)
        seed_rows = torch.arange(stacked.count).unsqueeze(1)
        totals, minibatches = torch.zeros(stacked.count, 5), 0
        for _ in range(algo.n_epochs):
            # Each seed's minibatch order from its own generator, as PPO.update draws it for one seed.
            pairs = zip(rollouts, self.generators, strict=True)
            orders = [list(buffer.minibatches(algo.batch_size, generator)) for buffer, generator in pairs]
            for step_indices in zip(*orders, strict=True):
                idx = torch.stack(step_indices)  # (N, B): every seed's minibatch has the same size here
                batch = tuple(tensor[seed_rows, idx] for tensor in data)
                self.optimizer.zero_grad(set_to_none=True)
                if self.by_hand:
                    diagnostics = ppo_loss_by_hand(stacked, batch, algo, clip)
                else:
                    diagnostics = vmapped_backward(
                        stacked, lambda policy, *seed_batch: ppo_loss(policy, *seed_batch, algo, clip), *batch
                    )
                if algo.max_grad_norm is not None:
                    stacked.clip_grad_norms_(algo.max_grad_norm)
                self.optimizer.step()
                totals += diagnostics
                minibatches += 1
        return {"policy_loss": (totals[:, 0] / minibatches).tolist()}  # one read of the diagnostics per update

    def state_dicts(self) -> list[dict[str, torch.Tensor]]:
        tensors = {**self.stacked.params, **self.stacked.buffers}
        keys = self.stacked.template.state_dict().keys()
        return [{key: tensors[key][k].detach().clone() for key in keys} for k in range(self.stacked.count)]


def max_difference(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> float:
    return max(float((x[key] - y[key]).abs().max()) for x, y in zip(a, b, strict=True) for key in x)


def timed(updates: dict[str, Callable[[], Any]], repeats: int) -> dict[str, tuple[list[float], list[float]]]:
    """(wall seconds, CPU seconds of this process) of each update, ``repeats`` times, the ways interleaved so that a
    change of the machine's load weighs on all of them alike; one untimed call each first (first-call
    allocations). With one thread the CPU time is the work itself, far less sensitive than the wall time to other
    processes taking turns on the cores."""
    for update in updates.values():
        update()
    seconds: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in updates}
    for _ in range(repeats):
        for name, update in updates.items():
            wall, cpu = time.perf_counter(), time.process_time()
            update()
            seconds[name][0].append(time.perf_counter() - wall)
            seconds[name][1].append(time.process_time() - cpu)
    return seconds


def run_case(case: str, count: int, repeats: int) -> dict[str, Any]:
    params = load_params(ROOT / "params.yaml", CASES[case])
    algo = params.algo
    assert isinstance(algo, PPOConfig)
    make_policy = make_policy_fn(params.policy, algo)
    seeds = list(range(count))
    rollouts = [rollout(seed, algo, params.env.num_envs) for seed in seeds]
    transitions = algo.n_steps * params.env.num_envs

    def learners() -> dict[str, Any]:
        return {
            "sequential": Sequential(seeds, make_policy, algo),
            "vmap": Stacked(seeds, make_policy, algo, by_hand=False),
            "bmm": Stacked(seeds, make_policy, algo, by_hand=True),
        }

    checked = learners()
    for learner in checked.values():
        learner.update(rollouts)
    reference = checked["sequential"].state_dicts()
    result: dict[str, Any] = {
        "case": case,
        "seeds": count,
        "hidden_sizes": params.policy.hidden_sizes,
        "transitions": transitions,
        "n_epochs": algo.n_epochs,
        "batch_size": algo.batch_size,
        "gradient_steps_per_seed": algo.n_epochs * (transitions // algo.batch_size),
    }
    seconds = timed({name: partial(learner.update, rollouts) for name, learner in learners().items()}, repeats)
    for name, (wall, cpu) in seconds.items():
        result[f"{name}_seconds"] = round(statistics.median(wall), 4)
        result[f"{name}_cpu_seconds"] = round(statistics.median(cpu), 4)
    for name in ("vmap", "bmm"):
        result[f"{name}_speedup"] = round(result["sequential_seconds"] / result[f"{name}_seconds"], 2)
        result[f"{name}_cpu_speedup"] = round(result["sequential_cpu_seconds"] / result[f"{name}_cpu_seconds"], 2)
        result[f"{name}_max_weight_difference"] = max_difference(checked[name].state_dicts(), reference)
    result["load_average_1min"] = round(os.getloadavg()[0], 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seeds-counts", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    args = parser.parse_args()
    torch.set_num_threads(1)
    for case in args.cases:
        for count in args.seeds_counts:
            emit(run_case(case, count, args.repeats))


if __name__ == "__main__":
    main()
