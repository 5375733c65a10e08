"""A golden record of every preset's tiny pipeline (weights' digests, evaluations, exit codes), and its comparison.

It proves a refactor kept behaviour: run it before and after, then ``--compare`` the two records. Each preset (the
list and tiny budgets of ``tests/test_presets_pipeline.py``) runs train -> evaluate -> select -> export with its own
seed, in a fresh temporary project, through the ``rlcore`` command only (``python -m rlcore <stage> --params FILE
--set KEY=VALUE ...`` subprocesses, the rlcore of the tree this script sits in) and the files the stages write. The
script never imports rlcore itself: it reads checkpoints with ``torch.load(weights_only=True)`` and JSON reports, so
it runs unchanged against the old and the new module layout. ``tiny_budget``, ``PRESETS`` and ``STAGE_SECONDS`` are
imported from the test module (tests/ put on sys.path), so the record follows the test's budgets; importing that
module imports rlcore as the test does, but nothing of rlcore is called from here.

As the test does, ``offline.yaml`` runs in params.yaml's project after ``rlcore collect`` rolled out params.yaml's
selected model, and ``configs/ppo-from-bc-cartpole.yaml`` (``train.init_from``) runs in a copy of that project.

What a record leaves out because it varies from run to run of the same code: wall times and throughput
(``*seconds*``, ``*per_second*``), timestamps, the command line, git and library versions, absolute paths, and the
sha256 of files that embed those (checkpoints' ``meta`` holds the wall time; exported ONNX/pt2 files embed source
paths). What it keeps: a sha256 of every tensor of the last checkpoint and of the selected model, one per top-level
entry and one overall; the train summary, the last logged training metrics and their per-step log; the evaluations,
selection, metrics and the model card (its evaluations and parity diffs); the collected dataset's columns.

    python benchmarks/golden.py --out golden-before.json            # every preset, a few minutes
    python benchmarks/golden.py --only params.yaml configs/dqn-cartpole.yaml --out /tmp/some.json
    python benchmarks/golden.py --compare golden-before.json golden-after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from test_presets_pipeline import PRESETS, STAGE_SECONDS, tiny_budget  # noqa: E402

from rlcore.config.reading import read_yaml_mapping  # noqa: E402

STAGES = ("train", "evaluate", "select", "export")
COLLECT_OVERRIDES = ["collect.steps=2000"]
"""What the test's made project collects for offline.yaml (its own budget, not the training one)."""

GOLDEN_OVERRIDES: dict[str, list[str]] = {
    # Its 2 actor processes (runner local) send trajectories in whatever order they finish, so which policy version
    # each trajectory came from varies from run to run; the in-process runner steps the same actors in a fixed order.
    "configs/impala-cartpole.yaml": ["algo.runner=dev"],
}
"""Extra overrides per preset that make its run reproducible (checked: two runs of the same code agree), the
algorithm and its learner unchanged."""

NONDETERMINISTIC: dict[str, str] = {}
"""Presets whose two runs of the same code differ, and why: ``--compare`` reports them as not comparable. None on
2026-11-26 (two full runs identical): IMPALA runs with the in-process runner (``GOLDEN_OVERRIDES``), and ES's 2
worker processes return their rollouts by index, so their order does not matter."""

VOLATILE_KEYS = {
    "created",
    "command",
    "git",
    "versions",
    "files",
    "timestamp",
    "hostname",
    "host",
    "sha256",
    "md5",
    "fingerprint",
}
"""Keys dropped wherever they occur: when a file was made, by which command line, on which machine, with which
versions, and file digests (checkpoints embed wall times, exports source paths; a collected Parquet file's bytes
differ between two collections of the same rows, its columns are hashed here instead). ``content_sha256`` of a
checkpoint covers its meta (a wall time): its tensors are hashed here instead. ``fingerprint`` (a run's, in its
checkpoints' meta) hashes the params, recorded here in full, with an offline run's dataset file digest, which varies:
the dataset records the sha256 of the policy file it was collected from, and that file holds a wall time."""

SKIP_FRAGMENTS = ("needs `pip install", "needs shimmy")
"""An env id whose optional extra is not installed: rlcore's one-line refusal says what to install."""


def volatile(key: str) -> bool:
    lowered = key.lower()
    if lowered in VOLATILE_KEYS or lowered.endswith("_sha256"):
        return True
    # Wall times, throughput, and IMPALA's learner_busy_fraction (a share of wall time).
    return any(part in lowered for part in ("seconds", "per_second", "busy_fraction"))


def clean(value: Any, project: Path) -> Any:
    """``value`` without what varies between runs; paths inside ``project`` made relative (``<project>/...``)."""
    if isinstance(value, dict):
        return {str(k): clean(v, project) for k, v in value.items() if not volatile(str(k))}
    if isinstance(value, list | tuple):
        return [clean(v, project) for v in value]
    if isinstance(value, str):
        for root in {str(project), str(project.resolve())}:
            value = value.replace(root, "<project>")
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # JSON has no NaN: keep it comparable as text
    return value


def tensor_digest(tensor: Any) -> str:
    import torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    digest = hashlib.sha256(f"{flat.dtype}{tuple(tensor.shape)}".encode())
    if flat.numel():
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of nested dicts, lists and tuples by dotted path."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key in sorted(value, key=str):
            out.update(flatten(value[key], f"{prefix}{key}."))
        return out
    if isinstance(value, list | tuple):
        out = {}
        for index, item in enumerate(value):
            out.update(flatten(item, f"{prefix}{index}."))
        return out
    return {prefix.rstrip("."): value}


def weights_record(path: Path, project: Path) -> dict[str, Any]:
    """sha256 of every tensor of the checkpoint at ``path`` (sorted key order), one digest per top-level entry and
    one overall; non-tensor entries (meta JSON included, cleaned) join their entry's digest."""
    import torch

    payload = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(payload, dict) and isinstance(payload.get("meta"), str):
        payload = {**payload, "meta": json.loads(payload["meta"])}
    payload = payload if isinstance(payload, dict) else {"": payload}
    tensors: dict[str, str] = {}
    entries: dict[str, str] = {}
    overall = hashlib.sha256()
    for top in sorted(payload, key=str):
        if volatile(str(top)):
            continue
        digest = hashlib.sha256()
        for key, leaf in flatten(payload[top], f"{top}.").items():
            if isinstance(leaf, torch.Tensor):
                text = tensors[key] = tensor_digest(leaf)
            else:
                leaf = clean({key.rsplit(".", 1)[-1]: leaf}, project)
                if not leaf:  # a volatile key (a wall time)
                    continue
                text = json.dumps(leaf, sort_keys=True, default=str)
            digest.update(f"{key}={text};".encode())
        entries[str(top)] = digest.hexdigest()
        overall.update(f"{top}={entries[str(top)]};".encode())
    return {
        "file": path.relative_to(project).as_posix(),
        "overall": overall.hexdigest(),
        "entries": entries,
        "tensors": tensors,
    }


def tsv_rows(path: Path) -> list[dict[str, str]]:
    """A dvclive plot file without its timestamp column."""
    lines = path.read_text().splitlines()
    if not lines:
        return []
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"), strict=False)) for line in lines[1:]]
    return [{k: v for k, v in row.items() if not volatile(k)} for row in rows]


def dataset_record(path: Path) -> dict[str, Any]:
    """Rows and a digest of each column's values of a collected Parquet dataset."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return {
        "rows": table.num_rows,
        "columns": {
            name: hashlib.sha256(repr(table.column(name).to_pylist()).encode()).hexdigest()
            for name in table.column_names
        },
    }


def read_json(path: Path, project: Path) -> Any:
    return clean(json.loads(path.read_text()), project) if path.is_file() else None


def outputs_record(tree: dict[str, Any], project: Path) -> dict[str, Any]:
    """What the four stages of ``tree``'s run left in ``project``."""
    name = tree["name"]
    run = project / "runs" / name

    def sub(top: str) -> Path:
        return project / top / name

    record: dict[str, Any] = {
        "train_summary": read_json(run / "train_summary.json", project),
        "train_metrics": read_json(run / "dvclive" / "metrics.json", project),
        "train_log": {
            path.relative_to(run / "dvclive" / "plots").as_posix(): tsv_rows(path)
            for path in sorted((run / "dvclive" / "plots").rglob("*.tsv"))
            if not volatile(path.stem)
        },
        "evaluations": read_json(sub("reports") / "evaluations.json", project),
        "metrics": read_json(sub("reports") / "metrics.json", project),
        "selection": read_json(sub("models") / "selection.json", project),
        "model_card": read_json(sub("export") / "model_card.json", project),
        "run_files": sorted(
            p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file() and not volatile(p.name)
        ),
    }
    checkpoints = sorted((run / "checkpoints").glob("*.pt"))
    record["weights_last_checkpoint"] = weights_record(checkpoints[-1], project) if checkpoints else None
    model = sub("models") / "policy.pt"
    record["weights_selected_model"] = weights_record(model, project) if model.is_file() else None
    return record


def run_stage(command: str, preset: str, project: Path, overrides: list[str]) -> dict[str, Any]:
    """``python -m rlcore <command> --params <preset> --set ...`` in ``project``: its exit code (``timeout`` when it
    ran past ``STAGE_SECONDS``) and the end of its stderr when it failed."""
    sets = [arg for item in overrides for arg in ("--set", item)]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "DVC_NO_ANALYTICS": "1",
        "DO_NOT_TRACK": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    args = [sys.executable, "-m", "rlcore", command, "-q", "--params", preset, *sets]
    started = time.monotonic()
    try:
        done = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=STAGE_SECONDS)
    except subprocess.TimeoutExpired:
        return {"exit": "timeout", "stderr": f"still running after {STAGE_SECONDS} s"}
    print(f"  {command}: exit {done.returncode} ({time.monotonic() - started:.1f} s)", file=sys.stderr, flush=True)
    result: dict[str, Any] = {"exit": done.returncode}
    if done.returncode != 0:
        result["stderr"] = clean(done.stderr.strip().splitlines()[-5:], project)
    return result


def preset_tree(preset: str) -> dict[str, Any]:
    return read_yaml_mapping(ROOT / preset)


def overrides_of(preset: str) -> list[str]:
    tree = preset_tree(preset)
    seed = [f"seed={tree['seed']}"] if "seed" in tree else []  # offline.yaml: params.yaml's, through its base
    return [*tiny_budget(tree), *seed, *GOLDEN_OVERRIDES.get(preset, [])]


def pipeline(preset: str, project: Path) -> dict[str, Any]:
    """train -> evaluate -> select -> export of ``preset`` in ``project``, stopping at the first failed stage."""
    overrides = overrides_of(preset)
    record: dict[str, Any] = {"overrides": overrides, "exit": {}}
    for command in STAGES:
        outcome = run_stage(command, preset, project, overrides)
        record["exit"][command] = outcome["exit"]
        if outcome["exit"] != 0:
            stderr = " ".join(outcome.get("stderr", []))
            if command == "train" and any(fragment in stderr for fragment in SKIP_FRAGMENTS):
                return {"status": "skipped", "why": stderr}
            record["status"] = "failed"
            record["stderr"] = outcome.get("stderr")
            break
    else:
        record["status"] = "ok"
    record.update(outputs_record(preset_tree(preset), project))
    return record


def new_project(root: Path, preset: str) -> Path:
    """An empty folder with the preset where the user has it (``configs/`` or the top level)."""
    (root / "configs").mkdir(parents=True)
    shutil.copy(ROOT / preset, root / preset)
    return root


def made_project(workdir: Path, records: dict[str, Any], wanted: set[str]) -> Path:
    """What `make run` leaves, on the tiny budget: params.yaml's pipeline, ``rlcore collect`` of offline.yaml, and
    offline.yaml's pipeline (recorded when wanted: they are the presets they run)."""
    root = new_project(workdir / "made", "params.yaml")
    shutil.copy(ROOT / "offline.yaml", root / "offline.yaml")
    print("params.yaml (made project)", file=sys.stderr, flush=True)
    first = pipeline("params.yaml", root)
    if "params.yaml" in wanted:
        records["params.yaml"] = first
    collect = run_stage("collect", "offline.yaml", root, COLLECT_OVERRIDES)
    print("offline.yaml (made project)", file=sys.stderr, flush=True)
    second = pipeline("offline.yaml", root)
    second["collect"] = {"overrides": COLLECT_OVERRIDES, "exit": collect["exit"]}
    dataset = root / preset_tree("offline.yaml")["dataset"]["path"]
    if dataset.is_file():
        second["collect"]["dataset"] = dataset_record(dataset)
    if "offline.yaml" in wanted:
        records["offline.yaml"] = second
    return root


def record_all(only: list[str] | None) -> dict[str, Any]:
    wanted = set(only or PRESETS)
    records: dict[str, Any] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rlcore-golden-") as tmp:
        workdir = Path(tmp)
        made: Path | None = None
        for preset in PRESETS:
            if preset not in wanted:
                continue
            tree = preset_tree(preset)
            needs_made = preset in ("params.yaml", "offline.yaml") or tree["train"].get("init_from") is not None
            if needs_made and made is None:
                made = made_project(workdir, records, wanted)
            if preset in ("params.yaml", "offline.yaml"):
                continue
            print(preset, file=sys.stderr, flush=True)
            project = workdir / preset.replace("/", "_")
            if tree["train"].get("init_from") is not None:  # the warm start: in a copy of what `make run` made
                assert made is not None
                shutil.copytree(made, project, symlinks=True)
                shutil.copytree(ROOT / "configs", project / "configs", dirs_exist_ok=True)
            else:
                new_project(project, preset)
            records[preset] = pipeline(preset, project)
    print(f"{len(records)} presets in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return {"format": "rlcore-golden", "version": 1, "presets": {p: records[p] for p in PRESETS if p in records}}


def differences(before: Any, after: Any) -> list[str]:
    """Dotted keys whose values differ (a key only one side has counts)."""
    left, right = flatten(before), flatten(after)
    return sorted(key for key in left.keys() | right.keys() if left.get(key, ...) != right.get(key, ...))


def compare(before_path: Path, after_path: Path, limit: int = 20) -> int:
    before = json.loads(before_path.read_text())["presets"]
    after = json.loads(after_path.read_text())["presets"]
    failed = False
    for preset in [*before, *(p for p in after if p not in before)]:
        if preset not in before or preset not in after:
            print(f"{preset}: only in {before_path if preset in before else after_path}")
            failed = True
            continue
        if preset in NONDETERMINISTIC:
            print(f"{preset}: not comparable (nondeterministic: {NONDETERMINISTIC[preset]})")
            continue
        if before[preset].get("status") == "skipped" or after[preset].get("status") == "skipped":
            same = before[preset].get("status") == after[preset].get("status")
            print(f"{preset}: skipped" + ("" if same else " on one side only"))
            failed |= not same
            continue
        keys = differences(before[preset], after[preset])
        if not keys:
            status = before[preset].get("status")
            print(f"{preset}: identical" + ("" if status == "ok" else f" (both {status})"))
            continue
        failed = True
        shown = ", ".join(keys[:limit]) + (f", ... ({len(keys)} keys)" if len(keys) > limit else "")
        print(f"{preset}: DIFFERENT: {shown}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the record of this tree's presets to this JSON file")
    parser.add_argument(
        "--only", nargs="+", metavar="PRESET", help="only these presets (e.g. configs/dqn-cartpole.yaml)"
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="compare two records: exit 1 on any difference",
    )
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("--out or --compare expected")
    unknown = sorted(set(args.only or []) - set(PRESETS))
    if unknown:
        parser.error(f"--only: presets expected ({', '.join(PRESETS)}), got {', '.join(unknown)}")
    record = record_all(args.only)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    statuses = {preset: r["status"] for preset, r in record["presets"].items()}
    print(json.dumps(statuses, indent=1))
    return 0 if all(s in ("ok", "skipped") for s in statuses.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
