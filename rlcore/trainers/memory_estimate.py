"""Sizes that cannot be allocated, refused before training starts: an estimate of what a run keeps in memory
(the networks with their gradients and Adam's moments, the rollout or replay buffer, a minibatch's activations,
a streamed dataset's shuffle buffer, the actor, rollout worker or seed-group processes it starts) against the memory
this machine has available now.

The estimate is deliberately rough (float32 everywhere, a few copies where the code makes them) but never far
below the truth, so a refused run would not have fit; a run that passes may still be refused by the OS if other
processes take the memory meanwhile. Called by ``rlcore.trainers.session`` once the env's spaces are known and
before anything is written, so a refused run keeps the previous one.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from gymnasium import spaces

from rlcore.common.errors import ConfigError
from rlcore.data.replay import EPISODE_RESERVE
from rlcore.envs.observations import storage_dtype
from rlcore.nets.encoders import build_encoder

FLOAT = 4
"""Bytes per float32."""

PROCESS_BYTES = 170 * 2**20
"""Private memory of one actor, rollout worker or seed-group process (``train.seed_processes``) before its run's
own data: an interpreter with torch, gymnasium and rlcore's runners imported. Measured with psutil (USS: what one
more process takes; the shared libraries are mapped once for all) on CPU torch 2.13, Python 3.11: 146 MiB with torch
alone, 165 MiB with rlcore's runners, 164 MiB for an IMPALA CartPole actor at work (RSS 268 MiB), 130 MiB for an ES
CartPole rollout worker, 169 MiB for an interpreter that imported ``rlcore.trainers`` (RSS 272 MiB): what a seed
group's process holds before its seeds' own networks, buffers and envs."""

DASK_PROCESS_BYTES = 200 * 2**20
"""The same for a Dask worker process of the LocalCluster a run starts: distributed's imports on top (measured: 193
MiB USS, RSS 315 MiB, for a worker running an IMPALA CartPole actor)."""

NETWORKS = {"ppo": (2, 0), "dqn": (1, 1), "sac": (3, 2), "bc": (1, 0), "td3bc": (3, 3), "iql": (4, 2)}
"""Per algorithm: (networks trained with Adam, target copies). Unknown algorithms: the largest, (4, 3)."""


def available_memory() -> int | None:
    """Bytes this process can still allocate: ``MemAvailable``, or less under a cgroup (container) limit."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
            found.append(max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def mlp_parameters(in_features: int, hidden_sizes: list[int], out_features: int) -> int:
    widths = [in_features, *hidden_sizes, out_features]
    return sum(a * b + b for a, b in zip(widths[:-1], widths[1:], strict=False))


def encoder_size(observation_space: gym.Space, policy: Any) -> tuple[int, int, str]:
    """(parameters, output features, class name) of the encoder ``policy`` (``policy.encoder``) gives these
    observations. Built on the meta device to be counted (no memory: a huge image's CNN is refused, not allocated),
    under a forked RNG so the estimate leaves the run's random numbers alone."""
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        encoder = build_encoder(observation_space, policy.encoder, policy.image_channels)
    return sum(p.numel() for p in encoder.parameters()), encoder.out_features, type(encoder).__name__


def estimate(params: Any, observation_space: spaces.Space, action_space: spaces.Space) -> dict[str, tuple[int, str]]:
    """Bytes per part of a run, keyed by the params key that sizes it: ``{key: (bytes, what)}``. Observations count
    in their storage dtype (uint8 frames: a byte a pixel); an image encoder's weights count in every network."""
    obs_size = int(math.prod(observation_space.shape or (1,)))
    obs_bytes = obs_size * storage_dtype(observation_space).itemsize
    encoder_parameters, features, encoder_name = encoder_size(observation_space, params.policy)
    if isinstance(action_space, spaces.Discrete):
        action_outputs, action_bytes, action_dim = int(action_space.n), 8, 1
    else:
        action_dim = int(math.prod(action_space.shape or (1,)))
        action_outputs, action_bytes = 2 * action_dim, FLOAT * action_dim
    algo = params.algo
    hidden = list(params.policy.hidden_sizes)
    trained, targets = NETWORKS.get(algo.name, (4, 3))
    per_net = encoder_parameters + mlp_parameters(features + action_dim, hidden, max(action_outputs, 1) + 1)
    memory = params.policy.memory
    if memory is not None:  # the recurrent core: gates x (input + recurrent weights and two biases)
        gates = 4 if memory.type == "lstm" else 3
        per_net += gates * (features * memory.size + memory.size * memory.size + 2 * memory.size)
    # weights, gradients, Adam's two moments for trained networks; weights for targets; one more for checkpoints
    parts = {
        "policy.hidden_sizes": (
            per_net * FLOAT * (4 * trained + targets + trained),
            f"{trained + targets} networks of {per_net:,} parameters",
        )
    }
    batch = int(getattr(algo, "batch_size", 256))
    num_envs = int(params.env.rows(params.env.num_envs))  # a multi-agent env: a row per agent of each copy
    if hasattr(algo, "n_steps"):  # on-policy: the rollout, and a minibatch no larger than it
        rollout = int(algo.n_steps) * num_envs
        per_step = obs_bytes + action_bytes + 7 * FLOAT + 3
        parts["algo.n_steps"] = (2 * rollout * per_step, f"a rollout of {rollout:,} transitions (n_steps x num_envs)")
        batch = min(batch, rollout)
    transition = 2 * obs_bytes + action_bytes + 2 * FLOAT
    if hasattr(algo, "buffer_size"):  # off-policy: the replay ring, observations stored once (rlcore.data.replay)
        size = int(algo.buffer_size)
        rows = size + size // EPISODE_RESERVE + 2 * num_envs * (int(getattr(algo, "n_step", 1)) + 1)
        replay_bytes = rows * obs_bytes + size * (action_bytes + 2 * FLOAT + 16)
        parts["algo.buffer_size"] = (replay_bytes, f"a replay buffer of {size:,} transitions")
    offline = not hasattr(algo, "n_steps") and not hasattr(algo, "buffer_size")
    if offline and not params.dataset.in_memory:  # a streamed dataset: the shuffle buffer and the held-out part
        size = int(params.dataset.buffer_transitions) + int(params.dataset.validation_limit)
        parts["dataset.buffer_transitions"] = (size * transition, f"a shuffle buffer of {size:,} transitions")
    # a minibatch: its transitions, and each layer's activations and their gradients in every trained network
    layers = f"{len(hidden)} hidden layer{'s' if len(hidden) != 1 else ''} (widest {max(hidden):,})"
    if encoder_parameters:
        layers = f"a {encoder_name} encoder and {layers}"
    # an image encoder: the frames cast to float32, scaled, and convolution outputs of about their size
    encoded = 3 * obs_size if encoder_parameters else 0
    parts["algo.batch_size, policy.hidden_sizes"] = (
        batch * (3 * transition + 2 * FLOAT * trained * (encoded + sum(hidden) + action_outputs + 1)),
        f"minibatches of {batch:,} transitions through {layers}",
    )
    signals = getattr(algo, "reward_signals", None)
    for name in ("rnd", "curiosity", "gail"):
        signal = getattr(signals, name, None) if signals is not None else None
        if signal is None:
            continue
        # Three networks a signal at most (RND's target, predictor and value net; curiosity's encoder, forward and
        # inverse models and value net share its widths; GAIL's discriminator and value net), each trained with
        # Adam (weights, gradients, two moments) and saved; a minibatch's activations and gradients through them.
        widths = list(signal.hidden_sizes)
        outputs = max(int(getattr(signal, "output_size", 0)), int(getattr(signal, "encoding_size", 0)), 1)
        net = encoder_parameters + mlp_parameters(features + action_dim, widths, outputs)
        batch_rows = int(signal.batch_size)
        parts[f"algo.reward_signals.{name}.hidden_sizes"] = (
            3 * net * FLOAT * 5 + batch_rows * 3 * 2 * FLOAT * (encoded + sum(widths) + outputs),
            f"the {name} signal's networks of {net:,} parameters each",
        )
    processes = worker_processes(params)
    if processes is not None:
        key, count, kind = processes
        # Each: the baseline, its policy copy (weights, and the flat float64 vector they arrive in), its envs'
        # observations a few times over (the vector env, frame stacks, the step's copies) and what it sends or
        # holds: an actor's trajectory (stacked and pickled), an ES worker's noise table (float32).
        envs = int(getattr(algo, "pairs_per_task", 0)) * 2 or num_envs
        baseline = DASK_PROCESS_BYTES if kind.startswith("Dask") else PROCESS_BYTES
        each = baseline + per_net * (FLOAT + 8) + 4 * envs * obs_bytes
        if hasattr(algo, "trajectory_length"):
            each += 2 * (int(algo.trajectory_length) + 1) * num_envs * (obs_bytes + action_bytes + 6 * FLOAT)
        each += FLOAT * int(getattr(algo, "noise_table_size", 0))
        parts[key] = (count * each, f"{count:,} {kind} of about {_bytes(each)} each (Python, torch, envs, policy)")
    return parts


def worker_processes(params: Any) -> tuple[str, int, str] | None:
    """(the key that counts them, how many, what they are) of the processes a run starts on this machine: the
    actors of an actor-learner run or the rollout workers of a population run (``runner: local``, or ``dask``
    without ``deploy.dask_address``: a LocalCluster of that many worker processes); None when it starts none."""
    algo = params.algo
    runner = getattr(algo, "runner", None)
    if runner not in ("local", "dask") or (runner == "dask" and params.deploy.dask_address):
        return None
    if hasattr(algo, "num_actors"):
        key, count, kind = "algo.num_actors", int(algo.num_actors), "actor processes"
    elif hasattr(algo, "num_workers"):
        key, count, kind = "algo.num_workers", int(algo.num_workers), "rollout worker processes"
    else:
        return None
    return key, count, "Dask worker processes" if runner == "dask" else kind


def check_resources(
    params: Any,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    seeds_in_memory: int = 1,
    seed_processes: int = 0,
) -> None:
    """Refuse, in one line naming the key and the estimate, a run whose buffers and networks cannot fit in the
    memory available (:func:`available_memory`); does nothing where that is unknown. ``seeds_in_memory``: runs
    held at once (``train.seeds`` batched: each seed's networks, buffers and envs), the estimate times that;
    ``seed_processes``: the child processes they are split over (``train.seed_processes``), each adding
    :data:`PROCESS_BYTES` (0: they train in this process)."""
    available = available_memory()
    if available is None:
        return
    parts = estimate(params, observation_space, action_space)
    each_seed = sum(size for size, _ in parts.values())
    total = each_seed * seeds_in_memory + PROCESS_BYTES * seed_processes
    if total <= available:
        return
    key, (size, what) = max(parts.items(), key=lambda item: item[1][0])
    if seeds_in_memory > 1:
        split = seed_processes > 1
        where = f" in {seed_processes} processes" if split else ""
        per_process = f"; each process about {_bytes(PROCESS_BYTES)} more" if split else ""
        one_process = "set train.seed_processes: 1 to train them in one process, " if split else ""
        raise ConfigError(
            f"train.seeds: {seeds_in_memory} seeds trained together{where} need about {_bytes(total)} of memory "
            f"(each seed about {_bytes(each_seed)}, most for {what}{per_process}), more than the "
            f"{_bytes(available)} available; train fewer seeds, {one_process}"
            "or set train.batch_seeds: false to train them one after another"
        )
    raise ConfigError(
        f"{key}: about {_bytes(size)} of memory for {what} (the whole run: about {_bytes(total)}), more than the "
        f"{_bytes(available)} available"
    )


def _bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if value < 1000 or unit == "PB":
            return f"{value:.3g} {unit}"
        value /= 1000
    return f"{value:.3g} PB"
