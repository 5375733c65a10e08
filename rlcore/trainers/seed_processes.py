"""The seeds of ``train.seeds`` split over processes (``train.seed_processes``): contiguous groups of the seeds still to
train, each trained as one batched program (:func:`rlcore.trainers.train_seeds`) in a child process of its own that
dies with its parent, so that the seeds fill the machine's cores. This process starts the children, relays their log
lines (prefixed with their seeds), and waits; a child that fails stops the others and its error names its seeds.

A seed's run is the same whichever process trains it: the same params (sent as plain data, validated again in the
child), the same ``seed_<k>/`` folder, its own random streams and checkpoints, so a re-run resumes every seed from its
own checkpoint whatever the split was.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import pickle
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, NoReturn

from rlcore.common.errors import ConfigError, RLCoreError, UserCodeError, worker_failure
from rlcore.envs.vector import make_vector_env
from rlcore.params import params_model
from rlcore.trainers import family_of, train_seeds
from rlcore.trainers.memory_estimate import check_resources
from rlcore.trainers.seed_sessions import SeedRun, named_seeds
from rlcore.trainers.stopping import EvaluationCallback
from rlcore.workers.parent_death import start_child

log = logging.getLogger("rlcore")

PROCESS_NAME = "rlcore-seeds"
"""Children are named ``rlcore-seeds-<group>`` (tests and operators find them by it)."""

SEEDS_PER_AUTO_PROCESS = 2
"""``train.seed_processes: auto`` starts a process per core but no more than one per this many seeds to train (unless
each seed's run is long: :data:`LONG_RUN_STEPS`)."""

LONG_RUN_STEPS = 100_000
"""A seed's budget (``train.max_steps``, with no ``train.target_return`` to stop it sooner: ppo-cartpole's 200,000
stop near 50,000, ~10 s) from which ``auto`` gives seeds processes of their own: a process's start
(~10 s of CPU) is then small against its run, and two seeds batched in one process cost 1.8-2.0x one seed's wall on
the real workloads (``ppo-minatar-breakout``, ``ppo-simple-spread``, ``sac-halfcheetah``; benchmarks/README.md), so
a seed alone on a core finishes sooner. Up to one process per core, or per seed when there is one seed more than
cores (3 seeds on 2 cores: three processes sharing the cores finish at 1.5x one seed's wall, two processes of 2 and 1
seeds at ~1.9x)."""

EXIT_WAIT_SECONDS = 5.0
"""How long a child may take to exit once it is done, or after an interruption (Ctrl-C reaches it too), before it is
killed."""


class SeedProcessError(RLCoreError):
    """A process training a group of seeds failed or died."""


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return max(os.cpu_count() or 1, 1)


def seed_groups(runs: Sequence[SeedRun], on_evaluation: EvaluationCallback | None) -> list[list[SeedRun]]:
    """The seeds' runs in the groups that train in processes of their own (``train.seed_processes``), each in the
    list's order; one group (this process) for a family whose seeds share worker processes, with an
    ``on_evaluation`` callback (it reads every evaluation here: a sweep's pruner), or with one seed still to train.
    ``auto``: the usable cores, at most one process per :data:`SEEDS_PER_AUTO_PROCESS` seeds still to train; for
    long runs (:data:`LONG_RUN_STEPS`, no ``target_return``), up to one per seed, and one per seed when the seeds
    still to train are one more than the cores.

    The seeds still to train (no ``train_summary.json`` in their folder) are split into contiguous groups of sizes
    differing by one at most; seeds that look finished join the groups in turn (a child keeps a finished seed, or
    trains it again when its train params changed)."""
    params = runs[0].params
    setting = params.train.seed_processes
    if on_evaluation is not None or not family_of(params).lockstep:
        return [list(runs)]
    pending = [run for run in runs if not (run.run_dir / "train_summary.json").is_file()]
    # auto: a process per core, each batching two seeds at least (a process's start, seconds of imports, and its
    # memory are paid back by the seeds it batches; two seeds stay one program, as the contract tests train them),
    # or one seed at least when each seed's run is long against that start (LONG_RUN_STEPS)
    long_runs = params.train.max_steps >= LONG_RUN_STEPS and params.train.target_return is None
    if setting == "auto" and long_runs:
        cores = usable_cores()
        wanted = len(pending) if len(pending) == cores + 1 else min(cores, len(pending))
    elif setting == "auto":
        wanted = min(usable_cores(), len(pending) // SEEDS_PER_AUTO_PROCESS)
    else:
        wanted = int(setting)
    count = max(1, min(wanted, len(pending)))
    if count == 1:
        return [list(runs)]
    size, extra = divmod(len(pending), count)
    groups: list[list[SeedRun]] = []
    start = 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        groups.append(pending[start:end])
        start = end
    pending_seeds = {run.seed for run in pending}
    finished = [run for run in runs if run.seed not in pending_seeds]
    for index, run in enumerate(finished):
        groups[index % count].append(run)
    order = {run.seed: position for position, run in enumerate(runs)}
    return [sorted(group, key=lambda run: order[run.seed]) for group in groups]


def check_memory(groups: Sequence[Sequence[SeedRun]]) -> None:
    """Refuse, before anything is written, seeds whose networks, buffers and envs, and the processes they train in,
    need more memory than is available (``rlcore.trainers.memory_estimate``; each child checks its own group again
    when its seeds' sessions open). The env is built once for its spaces."""
    params = groups[0][0].params
    env = make_vector_env(params.env, 1)
    try:
        observation_space, action_space = env.single_observation_space, env.single_action_space
    finally:
        env.close()
    seeds = sum(len(group) for group in groups)
    check_resources(params, observation_space, action_space, seeds_in_memory=seeds, seed_processes=len(groups))


@dataclass
class _Child:
    """A child process training one group of seeds, and this process's end of its pipe."""

    seeds: list[int]
    process: BaseProcess
    conn: Connection
    done: bool = False

    @property
    def words(self) -> str:
        return named_seeds(self.seeds)


def train_seed_groups(groups: Sequence[Sequence[SeedRun]]) -> None:
    """Train each group of seeds as one batched program in a child process of its own (:func:`seed_groups`), and
    wait for every child. A child that fails or dies stops the others; its error (rlcore's own error naming a key or
    the user's code as it is, any other naming the child's seeds) is raised here. Seeds finished by then keep their
    folders; a re-run resumes the others from their own checkpoints."""
    check_memory(groups)
    log.info(
        "train.seeds: %d seeds in %d processes (%s)",
        sum(len(group) for group in groups),
        len(groups),
        "; ".join(f"{named_seeds([run.seed for run in group])}{' batched' * (len(group) > 1)}" for group in groups),
    )
    context = mp.get_context("spawn")
    level = log.getEffectiveLevel()
    children: list[_Child] = []
    interrupted = False
    try:
        for index, group in enumerate(groups):
            conn, theirs = context.Pipe(duplex=False)
            plain = [(run.seed, run.params.to_dict(), str(run.run_dir)) for run in group]
            process = start_child(context, group_main, (plain, level, theirs), f"{PROCESS_NAME}-{index}")
            theirs.close()  # the child holds the only other end: its death closes the pipe
            children.append(_Child([run.seed for run in group], process, conn))
        _wait_for(children)
    except KeyboardInterrupt as error:
        interrupted = True
        error.add_note("every seed's checkpoints are kept; re-run the same command to resume each seed from its own")
        raise
    finally:
        _stop(children, grace_seconds=EXIT_WAIT_SECONDS if interrupted else 0.0)


def _wait_for(children: list[_Child]) -> None:
    """Relay the children's log lines until every child is done; raise the first failure."""
    while not all(child.done for child in children):
        live = {child.conn: child for child in children if not child.done}
        for ready in wait(list(live)):
            assert isinstance(ready, Connection)
            child = live[ready]
            try:
                kind, *content = ready.recv()
            except (EOFError, OSError, pickle.UnpicklingError):
                child.process.join(timeout=EXIT_WAIT_SECONDS)  # a closed pipe: the process is exiting
                code = child.process.exitcode
                raise SeedProcessError(
                    f"train.seeds: the process training {child.words} (pid {child.process.pid}) "
                    + (f"died (exit code {code})" if code is not None else "broke its pipe")
                    + "; the other processes were stopped: re-run the same command to resume every seed from its "
                    "own checkpoint"
                ) from None
            if kind == "log":
                level, message = content
                named = any(message.startswith(f"seed {seed}:") for seed in child.seeds)  # its seed's line
                log.log(level, "%s", message if named else f"{child.words}: {message}")
            elif kind == "failed":
                _raise_failure(child, content[0])
            else:  # "done"
                child.done = True


def _raise_failure(child: _Child, failure: RLCoreError) -> None:
    """Raise what ``child`` sent back: an error naming a key or the user's code as it is (any seed would meet it),
    any other naming the child's seeds."""
    if isinstance(failure, UserCodeError | ConfigError):
        raise failure
    raised = SeedProcessError(
        f"train.seeds: the process training {child.words} failed: {failure}; the other processes were stopped: "
        "re-run the same command to resume every seed from its own checkpoint"
    )
    raised.details = failure.details
    raise raised


def _stop(children: list[_Child], grace_seconds: float) -> None:
    """Every child ended: those done (or interrupted, ``grace_seconds``) may exit on their own, the rest killed."""
    for child in children:
        child.process.join(timeout=EXIT_WAIT_SECONDS if child.done else grace_seconds)
        if child.process.is_alive():
            child.process.kill()
            child.process.join(timeout=EXIT_WAIT_SECONDS)
        child.conn.close()


class _PipeHandler(logging.Handler):
    """A child's log records, sent to its parent as ``("log", level, message)``."""

    def __init__(self, conn: Connection) -> None:
        super().__init__()
        self.conn = conn

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(OSError, ValueError):  # the parent is gone: this process ends with it
            self.conn.send(("log", record.levelno, record.getMessage()))


def group_main(plain: list[tuple[int, dict[str, Any], str]], level: int, conn: Connection) -> None:
    """A child's work: the group's seeds (``(seed, params tree, run directory)``, from ``Params.to_dict``) as one
    batched program, its log lines sent to the parent, then ``("done",)`` or ``("failed", error)``. The seeds show
    no progress bar (a log line per evaluation instead: the parent's terminal is shared). Ends the process."""
    logger = logging.getLogger("rlcore")
    logger.handlers = [_PipeHandler(conn)]
    logger.setLevel(level)
    logger.propagate = False
    try:
        runs = []
        for seed, tree, run_dir in plain:
            tree["train"]["progress_bar"] = "off"
            params = params_model(tree["algo"]["name"]).model_validate(tree)
            runs.append(SeedRun(seed, params, Path(run_dir)))
        train_seeds(runs, None)
    except BaseException as error:  # noqa: BLE001  (everything goes back to the parent, which raises it)
        _exit_with(conn, ("failed", worker_failure(error)))
    _exit_with(conn, ("done",))


def _exit_with(conn: Connection, message: tuple[Any, ...]) -> NoReturn:
    """Send ``message`` and end this process now. Every session is closed by then (checkpoints, metrics and
    summaries written); an interpreter's own exit spends seconds collecting the garbage of torch and the envs
    (measured: ~5 s after a CartPole run), which the parent would wait for."""
    conn.send(message)
    conn.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
