"""The checks of a dataset being read: its columns against the env's spaces, and its rows (finite values, actions
in range, rows grouped by episode in step order, each episode ended and once, the metadata's ``rows_sha256``).

Each problem is one :class:`rlcore.data.schema.DatasetError` line naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from gymnasium import spaces

from rlcore.data.schema import COLUMNS, LABEL_COLUMNS, DatasetError, ObservationFormat, RowsDigest
from rlcore.envs.actions import sub_action_sizes


def _check_columns(
    path: Path, schema: pa.Schema, observation: ObservationFormat, action_space: spaces.Space, env_id: str
) -> None:
    required = [name for name in COLUMNS if name != "log_prob"]
    for name in required:
        if name not in schema.names:
            raise DatasetError(f"{path}: missing column {name!r} (a dataset needs: {', '.join(required)})")
    expected = {
        "episode_id": pa.types.is_integer,
        "step": pa.types.is_integer,
        "reward": pa.types.is_floating,
        "terminated": pa.types.is_boolean,
        "truncated": pa.types.is_boolean,
    }
    for name in LABEL_COLUMNS:  # multi-agent datasets only (group: collected with policy.groups)
        if name in schema.names:
            expected[name] = pa.types.is_string
    for name, check in expected.items():
        kind = schema.field(name).type
        if not check(kind):
            raise DatasetError(f"{path}: column {name!r} has type {kind}, expected {check.__name__[3:]}")
    for name in ("observation", "next_observation"):
        kind = schema.field(name).type
        if observation.binary:
            if kind != observation.arrow_type:
                raise DatasetError(
                    f"{path}: column {name!r} has type {kind}, but {env_id} observations are {observation.size} "
                    f"{observation.dtype.name} values, stored as {observation.arrow_type} (their raw bytes)"
                )
            continue
        if not pa.types.is_fixed_size_list(kind) or not pa.types.is_floating(kind.value_type):
            raise DatasetError(f"{path}: column {name!r} has type {kind}, expected fixed_size_list<float32>")
        if kind.list_size != observation.size:
            raise DatasetError(
                f"{path}: column {name!r} holds {kind.list_size} values per row, but {env_id} "
                f"observations have {observation.size}"
            )
    kind = schema.field("action").type
    sizes = sub_action_sizes(action_space)
    if isinstance(action_space, spaces.Discrete):
        if not pa.types.is_integer(kind):
            raise DatasetError(f"{path}: column 'action' has type {kind}, but {env_id} has discrete actions (int64)")
    elif sizes is not None:
        if not (
            pa.types.is_fixed_size_list(kind) and pa.types.is_integer(kind.value_type) and kind.list_size == len(sizes)
        ):
            raise DatasetError(
                f"{path}: column 'action' has type {kind}, but {env_id} has {type(action_space).__name__} actions "
                f"(fixed_size_list<int64>[{len(sizes)}])"
            )
    else:
        assert action_space.shape is not None
        size = int(np.prod(action_space.shape))
        if not pa.types.is_fixed_size_list(kind) or kind.list_size != size:
            raise DatasetError(
                f"{path}: column 'action' has type {kind}, but {env_id} actions are fixed_size_list<float32>[{size}]"
            )


class _Checks:
    """Every check of a dataset's rows, fed one row group after another in file order, then finished: values
    (finite, discrete actions in range), layout (rows grouped by episode, steps 0, 1, 2, ... in order, each
    episode once and ending with a terminated or truncated row) and the metadata's ``rows_sha256``.

    :func:`rlcore.data.reader.load_dataset` and :func:`rlcore.data.reader.iter_dataset` both use it, so a file is
    refused with the same message however it is read. Memory besides the rows given: one int64 per episode (to find
    an episode id used twice).
    """

    def __init__(
        self,
        path: Path,
        action_space: spaces.Space,
        env_id: str,
        metadata: dict[str, Any],
        labels: tuple[str, ...] = (),
    ) -> None:
        self.path, self.action_space, self.env_id = path, action_space, env_id
        self.rows = 0  # rows checked so far: the file row number of the next one
        self.last: tuple[int, int, bool] | None = None  # (episode_id, step, ended) of the last row checked
        self.episode_ids: list[np.ndarray] = []  # the id of each episode (run of rows), in file order
        self.ascending = True  # the ids so far increase: none can repeat
        self.recorded: str | None = metadata.get("rows_sha256")
        self.digest = RowsDigest(labels) if self.recorded is not None else None

    def add(self, arrays: dict[str, np.ndarray], group: int) -> None:
        """The rows of row group ``group``, decoded (:func:`rlcore.data.schema._allocate`'s keys)."""
        if len(arrays["reward"]) == 0:
            return
        self._values(arrays, group)
        self._layout(arrays)
        if self.digest is not None:
            self.digest.update(arrays)
        self.rows += len(arrays["reward"])

    def finish(self) -> None:
        """The checks that need every row: the last episode ends, each episode id once, ``rows_sha256``."""
        path = self.path
        if self.last is None:
            raise DatasetError(f"{path}: no transitions")
        episode, _, ended = self.last
        if not ended:
            raise DatasetError(
                f"{path}: episode {episode} does not end with a terminated or truncated row "
                f"(its last row is the file's last, row {self.rows - 1})"
            )
        if not self.ascending:
            ids = np.concatenate(self.episode_ids)
            order = np.argsort(ids, kind="stable")  # equal ids keep file order: the later ones are repeats
            repeats = order[1:][ids[order[1:]] == ids[order[:-1]]]
            if len(repeats):
                raise DatasetError(
                    f"{path}: episode {int(ids[repeats.min()])} appears in two separate runs of rows (duplicated "
                    "or reordered rows?): rows must be grouped by episode in step order, each episode once"
                )
        if self.digest is not None and self.digest.hexdigest() != self.recorded:
            raise DatasetError(
                f"{path}: its rows are not those its rlcore metadata describes (rows_sha256 differs): the file "
                "changed after it was written; restore it or collect it again (to train on edited rows, write "
                "them without the 'rlcore' metadata key)"
            )

    def _values(self, arrays: dict[str, np.ndarray], group: int) -> None:
        path = self.path
        for name in ("reward", "observation", "next_observation", "action"):
            values = arrays[name]
            if not np.issubdtype(values.dtype, np.floating) or np.isfinite(values).all():  # cheap; rows only if bad
                continue
            finite = np.isfinite(values).reshape(len(values), -1).all(axis=1)
            first = int(np.flatnonzero(~finite)[0])
            raise DatasetError(
                f"{path}: {int((~finite).sum())} rows with a NaN or infinite {name} (first at row "
                f"{self.rows + first}) in row group {group}"
            )
        if isinstance(self.action_space, spaces.Discrete):
            actions = arrays["action"]
            bad = (actions < 0) | (actions >= self.action_space.n)
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise DatasetError(
                    f"{path}: action {int(actions[row])} is outside {self.env_id}'s "
                    f"{int(self.action_space.n)} discrete actions (row {self.rows + row})"
                )
        sizes = sub_action_sizes(self.action_space)
        if sizes is not None:
            actions, limit = arrays["action"], np.asarray(sizes)
            bad = ((actions < 0) | (actions >= limit)).any(axis=1)
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                sub = int(np.flatnonzero((actions[row] < 0) | (actions[row] >= limit))[0])
                raise DatasetError(
                    f"{path}: action {actions[row].tolist()} has sub-action {sub} = {int(actions[row, sub])}, outside "
                    f"0..{sizes[sub] - 1} of {self.env_id}'s {type(self.action_space).__name__} (row {self.rows + row})"
                )

    def _layout(self, arrays: dict[str, np.ndarray]) -> None:
        ids, steps = arrays["episode_id"], arrays["step"]
        ended = arrays["terminated"] | arrays["truncated"]
        same = ids[1:] == ids[:-1]
        in_order = np.where(same, steps[1:] == steps[:-1] + 1, steps[1:] == 0)
        if self.last is None:
            first_same, first_in_order, previous_ended = False, bool(steps[0] == 0), True
        else:
            previous_id, previous_step, previous_ended = self.last
            first_same = bool(ids[0] == previous_id)
            first_in_order = bool(steps[0] == previous_step + 1) if first_same else bool(steps[0] == 0)
        # the first row out of order, and the first row that starts an episode before the previous one ended
        disorder = 0 if not first_in_order else None if in_order.all() else 1 + int(np.argmin(in_order))
        starts = np.flatnonzero(~same) + 1
        cut = starts[~ended[starts - 1]]
        unended = 0 if not (first_same or previous_ended) else int(cut[0]) if len(cut) else None
        if disorder is not None and (unended is None or disorder <= unended):
            raise DatasetError(self._disorder(arrays, disorder))
        if unended is not None:
            episode = int(ids[unended - 1]) if unended else self.last[0] if self.last else 0
            raise DatasetError(
                f"{self.path}: episode {episode} does not end with a terminated or truncated row (row "
                f"{self.rows + unended - 1} is followed by episode {int(ids[unended])} step {int(steps[unended])})"
            )
        new = ids[starts] if first_same else np.concatenate([ids[:1], ids[starts]])
        if len(new):
            if self.ascending:
                after = self.episode_ids[-1][-1] if self.episode_ids else None
                self.ascending = bool(np.all(new[1:] > new[:-1])) and (after is None or bool(new[0] > after))
            self.episode_ids.append(new)
        self.last = (int(ids[-1]), int(steps[-1]), bool(ended[-1]))

    def _disorder(self, arrays: dict[str, np.ndarray], index: int) -> str:
        episode, step, row = int(arrays["episode_id"][index]), int(arrays["step"][index]), self.rows + index
        rule = "rows must be grouped by episode in step order (steps 0, 1, 2, ...)"
        if index:
            previous: tuple[int, int] | None = (int(arrays["episode_id"][index - 1]), int(arrays["step"][index - 1]))
        else:
            previous = self.last[:2] if self.last else None
        if previous is None:
            return f"{self.path}: row 0 is episode {episode} step {step}, not an episode's first step (0): {rule}"
        if previous == (episode, step):
            return f"{self.path}: row {row} repeats episode {episode} step {step} (duplicated rows): {rule}"
        return (
            f"{self.path}: row {row} is episode {episode} step {step}, after episode {previous[0]} step "
            f"{previous[1]} (duplicated, missing or reordered rows?): {rule}"
        )
