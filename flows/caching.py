"""Task caching of the pipeline's stages: a re-run of the flow skips every stage whose inputs did not change.

Each stage task is keyed (a Prefect ``CachePolicy``) on what the stage reads, as ``dvc.yaml`` lists it: the params
keys it reads (hashed; ``rlcore.stages.STAGE_PARAMS`` has the table), the digests of the files those params name,
the results of the stages before it (content digests of their outputs), and the code version (rlcore's and flows'
sources). Results are persisted as JSON under ``<root>/.prefect/storage``, so a re-run after a kill, or after
changing an evaluation key, continues from the first stage whose inputs changed, as ``dvc repro`` does.

A cached result is only returned while the files it names are on disk with the digests it recorded: each result
holds ``outputs`` (path -> sha256). When they are gone or changed, the key moves on to a new one derived from the
stale record (so the stage runs again and its new result is stored there, found again by the next run).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from prefect.cache_policies import CachePolicy
from prefect.context import TaskRunContext

from rlcore.common.files import sha256_file
from rlcore.config.inheritance import value_at
from rlcore.params import load_params
from rlcore.stages import STAGE_PARAMS
from rlcore.stages.baseline import baseline_inputs

NOT_READ = {"train.progress_bar"}
"""Keys of those sections that change nothing a stage writes (as the run fingerprint leaves them out)."""

WRITTEN = {"collect.output"}
"""Keys naming a file the stage itself writes: part of its key as a path, never by content (the file before the stage
ran is not an input of it)."""

MAX_STALE_RECORDS = 1000
"""Stale records followed before giving up on the cache for a stage (each invalidation adds one)."""


@lru_cache(maxsize=1)
def code_version() -> str:
    """sha256 over the sources of ``rlcore`` and ``flows`` (what ``dvc.yaml`` lists as the ``rlcore`` dep)."""
    import flows
    import rlcore

    digest = hashlib.sha256()
    for package in (rlcore, flows):
        folder = Path(package.__file__).parent
        for path in sorted(folder.rglob("*.py")):
            digest.update(path.relative_to(folder.parent).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _drop_not_read(key: str, value: Any, left_out: set[str] = NOT_READ) -> Any:
    if isinstance(value, dict):
        return {k: _drop_not_read(f"{key}.{k}", v, left_out) for k, v in value.items() if f"{key}.{k}" not in left_out}
    return value


def named_files(value: Any, root: Path) -> dict[str, str]:
    """path -> sha256 of every existing file a string in ``value`` names (relative to ``root``, or absolute):
    ``train.init_from``, ``dataset.path``, a BC or GAIL dataset, ``select.baseline_run``'s curve..."""
    found: dict[str, str] = {}
    if isinstance(value, dict):
        for item in value.values():
            found.update(named_files(item, root))
    elif isinstance(value, list):
        for item in value:
            found.update(named_files(item, root))
    elif isinstance(value, str) and value and "\n" not in value and len(value) < 4096:
        path = Path(value) if Path(value).is_absolute() else root / value
        try:
            if path.is_file():
                found[value] = sha256_file(path)
        except OSError:  # a name too long, or not a path at all
            pass
    return found


def outputs_intact(result: Any) -> bool:
    """True when every file of ``result["outputs"]`` exists with the recorded sha256."""
    if not isinstance(result, dict) or not isinstance(result.get("outputs"), dict):
        return False
    for path, digest in result["outputs"].items():
        try:
            if sha256_file(Path(path)) != digest:
                return False
        except OSError:
            return False
    return True


def file_digests(paths: list[Path]) -> dict[str, str]:
    """path -> sha256 of each file (what a stage wrote: recorded in its result as ``outputs``)."""
    return {str(path): sha256_file(path) for path in paths}


@dataclass
class StageInputs(CachePolicy):
    """The key of a stage task: its params keys, the files they name, the upstream results and the code version,
    moved past records whose outputs are no longer on disk as recorded (see the module docstring)."""

    stage: str = "train"

    def base_key(self, inputs: dict[str, Any]) -> str:
        root = Path(inputs["root"])
        params = load_params(inputs["params_path"], list(inputs.get("overrides") or []))
        tree = params.to_dict()
        read = {key: _drop_not_read(key, value_at(tree, key)) for key in STAGE_PARAMS[self.stage]}
        baseline = value_at(tree, "select.baseline_run") if self.stage == "select" else None
        files = named_files({key: _drop_not_read(key, value, WRITTEN) for key, value in read.items()}, root)
        if baseline:  # the report draws that run's learning curve and compares its seeds' test scores
            files.update(file_digests(baseline_inputs(root, baseline)))
        upstream = inputs.get("upstream") or {}
        material = {
            "stage": self.stage,
            "root": str(root.resolve()),
            "params": read,
            "files": files,
            "upstream": upstream,
            "code": code_version(),
        }
        return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()

    def compute_key(
        self,
        task_ctx: TaskRunContext,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        key = f"{self.stage}-{self.base_key(inputs)}"
        store = task_ctx.result_store
        for _ in range(MAX_STALE_RECORDS):
            if not store.exists(key):
                return key
            record = store.read(key)
            if outputs_intact(record.result):
                return key
            stale = json.dumps(record.result, sort_keys=True, default=str)
            key = f"{self.stage}-{hashlib.sha256((key + stale).encode()).hexdigest()}"
        return None  # no caching for this run of the stage
