"""Worker counts bounded by memory (issue 26): a run whose actor or rollout worker processes cannot fit is refused in
one line naming the key, before anything is written or any process starts."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import gymnasium as gym
import psutil
import pytest
from conftest import PROJECT, RLCORE, one_line_error, preset_text, sets

from rlcore.params import load_params
from rlcore.trainers.memory_estimate import DASK_PROCESS_BYTES, PROCESS_BYTES, available_memory, estimate

from .run_support import env, snapshot

CASES = {
    # The commands: 256 processes of ~170 MB or more each, ~45 GB.
    "impala-256-actors": ("configs/impala-cartpole.yaml", "algo.num_actors=256", "algo.num_actors", "256 actor"),
    "es-256-workers": ("configs/es-cartpole.yaml", "algo.num_workers=256", "algo.num_workers", "256 rollout worker"),
}


def _space_estimate(preset: Path, overrides: list[str]) -> int:
    params = load_params(preset, overrides)
    probe = gym.make(params.env.id)
    return sum(size for size, _ in estimate(params, probe.observation_space, probe.action_space).values())


@pytest.mark.parametrize("case", list(CASES))
def test_too_many_worker_processes_are_refused_before_any_starts(case: str, tmp_path: Path) -> None:
    preset, override, key, what = CASES[case]
    (tmp_path / "params.yaml").write_text(preset_text(preset))
    available = available_memory()
    if available is None or _space_estimate(tmp_path / "params.yaml", [override]) <= available:
        pytest.skip(f"this machine has {available} bytes available: 256 worker processes would fit")
    before = snapshot(tmp_path)
    proc = subprocess.Popen(
        [RLCORE, "train", *sets([override, "train.progress_bar=off"])],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    children: set[int] = set()
    while proc.poll() is None:  # every process it starts (it must start none)
        try:
            children.update(child.pid for child in psutil.Process(proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.005)
    stdout, stderr = proc.communicate(timeout=60)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    line = one_line_error(result, f"error: {key}: ", what, "available")
    assert children == set(), f"{line}\nstarted {len(children)} processes"
    assert snapshot(tmp_path) == before, line


def test_worker_processes_count_in_the_estimate_only_where_they_run() -> None:
    impala = PROJECT / "configs" / "impala-cartpole.yaml"
    env_ = gym.make("CartPole-v1")

    def parts(overrides: list[str]) -> dict[str, tuple[int, str]]:
        return estimate(load_params(impala, overrides), env_.observation_space, env_.action_space)

    two, many = parts(["algo.num_actors=2"]), parts(["algo.num_actors=200"])
    assert PROCESS_BYTES <= two["algo.num_actors"][0] / 2 < 1.2 * PROCESS_BYTES  # CartPole: the baseline dominates
    assert many["algo.num_actors"][0] == 100 * two["algo.num_actors"][0]
    assert "200 actor processes" in many["algo.num_actors"][1]
    assert "algo.num_actors" not in parts(["algo.runner=dev"])  # in the learner's process
    dask = parts(["algo.runner=dask"])["algo.num_actors"]  # a LocalCluster of them, distributed imported too
    assert "Dask worker processes" in dask[1] and dask[0] >= 2 * DASK_PROCESS_BYTES > two["algo.num_actors"][0]
    remote = parts(["algo.runner=dask", "deploy.dask_address=tcp://10.0.0.1:8786"])  # someone else's machines
    assert "algo.num_actors" not in remote
    es = load_params(PROJECT / "configs" / "es-cartpole.yaml", ["algo.noise_table_size=16777216"])
    worker = estimate(es, env_.observation_space, env_.action_space)["algo.num_workers"][0] / es.algo.num_workers
    assert worker >= PROCESS_BYTES + 4 * 2**24  # each worker builds its own float32 noise table


@pytest.mark.parametrize(
    ("preset", "override", "key"),
    [
        ("params.yaml", "algo.reward_signals={rnd: {hidden_sizes: [1000000000]}}", "algo.reward_signals.rnd"),
        (
            "configs/ppo-curiosity-mountaincar.yaml",
            "algo.reward_signals.curiosity.hidden_sizes=[100000, 100000]",
            "algo.reward_signals.curiosity",
        ),
    ],
)
def test_reward_signal_networks_too_large_for_memory_are_refused_not_allocated(
    preset: str, override: str, key: str, tmp_path: Path
) -> None:
    """A signal's widths count in the estimate: [1e9] was a 16 GB allocation (a traceback, or the OOM killer
    taking the process), found by the fuzzer of the newer sections."""
    (tmp_path / "params.yaml").write_text(preset_text(preset))
    before = snapshot(tmp_path)
    result = subprocess.run(
        [RLCORE, "train", *sets([override])], cwd=tmp_path, capture_output=True, text=True, env=env(), timeout=120
    )
    one_line_error(result, f"error: {key}.hidden_sizes: ", "memory", "available")
    assert snapshot(tmp_path) == before
