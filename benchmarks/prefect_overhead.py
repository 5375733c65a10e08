"""What Prefect costs and what Dask buys, on this machine; prints one JSON line.

1. Evaluating 8 checkpoints of a PPO CartPole run: ``evaluate_stage`` in this process (sequential, no
   Prefect) versus the ``evaluate_checkpoints`` flow on a DaskTaskRunner LocalCluster of 2 worker processes
   (cluster start included), against a local Prefect server; at 10 and at 100 evaluation episodes.
2. Collecting 200k CartPole transitions with the trained policy in 4 shards: ``collect_stage`` in this
   process (the shards in turn) versus the collect flow with its shards on 2 Dask workers (same file).
3. The fixed overhead of ``rlcore pipeline`` (one flow run) over a process that calls the four stages
   directly, both as fresh processes on the same tiny run: against a running local server, and in
   Prefect's embedded mode (no PREFECT_API_URL: a temporary server per run, on an already migrated DB).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from common import stdout_to_stderr  # noqa: E402
from prefect_server import pointed_at, prefect_server  # noqa: E402

BIN = Path(sys.executable).parent
TINY = ["train.max_steps=2048", "train.eval_every=1024", "train.target_return=null", "eval.episodes=5",
        "export.parity_observations=200"]  # fmt: skip
DIRECT = (
    "import sys; from pathlib import Path; from rlcore.params import load_params; "
    "from rlcore.stages import train_stage, evaluate_stage, select_stage, export_stage; "
    "p = load_params('params.yaml', sys.argv[1:]); r = Path.cwd(); "
    "[stage(p, r) for stage in (train_stage, evaluate_stage, select_stage, export_stage)]"
)


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{cmd} exited {result.returncode}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    return round(time.perf_counter() - start, 2)


def sets(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def main() -> None:
    os.environ.update(DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false", DASK_LOGGING__DISTRIBUTED="warning")
    from flows.collect import collect_flow
    from flows.evaluate import evaluate_checkpoints
    from flows.task_runners import dask_task_runner
    from rlcore.common.files import read_json, sha256_file
    from rlcore.config.sections import DeployConfig
    from rlcore.params import load_params
    from rlcore.stages import collect_stage, evaluate_stage, train_stage

    result: dict[str, object] = {"benchmark": "prefect_overhead", "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        for name in ("params.yaml", "prefect.toml"):
            shutil.copy(ROOT / name, project / name)
        params_path = str(project / "params.yaml")
        with prefect_server(Path(tmp) / "server-home") as (url, env), pointed_at(env), stdout_to_stderr():
            train = ["name=bench8", "train.max_steps=8192", "train.eval_every=1024", "train.target_return=null"]
            train_stage(load_params(params_path, train), project)
            for episodes in (10, 100):
                overrides = [*train, f"eval.episodes={episodes}"]
                start = time.perf_counter()
                sequential = read_json(evaluate_stage(load_params(params_path, overrides), project))
                seq_s = time.perf_counter() - start
                assert len(sequential["candidates"]) == 8
                runner = dask_task_runner(DeployConfig(task_runner="dask", dask_workers=2))
                start = time.perf_counter()
                state = evaluate_checkpoints.with_options(task_runner=runner)(
                    params_path=params_path, overrides=overrides, root=str(project), return_state=True
                )
                dask_s = time.perf_counter() - start
                evaluations = read_json(project / "reports" / "bench8" / "evaluations.json")
                assert state.is_completed() and evaluations == sequential
                result[f"eval8_ep{episodes}_sequential_s"] = round(seq_s, 2)
                result[f"eval8_ep{episodes}_dask2_s"] = round(dask_s, 2)

            checkpoint = sorted((project / "runs" / "bench8" / "checkpoints").glob("*.pt"))[-1]
            collect = [f"collect.policy={checkpoint}", "collect.steps=200000", "collect.shards=4"]
            start = time.perf_counter()
            collected = collect_stage(load_params(params_path, collect), project)
            result["collect200k_4shards_sequential_s"] = round(time.perf_counter() - start, 2)
            digest = sha256_file(collected)
            start = time.perf_counter()
            state = collect_flow(
                params_path=params_path, overrides=[*collect, "deploy.task_runner=dask"], root=str(project),
                return_state=True,
            )  # fmt: skip
            result["collect200k_4shards_dask2_s"] = round(time.perf_counter() - start, 2)
            assert state.is_completed() and sha256_file(collected) == digest

            direct_s = timed([str(BIN / "python"), "-c", DIRECT, *TINY, "name=direct"], project, {})
            server_s = timed([str(BIN / "rlcore"), "pipeline", *sets([*TINY, "name=server"])], project, env)
        result["pipeline_direct_s"] = direct_s
        result["pipeline_flow_server_s"] = server_s
        result["overhead_server_s"] = round(server_s - direct_s, 2)

        embedded = {"PREFECT_HOME": str(Path(tmp) / "embedded-home"), "PREFECT_API_URL": ""}
        timed([str(BIN / "prefect"), "server", "database", "upgrade", "-y"], project, embedded)  # migrate once
        embedded_s = timed([str(BIN / "rlcore"), "pipeline", *sets([*TINY, "name=embedded"])], project, embedded)
        result["pipeline_flow_embedded_s"] = embedded_s
        result["overhead_embedded_s"] = round(embedded_s - direct_s, 2)
    result["target_overhead_server_s"] = 5
    print(json.dumps(result))


if __name__ == "__main__":
    main()
