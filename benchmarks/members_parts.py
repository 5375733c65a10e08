"""Benchmark: the parts of the member-axis design that ``members.py`` does not time (issue 39's groundwork).

One JSON line per (part, way, M): milliseconds per call, median of ``--repeats`` repeats of ``--calls`` calls, one
torch thread, and the largest difference of the outputs (or updated weights) from the loop over members:

- ``cnn``: the MinAtar encoder (``SmallCNN``: 16 3x3 filters on 4x10x10 frames, then 1024 -> 128) forward and
  backward at batch 256: ``loop`` (M modules in turn), ``grouped`` (members as convolution groups: input
  (B, M * C, H, W), ``groups=M``; the linear layer a ``baddbmm``), ``vmap`` (``torch.func`` over the stacked modules);
- ``lstm``: an LSTM of 64 on 64 features, 16 sequences of 16 steps, forward and backward: ``loop`` (M ``nn.LSTM``s
  in turn), ``cell`` (the cell written over members: per step one ``baddbmm`` of the input and of the state);
- ``adam``: one optimizer step over PPO CartPole's stacked weights (9,155 per member): ``fused`` (torch's fused Adam,
  every member steps), ``masked`` (``StackedAdam``: a step count and learning rate per member, a member may sit out).

    OMP_NUM_THREADS=1 python benchmarks/members_parts.py [--parts cnn lstm adam] [--members 1 4 8] [--repeats 5]
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

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.func import functional_call, stack_module_state, vmap  # noqa: E402
from torch.optim.adam import adam as adam_functional  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit  # noqa: E402

from rlcore.nets.stacked_optimizers import StackedAdam  # noqa: E402

BATCH = 256


def timed(fn: Callable[[], torch.Tensor], calls: int, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return 1e3 * statistics.median(times)


def cnn(count: int) -> dict[str, Callable[[], torch.Tensor]]:
    """The MinAtar encoder's forward and backward (sum of the features), three ways; each returns the features."""
    torch.manual_seed(0)
    nets = [
        nn.Sequential(nn.Conv2d(4, 16, 3), nn.ReLU(), nn.Flatten(), nn.Linear(1024, 128), nn.ReLU())
        for _ in range(count)
    ]
    frames = torch.rand(count, BATCH, 4, 10, 10)
    params, buffers = stack_module_state(nets)
    conv_w = params["0.weight"].detach().reshape(count * 16, 4, 3, 3).requires_grad_(True)
    conv_b = params["0.bias"].detach().reshape(count * 16).requires_grad_(True)
    lin_w, lin_b = (params[name].detach().clone().requires_grad_(True) for name in ("3.weight", "3.bias"))

    def loop() -> torch.Tensor:
        out = torch.stack([net(frames[k]) for k, net in enumerate(nets)])
        out.sum().backward()
        return out

    def grouped() -> torch.Tensor:
        x = frames.transpose(0, 1).reshape(BATCH, count * 4, 10, 10)
        x = F.relu(F.conv2d(x, conv_w, conv_b, groups=count))  # (B, M * 16, 8, 8)
        x = x.view(BATCH, count, 1024).transpose(0, 1)  # (M, B, 1024): each member's channels in its order
        out = F.relu(torch.baddbmm(lin_b.unsqueeze(1), x, lin_w.transpose(1, 2)))
        out.sum().backward()
        return out

    def vmapped() -> torch.Tensor:
        out = vmap(lambda p, b, x: functional_call(nets[0], (p, b), (x,)))(params, buffers, frames)
        out.sum().backward()
        return out

    return {"loop": loop, "grouped": grouped, "vmap": vmapped}


def lstm(count: int) -> dict[str, Callable[[], torch.Tensor]]:
    """An LSTM of 64 on 16 sequences of 16 steps, forward and backward, two ways; each returns the outputs."""
    torch.manual_seed(0)
    steps, sequences, size = 16, BATCH // 16, 64
    cores = [nn.LSTM(size, size, batch_first=False) for _ in range(count)]
    inputs = torch.randn(count, steps, sequences, size)
    stack = {
        name: torch.stack([getattr(core, name).detach() for core in cores]).requires_grad_(True)
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
    }

    def loop() -> torch.Tensor:
        out = torch.stack([core(inputs[k])[0] for k, core in enumerate(cores)])
        out.sum().backward()
        return out

    def cell() -> torch.Tensor:
        h = c = torch.zeros(count, sequences, size)
        w_ih, w_hh = stack["weight_ih_l0"].transpose(1, 2), stack["weight_hh_l0"].transpose(1, 2)
        bias = (stack["bias_ih_l0"] + stack["bias_hh_l0"]).unsqueeze(1)
        x_gates = torch.baddbmm(bias, inputs.flatten(1, 2), w_ih).view(count, steps, sequences, 4 * size)
        outs = []
        for t in range(steps):  # torch's gate order: input, forget, cell, output
            gates = torch.baddbmm(x_gates[:, t], h, w_hh)
            i, f, g, o = gates.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outs.append(h)
        out = torch.stack(outs, dim=1)
        out.sum().backward()
        return out

    return {"loop": loop, "cell": cell}


def adam(count: int) -> dict[str, Callable[[], torch.Tensor]]:
    """One Adam step over PPO CartPole's stacked weights, two ways; each returns the first weight tensor."""
    torch.manual_seed(0)
    shapes = [(64, 4), (64,), (64, 64), (64,), (2, 64), (2,), (64, 4), (64,), (64, 64), (64,), (1, 64), (1,)]
    steppers: dict[str, tuple[torch.optim.Optimizer | None, list[torch.Tensor], torch.Tensor | None]] = {}
    for way in ("fused", "masked", "fused-views"):
        params = [torch.randn(count, *shape, requires_grad=True) for shape in shapes]
        for param in params:
            param.grad = torch.randn_like(param)
        if way == "fused":
            optimizer: torch.optim.Optimizer = torch.optim.Adam(params, lr=1e-3, eps=1e-5, fused=True)
            steppers[way] = (optimizer, params, None)
        elif way == "fused-views":
            steppers[way] = (None, params, torch.ones(count, dtype=torch.bool))
        else:
            optimizer = StackedAdam(params, count, lr=1e-3, eps=1e-5)
            optimizer.param_groups[0]["lr"] = torch.full((count,), 1e-3, dtype=torch.float64)  # per member
            steppers[way] = (optimizer, params, torch.ones(count, dtype=torch.bool))

    def step(way: str) -> Callable[[], torch.Tensor]:
        optimizer, params, active = steppers[way]
        if optimizer is None:
            return views_step(params, count)
        if active is None:
            return lambda: (optimizer.step(), params[0])[1]
        mixed = active.clone()
        mixed[0] = False  # one member sits the step out: the masked path, not the all-active shortcut
        return lambda: (optimizer.step(active=mixed), params[0])[1]  # type: ignore[call-arg]

    return {way: step(way) for way in steppers}


def views_step(params: list[torch.Tensor], count: int) -> Callable[[], torch.Tensor]:
    """torch's fused Adam kernel on per-member views of the stacked tensors, each with its own step count: a member
    that sits a step out is left out of the lists (here member 0, every call)."""
    views = [[param.detach()[k] for param in params] for k in range(count)]
    grads = [[param.grad[k] for param in params] for k in range(count)]  # type: ignore[index]
    avgs = [[torch.zeros_like(view) for view in member] for member in views]
    squares = [[torch.zeros_like(view) for view in member] for member in views]
    steps = [[torch.zeros(()) for _ in member] for member in views]
    active = list(range(1, count)) or [0]

    def run() -> torch.Tensor:
        pick = lambda lists: [tensor for k in active for tensor in lists[k]]  # noqa: E731
        adam_functional(
            pick(views),
            pick(grads),
            pick(avgs),
            pick(squares),
            [],
            pick(steps),
            fused=True,
            amsgrad=False,
            beta1=0.9,
            beta2=0.999,
            lr=1e-3,
            weight_decay=0.0,
            eps=1e-5,
            maximize=False,
        )
        return params[0]

    return run


PARTS = {"cnn": cnn, "lstm": lstm, "adam": adam}


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=sorted(PARTS), default=list(PARTS))
    parser.add_argument("--members", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for part in args.parts:
        for count in args.members:
            ways = PARTS[part](count)
            reference = ways["loop"]().detach() if "loop" in ways else None
            for way, fn in ways.items():
                row: dict[str, object] = {"part": part, "way": way, "members": count}
                if reference is not None:
                    row["max_abs_diff"] = float((fn().detach() - reference).abs().max())
                row["ms_per_call"] = round(timed(fn, args.calls, args.repeats), 4)
                row["ms_per_member"] = round(row["ms_per_call"] / count, 4)  # type: ignore[operator]
                emit(row)


if __name__ == "__main__":
    main()
