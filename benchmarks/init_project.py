"""Benchmark: ``rlcore init`` in an empty folder, and a no-op ``dvc repro`` in the project it made (targets: under
2 s each). Prints one JSON line.

The project is initialized, given a tiny budget (CartPole, 1,024 env steps), committed and reproduced once (not
timed); then ``dvc repro`` runs again with every stage up to date: what a user waits for when nothing changed.
Wall seconds of the real commands, as processes (their imports included); the machine's load average beside them.

    python benchmarks/init_project.py
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit  # noqa: E402

from rlcore.config.reading import read_yaml_mapping  # noqa: E402

BIN = Path(sys.executable).parent
TINY = {"max_steps": 1024, "eval_every": 512, "eval_episodes": 2, "target_return": None}


CPU_SECONDS: dict[str, float] = {}
"""User + system CPU seconds of each timed command and its children: what a quiet machine's wall time approaches."""


def timed(command: list[str], cwd: Path, label: str = "") -> float:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True, env=env)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if label:
        used = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        CPU_SECONDS[label] = round(used, 2)
    return seconds


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        init_seconds = timed([str(BIN / "rlcore"), "init", str(project)], Path(tmp), "init")
        params = read_yaml_mapping(project / "params.yaml")
        params["train"].update(TINY)
        params["eval"].update(episodes=2, test_episodes=3)
        params["export"]["parity_observations"] = 20
        (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        timed(["git", "add", "-A"], project)
        timed(["git", "-c", "user.name=bench", "-c", "user.email=bench@rlcore.invalid", "commit", "-qm", "p"], project)
        first_seconds = timed([str(BIN / "dvc"), "repro"], project)
        noop_seconds = timed([str(BIN / "dvc"), "repro"], project, "noop_repro")
    emit(
        {
            "benchmark": "init_project",
            "init_seconds": round(init_seconds, 2),
            "first_repro_seconds": round(first_seconds, 1),
            "noop_repro_seconds": round(noop_seconds, 2),
            "cpu_seconds": CPU_SECONDS,
            "targets": {"init_seconds": 2.0, "noop_repro_seconds": 2.0},
            "load_average_1min": round(os.getloadavg()[0], 1),
        }
    )


if __name__ == "__main__":
    main()
