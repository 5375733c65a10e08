"""Errors meant for users: one line that names the key or file, what was expected and what was given."""

from __future__ import annotations

import difflib


class RLCoreError(Exception):
    """Base class: the CLI prints ``error: <message>`` and exits with status 2, no traceback."""


class ConfigError(RLCoreError):
    """A params file, an override or a params value is not what the run needs."""


class CheckpointError(RLCoreError):
    """A checkpoint or model file is missing, truncated, or was written by something else."""


def did_you_mean(word: str, candidates: list[str] | tuple[str, ...], prefix: str = "") -> str:
    """``" (did you mean 'x'?)"`` for the closest candidate, or ``""`` when none is close."""
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {prefix + matches[0]!r}?)" if matches else ""
