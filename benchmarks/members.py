"""Benchmark: the forms of an update batched over members (issue 39) for PPO, DQN, SAC and BC at the presets' sizes.

One JSON line per (algorithm, form, M): seconds per gradient step (median of ``--repeats`` repeats of ``--steps``
steps, one torch thread; wall and this process's CPU time), for M members in these forms:

- ``today``: today's batched implementation (PPO ``PPO.update_members`` over ``StackedMembers``, SAC
  ``SAC.update_members`` over ``rlcore.algos.sac_members.StackedSAC``; DQN's and BC's batched steps live inside
  their trainers, so their arithmetic is inlined here as ``off_policy_seeds._Phase._update`` and
  ``offline_seeds._Cohort.update`` write it);
- ``loop``: the single-seed algorithm (``PPO.update``, ``DQN.update``, ``SAC.update``, ``BC.update``) run M times;
  its M = 1 row is today's one-seed update, the baseline of the issue's "one seed not slower than 0.95x";
- ``vmap``: ``torch.func``: stacked parameters, the per-member loss under ``vmap(grad(...))``, one fused Adam;
- ``bmm``: the same loss on the stacked parameters, each linear layer a ``torch.baddbmm`` (M = 1 the same code).
``vmap`` and ``bmm`` share one loss per algorithm (``members_forms.py``). One PPO "step" is a tenth of
``PPO.update`` on the preset's rollout (512 transitions, 5 epochs of 2 minibatches of 256), shuffles included.

Before timing, each form's weights after 3 steps (PPO: one update, 10 steps) from the same initial weights, data and
noise are compared with ``loop``'s: ``max_abs_diff`` and ``equal`` (``torch.allclose`` rtol 1e-4, atol 1e-6).
``--compile`` adds ``compiled`` rows: the ``bmm`` form's loss and optimizer step under ``torch.compile`` (inductor,
CPU), with the compile time (the first step's wall seconds).

    OMP_NUM_THREADS=1 python benchmarks/members.py [--algos ppo dqn sac bc] [--members 1 4 8 16] [--repeats 5]
        [--steps 200] [--forms today loop vmap bmm] [--compile]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import members_forms as mf  # noqa: E402
from common import ROOT, emit  # noqa: E402
from seeds_batching import rollout  # noqa: E402

from rlcore.algos.bc import BC, bc_loss, bc_optimizer  # noqa: E402
from rlcore.algos.dqn import DQN, dqn_loss, dqn_optimizer  # noqa: E402
from rlcore.algos.members import StackedMembers  # noqa: E402
from rlcore.algos.ppo import PPO  # noqa: E402
from rlcore.algos.sac import SAC  # noqa: E402
from rlcore.algos.sac_members import StackedSAC  # noqa: E402
from rlcore.nets.stacked import StackedPolicies  # noqa: E402
from rlcore.nets.stacked_actor_critic import StackedActorCritic  # noqa: E402
from rlcore.objectives.schedules import scheduled  # noqa: E402
from rlcore.params import load_params  # noqa: E402

PROGRESS = 0.5
POOL = 8
"""Distinct batches per member, cycled through (drawing data is not what is timed)."""
PRESETS = {"ppo": "configs/ppo-cartpole.yaml", "dqn": "configs/dqn-cartpole.yaml", "sac": "configs/sac-pendulum.yaml"}
ENVS = {"ppo": "CartPole-v1", "dqn": "CartPole-v1", "sac": "Pendulum-v1", "bc": "CartPole-v1"}


class Learner:
    """M members of one algorithm in one form: ``step()`` advances every member by one unit (``steps_per_call``
    gradient steps), ``weights()`` gives each member's parameters for the equality check."""

    steps_per_call = 1

    def step(self) -> None:
        raise NotImplementedError

    def weights(self) -> list[dict[str, torch.Tensor]]:
        raise NotImplementedError


def setup(algo: str) -> tuple[Any, Any, Any]:
    """(params, algorithm class, its make_policy closure) for ``algo`` at its preset's sizes."""
    params = load_params(ROOT / PRESETS.get(algo, "offline.yaml"))
    env = gym.make(ENVS[algo])
    spaces = env.observation_space, env.action_space
    env.close()
    kind = {"ppo": PPO, "dqn": DQN, "sac": SAC, "bc": BC}[algo]
    return params, kind, lambda: kind.make_policy(*spaces, params.policy, params.algo)


def algorithms(kind: Any, make_policy: Callable[[], Any], cfg: Any, count: int) -> list[Any]:
    """Member k as a single-seed run with ``seed: k`` builds it: ``torch.manual_seed(k)`` then the policy."""
    built = []
    for k in range(count):
        torch.manual_seed(k)
        built.append(kind(make_policy(), cfg))
    return built


def replay_batches(algo: str, count: int, batch_size: int) -> list[list[dict[str, torch.Tensor]]]:
    """``POOL`` synthetic replay (or dataset) batches per member, CartPole- or Pendulum-shaped."""
    g = torch.Generator().manual_seed(123)
    pools = []
    for _ in range(count):
        pool = []
        for _ in range(POOL):
            obs_dim = 3 if algo == "sac" else 4
            batch = {
                "obs": torch.randn(batch_size, obs_dim, generator=g),
                "next_obs": torch.randn(batch_size, obs_dim, generator=g),
                "rewards": torch.randn(batch_size, generator=g),
                "discounts": torch.full((batch_size,), 0.99) * (torch.rand(batch_size, generator=g) > 0.05),
            }
            if algo == "sac":
                batch["actions"] = torch.rand(batch_size, 1, generator=g) * 4 - 2
            else:
                batch["actions"] = torch.randint(2, (batch_size,), generator=g)
            pool.append(batch)
        pools.append(pool)
    return pools


def noise_of(count: int, t: int, batch_size: int) -> torch.Tensor:
    """SAC's standard normal draws (M, 2, B, 1) at step ``t``: what ``SAC.update`` draws from torch's global
    generator after ``torch.manual_seed(1000 * k + t)`` (s' first, then s)."""
    draws = []
    for k in range(count):
        torch.manual_seed(1000 * k + t)
        draws.append(torch.stack([torch.empty(batch_size, 1).normal_(), torch.empty(batch_size, 1).normal_()]))
    return torch.stack(draws)


class Loop(Learner):
    """The single-seed algorithm's update, run for each member in turn."""

    def __init__(self, algo: str, count: int, *, reseed: bool = False) -> None:
        self.algo, self.reseed, self.t = algo, reseed, 0
        params, kind, make_policy = setup(algo)
        self.members = algorithms(kind, make_policy, params.algo, count)
        if algo == "ppo":
            self.steps_per_call = params.algo.n_epochs * (params.algo.n_steps * params.env.num_envs // 256)
            self.rollouts = [rollout(k, params.algo, params.env.num_envs) for k in range(count)]
            self.generators = [torch.Generator().manual_seed(k) for k in range(count)]
        else:
            self.pools = replay_batches(algo, count, params.algo.batch_size)

    def step(self) -> None:
        for k, member in enumerate(self.members):
            if self.algo == "ppo":
                member.update(self.rollouts[k], PROGRESS, self.generators[k])
                continue
            if self.reseed:  # SAC's noise as noise_of draws it
                torch.manual_seed(1000 * k + self.t)
            member.update(self.pools[k][self.t % POOL], PROGRESS)
        self.t += 1

    def weights(self) -> list[dict[str, torch.Tensor]]:
        out = []
        for member in self.members:
            weights = {f"policy.{n}": p.detach().clone() for n, p in member.policy.named_parameters()}
            if self.algo == "sac":
                weights.update({f"critic.{n}": p.detach().clone() for n, p in member.critic.named_parameters()})
            out.append(weights)
        return out


class Batched(Learner):
    """The ``vmap`` or ``bmm`` form (``members_forms``), or ``today``'s batched implementation, of M members."""

    def __init__(self, algo: str, form: str, count: int, compiled: bool = False) -> None:
        self.algo, self.form, self.count, self.t = algo, form, count, 0
        params, kind, make_policy = setup(algo)
        cfg = self.cfg = params.algo
        self.members = algorithms(kind, make_policy, cfg, count)
        self.net = self.members[0].policy
        policies = [member.policy for member in self.members]
        loss_fn = {"ppo": mf.ppo_loss, "dqn": mf.dqn_member_loss, "bc": mf.bc_member_loss, "sac": mf.sac_actor_loss}
        self.loss_fn = torch.compile(loss_fn[algo]) if compiled else loss_fn[algo]
        self.critic_loss = torch.compile(mf.sac_critic_loss) if compiled else mf.sac_critic_loss
        if algo == "ppo":
            reference = Loop("ppo", count)
            self.rollouts, self.steps_per_call = reference.rollouts, reference.steps_per_call
            self.generators = [torch.Generator().manual_seed(k) for k in range(count)]
            fields = ("obs", "actions", "log_probs", "values", "advantages", "returns")
            self.data = {name: torch.stack([b.flat(name) for b in self.rollouts]) for name in fields}
        else:
            pools = replay_batches(algo, count, cfg.batch_size)
            self.pool = [{key: torch.stack([p[i][key] for p in pools]) for key in pools[0][0]} for i in range(POOL)]
        if form == "today":
            self._today(policies)
            return
        lr = scheduled(cfg.lr, cfg.lr_schedule, PROGRESS) if algo == "ppo" else cfg.lr
        if algo == "sac":
            self.actor, self.critic = mf.stacked(policies), mf.stacked([m.critic for m in self.members])
            self.target = {f"target.{n}": v.detach().clone() for n, v in self.critic.items()}
            self.log_alpha = torch.stack([m.log_alpha.detach() for m in self.members]).requires_grad_(True)
            self.critic_step = mf.Step(self.critic.values(), cfg.max_grad_norm, compiled, lr=cfg.lr)
            self.actor_step = mf.Step(self.actor.values(), cfg.max_grad_norm, compiled, lr=cfg.actor_lr or cfg.lr)
            self.alpha_step = mf.Step([self.log_alpha], None, compiled, lr=cfg.lr)
            self.nets = (self.net, self.members[0].critic)
            self.target_entropy = self.members[0].target_entropy
            return
        self.params = mf.stacked(policies)
        adam: dict[str, Any] = {"lr": lr, "eps": cfg.adam_eps} if algo == "ppo" else {"lr": lr}
        if algo == "bc":
            adam["weight_decay"] = cfg.weight_decay
        self.opt_step = mf.Step(self.params.values(), getattr(cfg, "max_grad_norm", None), compiled, **adam)
        if algo == "dqn":
            self.target_params = {n: v.detach().clone() for n, v in self.params.items()}

    def _today(self, policies: list[Any]) -> None:
        if self.algo == "ppo":
            self.stacked_ac = StackedActorCritic(policies, [member.optimizer for member in self.members])
        elif self.algo == "sac":
            self.stacked_sac = StackedSAC(self.members)
        else:
            self.online = StackedPolicies(policies)
            make = dqn_optimizer if self.algo == "dqn" else bc_optimizer
            self.optimizer = make(self.online.parameters(), self.cfg)  # type: ignore[arg-type]
            if self.algo == "dqn":
                self.target_stacked = StackedPolicies([member.target for member in self.members])

    def step(self) -> None:
        batch = None if self.algo == "ppo" else self.pool[self.t % POOL]
        if self.algo == "sac":
            assert batch is not None
            batch = {**batch, "noise": self.noise[self.t % len(self.noise)]}
        getattr(self, f"_{self.form if self.form == 'today' else 'new'}_{self.algo}")(batch)
        self.t += 1

    # today's batched steps
    def _today_ppo(self, _: Any) -> None:
        members = StackedMembers(self.members, self.stacked_ac, self.rollouts)
        PPO.update_members(members, [PROGRESS] * self.count, self.generators)

    def _today_sac(self, batch: dict[str, torch.Tensor]) -> None:
        self.stacked_sac.load(self.pool[self.t % POOL], batch["noise"])
        SAC.update_members(self.stacked_sac)

    def _today_dqn(self, batch: dict[str, torch.Tensor]) -> None:  # off_policy_seeds._Phase._update's arithmetic
        cfg = self.cfg
        with torch.no_grad():
            next_target = self.target_stacked.mlp("q", batch["next_obs"])
            next_online = self.online.mlp("q", batch["next_obs"]) if cfg.double_dqn else None
        losses, _ = dqn_loss(self.online.mlp("q", batch["obs"]), next_online, next_target, batch)
        if not bool(torch.isfinite(losses).all()):
            return
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        if not bool(torch.isfinite(self.online.clip_grad_norms_(cfg.max_grad_norm)).all()):
            return
        self.optimizer.step()
        if (self.t + 1) % cfg.target_update_interval == 0:
            with torch.no_grad():
                torch._foreach_copy_(list(self.target_stacked.params.values()), list(self.online.params.values()))
        losses.tolist()  # the per-seed metrics

    def _today_bc(self, batch: dict[str, torch.Tensor]) -> None:  # offline_seeds._Cohort.update's arithmetic
        losses, quality = bc_loss(self.online.mlp("logits", batch["obs"]), batch["actions"], None, self.cfg.loss)
        if not bool(torch.isfinite(losses).all()):
            return
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        self.optimizer.step()
        losses.tolist(), quality.tolist()

    # the forms written once (members_forms)
    def _new_ppo(self, _: Any) -> None:
        cfg, rows = self.cfg, torch.arange(self.count).unsqueeze(1)
        clip = scheduled(cfg.clip_range, cfg.clip_range_schedule, PROGRESS)
        for _ in range(cfg.n_epochs):
            orders = [
                list(b.minibatches(cfg.batch_size, g)) for b, g in zip(self.rollouts, self.generators, strict=True)
            ]
            for indices in zip(*orders, strict=True):
                idx = torch.stack(indices)
                batch = {name: tensor[rows, idx] for name, tensor in self.data.items()}
                mf.backward(self.form, self.loss_fn, self.params, batch, self.net, cfg, clip)
                self.opt_step()

    def _new_dqn(self, batch: dict[str, torch.Tensor]) -> None:
        mf.backward(self.form, self.loss_fn, self.params, batch, self.target_params, self.net, self.cfg)
        self.opt_step()
        if (self.t + 1) % self.cfg.target_update_interval == 0:
            with torch.no_grad():
                torch._foreach_copy_(list(self.target_params.values()), list(self.params.values()))

    def _new_bc(self, batch: dict[str, torch.Tensor]) -> None:
        mf.backward(self.form, self.loss_fn, self.params, batch, self.net, self.cfg)
        self.opt_step()

    def _new_sac(self, batch: dict[str, torch.Tensor]) -> None:
        cfg, log_alpha = self.cfg, self.log_alpha.detach()
        frozen = {**{n: v.detach() for n, v in self.actor.items()}, **self.target, "log_alpha": log_alpha}
        mf.backward(self.form, self.critic_loss, self.critic, batch, frozen, self.nets, cfg)
        self.critic_step()
        frozen = {**{n: v.detach() for n, v in self.critic.items()}, "log_alpha": log_alpha}
        entropy = mf.backward(self.form, self.loss_fn, self.actor, batch, frozen, self.nets, cfg)
        self.actor_step()
        mf.alpha_backward(self.log_alpha, self.target_entropy, entropy.squeeze(-1))
        self.alpha_step()
        with torch.no_grad():
            torch._foreach_lerp_(list(self.target.values()), list(self.critic.values()), cfg.tau)

    def weights(self) -> list[dict[str, torch.Tensor]]:
        if self.form == "today":
            if self.algo == "ppo":
                for k in range(self.count):
                    self.stacked_ac.write_weights(k)
                return Loop.weights(self)  # type: ignore[arg-type]
            if self.algo == "sac":
                self.stacked_sac.write_back()
                return Loop.weights(self)  # type: ignore[arg-type]
            stacked = {f"policy.{n}": v.detach() for n, v in self.online.params.items()}
        elif self.algo == "sac":
            stacked = {
                **{f"policy.{n}": v.detach() for n, v in self.actor.items()},
                **{f"critic.{n}": v.detach() for n, v in self.critic.items()},
            }
        else:
            stacked = {f"policy.{n}": v.detach() for n, v in self.params.items()}
        return [{n: v[k].clone() for n, v in stacked.items()} for k in range(self.count)]


def make(algo: str, form: str, count: int, *, reseed: bool = False) -> Learner:
    if form == "loop":
        return Loop(algo, count, reseed=reseed)
    learner = Batched(algo, "bmm" if form == "compiled" else form, count, compiled=form == "compiled")
    if algo == "sac":
        steps = 3 if reseed else POOL
        learner.noise = [noise_of(count, t, learner.cfg.batch_size) for t in range(steps)]  # type: ignore[attr-defined]
    return learner


def equality(algo: str, form: str, count: int) -> tuple[float, bool, float]:
    """(max |difference|, allclose) of every member's weights after 3 steps (PPO: one update) against ``loop``, and
    the wall seconds of ``form``'s first step (for ``compiled``: the compile, from inductor's on-disk cache if warm)."""
    calls = 1 if algo == "ppo" else 3
    results, first = [], 0.0
    for which in ("loop", form):
        learner = make(algo, which, count, reseed=True)
        start = time.perf_counter()
        for _ in range(calls):
            learner.step()
            if which != "loop" and not first:
                first = time.perf_counter() - start
        results.append(learner.weights())
    worst, close = 0.0, True
    for expected, actual in zip(*results, strict=True):
        for name, value in expected.items():
            worst = max(worst, float((actual[name] - value).abs().max()))
            close &= torch.allclose(actual[name], value, rtol=1e-4, atol=1e-6)
    return worst, close, first


def timed(learner: Learner, steps: int, repeats: int) -> dict[str, float]:
    """Median wall and CPU seconds per gradient step over ``repeats`` runs of ``steps`` steps; the first call's
    wall seconds (compile time for ``compiled``)."""
    start = time.perf_counter()
    learner.step()
    first = time.perf_counter() - start
    calls = max(1, steps // learner.steps_per_call)
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            learner.step()
        per_step = calls * learner.steps_per_call
        walls.append((time.perf_counter() - wall) / per_step)
        cpus.append((time.process_time() - cpu) / per_step)
    return {
        "ms_per_step": 1e3 * statistics.median(walls),
        "cpu_ms_per_step": 1e3 * statistics.median(cpus),
        "first_call_seconds": first,
    }


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=["ppo", "dqn", "sac", "bc"])
    parser.add_argument("--forms", nargs="+", default=["today", "loop", "vmap", "bmm"])
    parser.add_argument("--members", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--compile", action="store_true", help="add the compiled bmm form at M = 1 and 8")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for algo in args.algos:
        for count in args.members:
            forms = list(args.forms) + (["compiled"] if args.compile and count in (1, 8) else [])
            for form in forms:
                row: dict[str, Any] = {"algo": algo, "form": form, "members": count}
                if form != "loop":
                    worst, close, first = equality(algo, form, count)
                    row.update(max_abs_diff=worst, equal=close, check_first_step_seconds=round(first, 3))
                torch._dynamo.reset()  # the compiled form's first timed call compiles: its compile time
                row.update(
                    {k: round(v, 4) for k, v in timed(make(algo, form, count), args.steps, args.repeats).items()}
                )
                row["ms_per_member_step"] = round(row["ms_per_step"] / count, 4)
                row["load_average_1min"] = round(os.getloadavg()[0], 2)
                emit(row)


if __name__ == "__main__":
    main()
