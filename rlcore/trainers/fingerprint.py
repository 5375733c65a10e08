"""What makes two runs the same training: the params keys that change what training computes, their hash (the
run's fingerprint: a resumed run must have the same), and the first key in which two runs differ (named when a
finished run would be replaced by one trained with other params)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rlcore.config.sections import Params


def trained_params(tree: dict[str, Any]) -> dict[str, Any]:
    """The params keys (of a params tree, ``Params.to_dict()``) that change what training computes."""
    relevant: dict[str, Any] = {key: tree[key] for key in ("seed", "env", "policy", "algo") if key in tree}
    # train.seeds: each seed's run is trained with it null and its own seed (rlcore.stages.seeds), so a seed's
    # run has the fingerprint of the one-seed run with that seed, however its seeds share processes.
    unhashed = ("progress_bar", "seeds", "batch_seeds", "seed_processes")
    relevant["train"] = {k: v for k, v in tree["train"].items() if k not in unhashed}
    # Where it trains is not what it trains: a run started on a GPU machine resumes on a CPU one, and back (hashed
    # as the default, so runs from before train.device keep their fingerprint).
    relevant["train"]["device"] = "auto"
    # The periodic evaluations' episode cap changes their scores, which stop training (target_return).
    relevant["eval_max_episode_steps"] = tree["eval"]["max_episode_steps"]
    return relevant


def train_fingerprint(params: Params, source: dict[str, Any]) -> str:
    """Hash of every params key that changes what training computes (:func:`trained_params`), and of what the run
    learns from beyond the params (``source``: for an offline run the dataset section and the file's sha256)."""
    relevant = {**trained_params(params.to_dict()), **source}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def changed_key(before: Any, after: Any, prefix: str = "") -> tuple[str, Any, Any] | None:
    """The first dotted key whose value differs between two params trees (of :func:`trained_params`), with both
    values; a key only one of them has is skipped (a run from an older rlcore lacks the newer keys)."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in before:
            if key in after:
                found = changed_key(before[key], after[key], f"{prefix}{key}.")
                if found is not None:
                    return found
        return None
    if before != after:
        key = prefix.rstrip(".")
        return ("eval.max_episode_steps" if key == "eval_max_episode_steps" else key), before, after
    return None
