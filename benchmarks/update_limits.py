"""Benchmark: the cost of one update of A2C, PPO, DQN and SAC against its limit here.

Prints one JSON line per algorithm. For each shipped preset (``configs/a2c-cartpole.yaml``, ``params.yaml``'s PPO,
``configs/dqn-cartpole.yaml``, ``configs/sac-pendulum.yaml``) three ways of doing the same update on the same
shapes, median microseconds per update over ``--repeats`` interleaved blocks of ``--updates`` updates:

- ``rlcore``: the algorithm's own ``update`` as the trainers call it (A2C and PPO on a filled ``RolloutBuffer`` of
  the preset's ``n_steps x num_envs``: one A2C gradient step, PPO's ``n_epochs`` epochs of minibatches of
  ``batch_size``; DQN and SAC on a replay batch of the preset's ``batch_size``), metrics included;
- ``eager``: the same arithmetic written as plainly as PyTorch allows — the same layer sizes, losses, gradient
  clipping, optimizer and target update, nothing else (no metrics read back, no checks, no member dimension);
- ``compiled``: ``eager``'s loss under ``torch.compile`` (inductor, C++ on this CPU) and the optimizer's step
  compiled too; ``compile_seconds`` is its first call's wall time, which a run pays once.

``rlcore_over_eager`` is the overhead the library adds around the arithmetic; ``eager_over_compiled`` what a fused
update could win. The batches are random tensors of the right shapes: the time of an update does not depend on
their values here (no data-dependent branches in these updates).

    python benchmarks/update_limits.py [--algos a2c ppo dqn sac] [--updates 300] [--repeats 5] [--no-compile]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit  # noqa: E402

from rlcore.params import load_params  # noqa: E402
from rlcore.registry import algorithm_class  # noqa: E402

PRESETS = {
    "a2c": ROOT / "configs" / "a2c-cartpole.yaml",
    "ppo": ROOT / "params.yaml",
    "dqn": ROOT / "configs" / "dqn-cartpole.yaml",
    "sac": ROOT / "configs" / "sac-pendulum.yaml",
}


def mlp(sizes: list[int], activation: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for index, (width_in, width_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(width_in, width_out))
        if index < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


class Way:
    """One way of doing the update: ``step()`` does one update; ``compile_seconds`` what making it cost."""

    def __init__(self, step: Callable[[], Any], compile_seconds: float = 0.0) -> None:
        self.step = step
        self.compile_seconds = compile_seconds


def make_optimizer_step(optimizer: torch.optim.Optimizer, compiled: bool) -> Callable[[], Any]:
    if not compiled:
        return optimizer.step
    return torch.compile(optimizer.step)


def preset_algorithm(algo: str) -> tuple[Any, Any, Any]:
    """(params, a probe env, the algorithm) of ``PRESETS[algo]``, built as the trainers build them."""
    import gymnasium as gym

    params = load_params(PRESETS[algo], [])
    env = gym.make(params.env.id)
    algo_cls = algorithm_class(params.algo.name)
    policy = algo_cls.make_policy(env.observation_space, env.action_space, params.policy, params.algo)
    return params, env, algo_cls(policy, params.algo)


# --- A2C: one step on n_steps x num_envs CartPole samples, separate [64, 64] tanh actor and critic, RMSprop ---


def random_rollout(params: Any, env: Any) -> Any:
    """A ``RolloutBuffer`` of the preset's ``n_steps x num_envs`` CartPole samples, random but of the right kinds."""
    from rlcore.data.rollouts import RolloutBuffer

    obs_dim, n_actions = env.observation_space.shape[0], int(env.action_space.n)
    rollout = RolloutBuffer(params.algo.n_steps, params.env.num_envs, (obs_dim,), (), torch.int64)
    rollout.obs.normal_()
    rollout.actions.random_(0, n_actions)
    rollout.advantages.normal_()
    rollout.returns.normal_()
    rollout.values.normal_()
    rollout.log_probs.fill_(-0.7)  # about log(1/2): ratios near 1, as on a rollout the policy just collected
    return rollout


def on_policy_start(algo: str) -> tuple[Any, int, int, Any, dict[str, Way]]:
    """(params, obs_dim, n_actions, a random rollout, {"rlcore": the algorithm's own update on it}) of an on-policy
    preset."""
    params, env, algorithm = preset_algorithm(algo)
    rollout = random_rollout(params, env)
    generator = torch.Generator().manual_seed(0)
    ways = {"rlcore": Way(lambda: algorithm.update(rollout, 0.5, generator))}
    return params, env.observation_space.shape[0], int(env.action_space.n), rollout, ways


def a2c_ways(compile_too: bool) -> dict[str, Way]:
    params, obs_dim, n_actions, rollout, ways = on_policy_start("a2c")
    cfg = params.algo

    hidden = list(params.policy.hidden_sizes)
    actor, critic = mlp([obs_dim, *hidden, n_actions], nn.Tanh), mlp([obs_dim, *hidden, 1], nn.Tanh)
    parameters = [*actor.parameters(), *critic.parameters()]
    obs, actions = rollout.obs.reshape(-1, obs_dim), rollout.actions.reshape(-1)
    advantages, returns = rollout.advantages.reshape(-1), rollout.returns.reshape(-1)

    def loss() -> torch.Tensor:
        logits = actor(obs)
        log_probs = logits.log_softmax(-1)
        log_prob = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
        adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        value_loss = F.mse_loss(critic(obs).squeeze(-1), returns)
        return -(log_prob * adv).mean() + cfg.vf_coef * value_loss - cfg.ent_coef * entropy

    for name, compiled in (("eager", False), ("compiled", True)):
        if compiled and not compile_too:
            continue
        optimizer = torch.optim.RMSprop(parameters, lr=cfg.lr, alpha=0.99, eps=cfg.optimizer_eps, foreach=True)
        ways[name] = plain_way(loss, parameters, optimizer, cfg.max_grad_norm, compiled)
    return ways


# --- PPO: n_epochs epochs of minibatches on n_steps x num_envs CartPole samples, [64, 64] tanh actor and critic ---


def ppo_ways(compile_too: bool) -> dict[str, Way]:
    params, obs_dim, n_actions, rollout, ways = on_policy_start("ppo")
    cfg = params.algo

    hidden = list(params.policy.hidden_sizes)
    samples = rollout.obs.shape[0] * rollout.obs.shape[1]
    obs, actions = rollout.obs.reshape(-1, obs_dim), rollout.actions.reshape(-1)
    advantages, returns = rollout.advantages.reshape(-1), rollout.returns.reshape(-1)
    old_log_probs = rollout.log_probs.reshape(-1)
    for name, compiled in (("eager", False), ("compiled", True)):
        if compiled and not compile_too:
            continue
        actor, critic = mlp([obs_dim, *hidden, n_actions], nn.Tanh), mlp([obs_dim, *hidden, 1], nn.Tanh)
        parameters = [*actor.parameters(), *critic.parameters()]
        optimizer = torch.optim.Adam(parameters, lr=cfg.lr, eps=cfg.adam_eps, fused=True)

        def loss(index: torch.Tensor, actor: nn.Module = actor, critic: nn.Module = critic) -> torch.Tensor:
            log_probs = actor(obs[index]).log_softmax(-1)
            log_prob = log_probs.gather(-1, actions[index].unsqueeze(-1)).squeeze(-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
            adv = advantages[index]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            ratio = (log_prob - old_log_probs[index]).exp()
            clipped = ratio.clamp(1 - cfg.clip_range, 1 + cfg.clip_range)
            policy_loss = -torch.min(ratio * adv, clipped * adv).mean()
            value_loss = F.mse_loss(critic(obs[index]).squeeze(-1), returns[index])
            return policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy

        generator = torch.Generator().manual_seed(0)

        def minibatches(generator: torch.Generator = generator) -> Iterator[tuple[torch.Tensor]]:
            for _ in range(cfg.n_epochs):
                for index in torch.randperm(samples, generator=generator).split(cfg.batch_size):
                    yield (index,)

        ways[name] = plain_way(loss, parameters, optimizer, cfg.max_grad_norm, compiled, minibatches=minibatches)
    return ways


def plain_way(
    loss: Callable[..., torch.Tensor],
    parameters: list[nn.Parameter],
    optimizer: torch.optim.Optimizer,
    max_grad_norm: float | None,
    compiled: bool,
    after: Callable[[], None] | None = None,
    minibatches: Callable[[], Iterable[tuple[torch.Tensor, ...]]] = lambda: [()],
) -> Way:
    """One update: a gradient step on ``loss(*args)`` for each ``args`` of ``minibatches()`` (default: one step on
    ``loss()``; PPO: its epochs of minibatch indices), clipping the gradient norm, then ``after()`` (a target
    update)."""
    loss_of = torch.compile(loss) if compiled else loss
    optimizer_step = make_optimizer_step(optimizer, compiled)

    def step() -> None:
        for args in minibatches():
            optimizer.zero_grad(set_to_none=True)
            loss_of(*args).backward()
            if max_grad_norm is not None:
                nn.utils.clip_grad_norm_(parameters, max_grad_norm, foreach=True)
            optimizer_step()
            if after is not None:
                after()

    started = time.perf_counter()
    if compiled:
        step()
    return Way(step, time.perf_counter() - started if compiled else 0.0)


# --- DQN: one step on a replay batch, [64, 64] relu Q-network, double DQN, Huber, Adam, hard target update ---


def dqn_ways(compile_too: bool) -> dict[str, Way]:
    params, env, algorithm = preset_algorithm("dqn")
    cfg = params.algo
    obs_dim, n_actions, batch_size = env.observation_space.shape[0], int(env.action_space.n), cfg.batch_size
    batch = {
        "obs": torch.randn(batch_size, obs_dim),
        "next_obs": torch.randn(batch_size, obs_dim),
        "actions": torch.randint(0, n_actions, (batch_size,)),
        "rewards": torch.ones(batch_size),
        "discounts": torch.full((batch_size,), cfg.gamma**cfg.n_step),
    }
    ways = {"rlcore": Way(lambda: algorithm.update(batch, 0.5))}

    hidden = list(params.policy.hidden_sizes)
    for name, compiled in (("eager", False), ("compiled", True)):
        if compiled and not compile_too:
            continue
        online = mlp([obs_dim, *hidden, n_actions], nn.ReLU)
        target = mlp([obs_dim, *hidden, n_actions], nn.ReLU)
        target.load_state_dict(online.state_dict())
        optimizer = torch.optim.Adam(online.parameters(), lr=cfg.lr, fused=True)
        counter = [0]

        def loss(online: nn.Module = online, target: nn.Module = target) -> torch.Tensor:
            q = online(batch["obs"]).gather(-1, batch["actions"].unsqueeze(-1)).squeeze(-1)
            with torch.no_grad():
                best = online(batch["next_obs"]).argmax(-1, keepdim=True)
                next_q = target(batch["next_obs"]).gather(-1, best).squeeze(-1)
                td_target = batch["rewards"] + batch["discounts"] * next_q
            return F.smooth_l1_loss(q, td_target)

        def hard_update(online: nn.Module = online, target: nn.Module = target, counter: list[int] = counter) -> None:
            counter[0] += 1
            if counter[0] % cfg.target_update_interval == 0:
                target.load_state_dict(online.state_dict())

        ways[name] = plain_way(loss, list(online.parameters()), optimizer, cfg.max_grad_norm, compiled, hard_update)
    return ways


# --- SAC: one step on a replay batch, [64, 64] relu actor and twin critics, auto alpha, Polyak targets ---


def sac_ways(compile_too: bool) -> dict[str, Way]:
    params, env, algorithm = preset_algorithm("sac")
    cfg = params.algo
    obs_dim, action_dim, batch_size = env.observation_space.shape[0], env.action_space.shape[0], cfg.batch_size
    batch = {
        "obs": torch.randn(batch_size, obs_dim),
        "next_obs": torch.randn(batch_size, obs_dim),
        "actions": torch.rand(batch_size, action_dim) * 2 - 1,
        "rewards": torch.randn(batch_size),
        "discounts": torch.full((batch_size,), cfg.gamma),
    }
    ways = {"rlcore": Way(lambda: algorithm.update(batch, 0.5))}
    hidden = list(params.policy.hidden_sizes)
    for name, compiled in (("eager", False), ("compiled", True)):
        if compiled and not compile_too:
            continue
        ways[name] = sac_plain_way(batch, obs_dim, action_dim, hidden, cfg, compiled)
    return ways


def sac_plain_way(
    batch: dict[str, torch.Tensor], obs_dim: int, action_dim: int, hidden: list[int], cfg: Any, compiled: bool
) -> Way:
    actor = mlp([obs_dim, *hidden, 2 * action_dim], nn.ReLU)
    critics = nn.ModuleList([mlp([obs_dim + action_dim, *hidden, 1], nn.ReLU) for _ in range(2)])
    targets = nn.ModuleList([mlp([obs_dim + action_dim, *hidden, 1], nn.ReLU) for _ in range(2)])
    targets.load_state_dict(critics.state_dict())
    log_alpha = torch.zeros((), requires_grad=True)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=cfg.lr, fused=True)
    critic_optimizer = torch.optim.Adam(critics.parameters(), lr=cfg.lr, fused=True)
    alpha_optimizer = torch.optim.Adam([log_alpha], lr=cfg.lr)
    target_entropy = -float(action_dim)

    def sample(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = actor(obs).chunk(2, -1)
        std = log_std.clamp(-20, 2).exp()
        noise = torch.randn_like(mean)
        pre_tanh = mean + std * noise
        action = torch.tanh(pre_tanh)
        log_prob = (-0.5 * noise.square() - log_std.clamp(-20, 2) - 0.9189385332046727).sum(-1)
        log_prob = log_prob - (2 * (0.6931471805599453 - pre_tanh - F.softplus(-2 * pre_tanh))).sum(-1)
        return action, log_prob

    def q_of(nets: nn.ModuleList, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, actions], -1)
        return torch.stack([net(x).squeeze(-1) for net in nets])

    def critic_loss() -> torch.Tensor:
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            next_actions, next_log_prob = sample(batch["next_obs"])
            next_q = q_of(targets, batch["next_obs"], next_actions).min(0).values - alpha * next_log_prob
            target = batch["rewards"] + batch["discounts"] * next_q
        return (q_of(critics, batch["obs"], batch["actions"]) - target).square().mean(-1).sum()

    def actor_loss() -> tuple[torch.Tensor, torch.Tensor]:
        alpha = log_alpha.exp().detach()
        actions, log_prob = sample(batch["obs"])
        q_pi = q_of(critics, batch["obs"], actions).min(0).values
        return (alpha * log_prob - q_pi).mean(), -log_prob.mean()

    critic_loss_of = torch.compile(critic_loss) if compiled else critic_loss
    actor_loss_of = torch.compile(actor_loss) if compiled else actor_loss
    critic_step = make_optimizer_step(critic_optimizer, compiled)
    actor_step = make_optimizer_step(actor_optimizer, compiled)
    alpha_step = make_optimizer_step(alpha_optimizer, compiled)
    critic_parameters, target_parameters = list(critics.parameters()), list(targets.parameters())

    def step() -> None:
        critic_optimizer.zero_grad(set_to_none=True)
        critic_loss_of().backward()
        critic_step()
        for parameter in critic_parameters:
            parameter.requires_grad_(False)
        actor_optimizer.zero_grad(set_to_none=True)
        loss, entropy = actor_loss_of()
        loss.backward()
        actor_step()
        for parameter in critic_parameters:
            parameter.requires_grad_(True)
        alpha_optimizer.zero_grad(set_to_none=True)
        (-(log_alpha * (target_entropy - entropy.detach()))).backward()
        alpha_step()
        with torch.no_grad():
            torch._foreach_lerp_(target_parameters, critic_parameters, cfg.tau)

    started = time.perf_counter()
    if compiled:
        step()
    return Way(step, time.perf_counter() - started if compiled else 0.0)


MAKERS = {"a2c": a2c_ways, "ppo": ppo_ways, "dqn": dqn_ways, "sac": sac_ways}


def time_ways(ways: dict[str, Way], updates: int, repeats: int) -> dict[str, float]:
    """Median microseconds per update of each way, over ``repeats`` blocks run in turn (interleaved, so a change in
    the machine's load falls on every way alike)."""
    for way in ways.values():  # warm-up: allocator, first-call dispatch, lazy optimizer state
        for _ in range(20):
            way.step()
    blocks: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(repeats):
        for name, way in ways.items():
            started = time.perf_counter()
            for _ in range(updates):
                way.step()
            blocks[name].append((time.perf_counter() - started) / updates * 1e6)
    return {name: statistics.median(values) for name, values in blocks.items()}


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", choices=sorted(MAKERS), default=sorted(MAKERS))
    parser.add_argument("--updates", type=int, default=300, help="updates per timed block")
    parser.add_argument("--repeats", type=int, default=5, help="timed blocks per way (the median is reported)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile way")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for algo in args.algos:
        ways = MAKERS[algo](not args.no_compile)
        micros = time_ways(ways, args.updates, args.repeats)
        result: dict[str, Any] = {
            "benchmark": "update_limits",
            "algo": algo,
            "preset": str(PRESETS[algo].relative_to(ROOT)),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "updates_per_block": args.updates,
            "repeats": args.repeats,
            **{f"{name}_us_per_update": round(value, 1) for name, value in micros.items()},
            "rlcore_over_eager": round(micros["rlcore"] / micros["eager"], 2),
        }
        if "compiled" in micros:
            result["compile_seconds"] = round(ways["compiled"].compile_seconds, 1)
            result["eager_over_compiled"] = round(micros["eager"] / micros["compiled"], 2)
            result["rlcore_over_compiled"] = round(micros["rlcore"] / micros["compiled"], 2)
        emit(result)


if __name__ == "__main__":
    main()
