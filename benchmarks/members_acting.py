"""Benchmark: how M members' policies act in the on-policy loop (``rlcore.trainers.on_policy_acting``), no gradient.

One JSON line: per network kind, milliseconds per acting call (every member's action scores and values for its
batch of observations; median of ``--repeats`` repeats of ``--calls`` calls, one torch thread) in each form:

- ``loop``: each member's own policy in turn (the each-member form);
- ``vmap``: ``torch.func.vmap`` over ``functional_call`` of the members' stacked parameters;
- ``stacked``: ``StackedActorCritic`` (one ``baddbmm`` per layer; plain MLPs only).

Kinds: ``mlp`` (the CartPole preset's 64x64 tanh actor-critic, batch 8: ``params.yaml``'s 16 envs would be 16),
``cnn`` (the MinAtar preset's small CNN on 10x10x4 frames, batch 64), ``lstm`` (the LSTM preset's policy: vmap has
no batching rule for ``aten::lstm``, the line records the error).

    OMP_NUM_THREADS=1 python benchmarks/members_acting.py [--members 4] [--repeats 5] [--calls 200]
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

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.func import functional_call, stack_module_state, vmap  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit  # noqa: E402

from rlcore.envs.vector import make_vector_env  # noqa: E402
from rlcore.nets.policies import ActorCritic  # noqa: E402
from rlcore.nets.stacked_actor_critic import StackedActorCritic  # noqa: E402
from rlcore.params import load_params  # noqa: E402
from rlcore.registry import algorithm_class  # noqa: E402

KINDS = {
    "mlp": ("configs/ppo-cartpole.yaml", 8),
    "cnn": ("configs/ppo-minatar-breakout.yaml", 64),
    "lstm": ("configs/ppo-lstm-cartpole-po.yaml", 8),
}
"""Kind -> (preset, batch of observations per member)."""


class Acts(nn.Module):
    """A policy's acting outputs as a module's forward, for ``functional_call``: action scores and values."""

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        features, _ = self.policy.step_features(obs, state)
        return self.policy.distribution_of(features).logits, self.policy.value_of(features)  # type: ignore[attr-defined]


def timed(fn: Callable[[], Any], calls: int, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return round(1e3 * statistics.median(times), 3)


@torch.no_grad()
def kind_row(kind: str, count: int, calls: int, repeats: int) -> dict[str, Any]:
    preset, batch = KINDS[kind]
    params = load_params(ROOT / preset)
    env = make_vector_env(params.env, 1)
    env.close()
    policies: list[ActorCritic] = []
    for k in range(count):
        torch.manual_seed(k)
        policy = algorithm_class("ppo").make_policy(
            env.single_observation_space, env.single_action_space, params.policy, params.algo
        )
        policies.append(policy.eval())  # type: ignore[arg-type]
    obs = torch.stack([torch.as_tensor(env.single_observation_space.sample()) for _ in range(count * batch)])
    obs = obs.reshape(count, batch, *obs.shape[1:]).float()
    initial = policies[0].initial_state(batch)  # a recurrent policy's memory: (M, ...) for all
    memory = None if initial is None else torch.stack([initial] * count)
    modules = [Acts(policy) for policy in policies]
    row: dict[str, Any] = {"kind": kind, "preset": preset, "batch": batch}
    row["loop_ms"] = timed(
        lambda: [module(obs[k], None if memory is None else memory[k]) for k, module in enumerate(modules)],
        calls,
        repeats,
    )
    state = stack_module_state(modules)  # type: ignore[arg-type]
    base = modules[0]

    def one(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], *inputs: torch.Tensor) -> Any:
        return functional_call(base, (params, buffers), inputs)

    inputs = (obs,) if memory is None else (obs, memory)
    try:
        row["vmap_ms"] = timed(lambda: vmap(one)(*state, *inputs), calls, repeats)
    except Exception as error:  # noqa: BLE001 (what vmap refuses is the finding)
        row["vmap_error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    if type(policies[0]) is ActorCritic and kind == "mlp":
        stacked = StackedActorCritic(policies)
        row["stacked_ms"] = timed(
            lambda: (lambda f: (stacked.scores(f), stacked.values(f)))(stacked.features(obs)), calls, repeats
        )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [kind_row(kind, args.members, args.calls, args.repeats) for kind in KINDS]
    emit({"benchmark": "members_acting", "members": args.members, "torch_threads": 1, "kinds": rows})


if __name__ == "__main__":
    main()
