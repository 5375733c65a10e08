"""Benchmark: writing and reading 1M CartPole transitions as a Parquet dataset (rlcore.data.writer, rlcore.data.reader).

Prints one JSON line: medians over ``--repeats`` repetitions of

- write: synthetic CartPole-shaped episodes (observations float32 (T, 4) on a random walk, int64 actions,
  rewards 1.0, log-probabilities, lengths uniform in 10..500; the last row terminated, or truncated at
  length 500 and now and then earlier, as at the end of a collection) streamed through ``DatasetWriter``
  (default row group size) into a temporary directory; the clock runs from the writer's construction to
  ``close()`` (file renamed into place), the synthesis happens before it;
- read (rlcore): ``load_dataset(path, CartPole spaces, "CartPole-v1")`` then ``OfflineData.tensors()``:
  read, validation, episode ordering, torch tensors (the pyarrow modules a first read imports lazily,
  ``pyarrow.dataset`` and ``pyarrow.compute``, are imported before the clock in both reads);
- read (raw pyarrow): ``pq.read_table`` of the columns ``OfflineData`` keeps, converted to NumPy arrays
  (no validation, no sorting): a floor for comparison.

Read rates are for the first read in a fresh process (what a training run pays: its memory is new to the
process) and, as ``*_warm_*``, for a second read in the same process after dropping the first's arrays.
``per_repeat`` also gives each timed block's CPU seconds (user + system, all threads): on a shared machine
a wall time far above it means waiting for a core.

Each phase runs in a fresh process (multiprocessing 'spawn'), so peak memory is that phase's alone: the
increase of the process's peak RSS (Linux ``VmHWM``, reset through ``/proc/self/clear_refs`` just before
the phase) over its RSS just before the phase, in MB (10^6 bytes). Arrow's allocations count, which
``tracemalloc`` would miss. Where the peak cannot be reset, ``ru_maxrss`` is used (the method is in the
output). Reads find the file in the page cache (it was just written).

    python benchmarks/datasets_io.py [--transitions 1000000] [--repeats 3] [--seed 0] [--profile]

``--profile`` also prints to stderr the top functions of a cProfile of ``load_dataset`` (one more process).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit  # noqa: E402  (also puts the project root on sys.path)

READ_TARGET = 5_000_000  # transitions/s, load_dataset + tensors()
MIN_LENGTH, MAX_LENGTH = 10, 500
RAW_COLUMNS = ("episode_id", "observation", "action", "reward", "next_observation", "terminated", "truncated")


# --- peak memory -------------------------------------------------------------------------------------------


def _status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class PeakRSS:
    """Peak RSS increase over a block, in MB: VmHWM after the block minus VmRSS before it."""

    def __enter__(self) -> PeakRSS:
        import gc

        gc.collect()
        self.method = "VmHWM"
        try:
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        except OSError:
            self.method = "ru_maxrss"
        self.before_kb = _status_kb("VmRSS")
        if self.before_kb is None:  # not Linux: ru_maxrss is bytes on macOS; baseline unknown
            self.method = "ru_maxrss"
            self.before_kb = 0
        return self

    def __exit__(self, *exc: object) -> None:
        if self.method == "VmHWM":
            peak_kb = _status_kb("VmHWM") or 0
        else:
            import resource

            peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            if sys.platform == "darwin":
                peak_kb //= 1024
        self.increase_mb = max(peak_kb - self.before_kb, 0) * 1024 / 1e6


# --- phases (each in a fresh process) -----------------------------------------------------------------------


def _spaces() -> tuple[Any, Any]:
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _episode_lengths(rng: Any, transitions: int) -> list[int]:
    lengths: list[int] = []
    total = 0
    while total < transitions:
        length = min(int(rng.integers(MIN_LENGTH, MAX_LENGTH + 1)), transitions - total)
        lengths.append(length)
        total += length
    return lengths


def _synthesize(transitions: int, seed: int) -> list[tuple[Any, ...]]:
    """CartPole-shaped episodes: each a tuple of DatasetWriter.add_episode arguments (views of shared arrays)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = _episode_lengths(rng, transitions)
    episodes = len(lengths)
    # T + 1 states per episode, a random walk from a small random start (CartPole's reset is U(-0.05, 0.05)).
    states_per = np.asarray(lengths) + 1
    starts = np.concatenate([[0], np.cumsum(states_per)[:-1]])
    steps = rng.normal(0.0, [0.02, 0.1, 0.005, 0.1], size=(int(states_per.sum()), 4))
    steps[starts] = rng.uniform(-0.05, 0.05, size=(episodes, 4))
    walk = np.cumsum(steps, axis=0)
    offsets = np.repeat(walk[starts] - steps[starts], states_per, axis=0)
    states = (walk - offsets).astype(np.float32)
    actions = rng.integers(0, 2, size=transitions, dtype=np.int64)
    rewards = np.ones(transitions, dtype=np.float32)
    log_probs = np.log(rng.uniform(0.5, 1.0, size=transitions)).astype(np.float32)
    cut_early = rng.random(episodes) < 0.05
    out = []
    row = 0
    for length, start, cut in zip(lengths, starts, cut_early, strict=True):
        terminated = np.zeros(length, dtype=bool)
        truncated = np.zeros(length, dtype=bool)
        if length >= MAX_LENGTH or cut:
            truncated[-1] = True
        else:
            terminated[-1] = True
        episode_states = states[start : start + length + 1]
        out.append(
            (
                episode_states[:-1],
                actions[row : row + length],
                rewards[row : row + length],
                episode_states[1:],
                terminated,
                truncated,
                log_probs[row : row + length],
            )
        )
        row += length
    return out


def write_phase(path: str, transitions: int, seed: int) -> dict[str, Any]:
    from rlcore.data.writer import DatasetWriter

    observation_space, action_space = _spaces()
    episodes = _synthesize(transitions, seed)
    metadata = {"env": {"id": "CartPole-v1", "kwargs": {}}, "policy": {"kind": "synthetic"}, "seed": seed}
    with PeakRSS() as memory:
        cpu, started = time.process_time(), time.perf_counter()
        writer = DatasetWriter(Path(path), observation_space, action_space, metadata)
        for episode in episodes:
            writer.add_episode(*episode)
        written = writer.close()
        seconds = time.perf_counter() - started
        cpu_end = time.process_time()
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_end - cpu,
        "transitions": written["transitions"],
        "episodes": written["episodes"],
        "file_mb": Path(path).stat().st_size / 1e6,
        "peak_rss_increase_mb": memory.increase_mb,
        "rss_method": memory.method,
    }


def _import_readers() -> None:
    """Modules pyarrow imports on its first read: a one-off cost of the process, kept off the clock."""
    import pyarrow.compute  # noqa: F401
    import pyarrow.dataset  # noqa: F401
    import pyarrow.parquet  # noqa: F401


def rlcore_read_phase(path: str) -> dict[str, Any]:
    import torch

    from rlcore.data.reader import load_dataset

    _import_readers()

    observation_space, action_space = _spaces()

    def read() -> tuple[int, dict[str, torch.Tensor]]:
        data = load_dataset(Path(path), observation_space, action_space, "CartPole-v1")
        return len(data), data.tensors()

    result = _timed_reads(read)
    assert result["tensors"]["obs"].shape == (result["transitions"], 4)
    assert result.pop("tensors")["actions"].dtype == torch.int64
    return result


def raw_read_phase(path: str) -> dict[str, Any]:
    import numpy as np
    import pyarrow.parquet as pq

    _import_readers()

    def read() -> tuple[int, dict[str, np.ndarray]]:
        table = pq.read_table(path, columns=list(RAW_COLUMNS))
        arrays = {}
        for name in RAW_COLUMNS:
            column = table.column(name).combine_chunks()
            if name in ("observation", "next_observation"):
                arrays[name] = column.flatten().to_numpy().reshape(len(column), -1)
            else:
                arrays[name] = column.to_numpy(zero_copy_only=False)
        return len(arrays["reward"]), arrays

    result = _timed_reads(read)
    assert result.pop("tensors")["observation"].dtype == np.float32
    return result


def _timed_reads(read: Any) -> dict[str, Any]:
    """The first read in the process (clock, CPU time and peak RSS), then a second one (clock) after
    dropping the first's arrays: the second reuses memory the allocators already hold."""
    import gc

    with PeakRSS() as memory:
        cpu, started = time.process_time(), time.perf_counter()
        transitions, arrays = read()
        seconds = time.perf_counter() - started
        cpu_end = time.process_time()
    del arrays
    gc.collect()
    started = time.perf_counter()
    _, arrays = read()
    warm_seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_end - cpu,
        "warm_seconds": warm_seconds,
        "transitions": transitions,
        "peak_rss_increase_mb": memory.increase_mb,
        "tensors": arrays,
    }


def profile_phase(path: str, top: int = 25) -> str:
    import cProfile
    import io
    import pstats

    from rlcore.data.reader import load_dataset

    _import_readers()
    observation_space, action_space = _spaces()
    profiler = cProfile.Profile()
    profiler.enable()
    load_dataset(Path(path), observation_space, action_space, "CartPole-v1").tensors()
    profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(top)
    return stream.getvalue()


def in_fresh_process(function: Any, *args: Any) -> Any:
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


# --- main ---------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of load_dataset to stderr")
    args = parser.parse_args()

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            path = str(Path(tmp) / f"dataset-{repeat}.parquet")
            write = in_fresh_process(write_phase, path, args.transitions, args.seed + repeat)
            read = in_fresh_process(rlcore_read_phase, path)
            raw = in_fresh_process(raw_read_phase, path)
            if repeat == 0 and args.profile:
                print(in_fresh_process(profile_phase, path), file=sys.stderr)
            Path(path).unlink()
            runs.append({"write": write, "read": read, "raw": raw})

    def med(phase: str, key: str, digits: int = 1) -> float:
        return round(statistics.median(run[phase][key] for run in runs), digits)

    def rate(phase: str, key: str = "seconds") -> float:
        return round(statistics.median(run[phase]["transitions"] / run[phase][key] for run in runs), 1)

    result: dict[str, Any] = {
        "benchmark": "datasets_io",
        "transitions": args.transitions,
        "repeats": args.repeats,
        "median_episodes": med("write", "episodes", 0),
        "median_file_mb": med("write", "file_mb"),
        "median_write_transitions_per_second": rate("write"),
        "median_read_transitions_per_second": rate("read"),
        "median_read_warm_transitions_per_second": rate("read", "warm_seconds"),
        "median_raw_pyarrow_read_transitions_per_second": rate("raw"),
        "median_raw_pyarrow_read_warm_transitions_per_second": rate("raw", "warm_seconds"),
        "median_write_peak_rss_increase_mb": med("write", "peak_rss_increase_mb"),
        "median_read_peak_rss_increase_mb": med("read", "peak_rss_increase_mb"),
        "median_raw_pyarrow_read_peak_rss_increase_mb": med("raw", "peak_rss_increase_mb"),
        "rss_method": runs[0]["write"]["rss_method"],
        "per_repeat": [
            {
                phase: {
                    key: round(value, 3)
                    for key, value in run[phase].items()
                    if key in ("seconds", "cpu_seconds", "warm_seconds", "peak_rss_increase_mb")
                }
                for phase in ("write", "read", "raw")
            }
            for run in runs
        ],
        "targets": {"median_read_transitions_per_second": READ_TARGET},
    }
    emit(result)


if __name__ == "__main__":
    main()
