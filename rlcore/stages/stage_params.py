"""The params keys each stage reads: ``dvc.yaml``'s ``params`` of every stage and the Prefect tasks' cache keys.

A section (``eval``) stands for all of its keys; a dotted key (``eval.max_episode_steps``) for that key alone.
``tests/test_stage_params.py`` checks every ``dvc.yaml`` against this table, and the table against the keys each
stage's module reads. A stage whose params file leaves a key out runs on its default, which is code: dvc.yaml lists
only the keys the file has (DVC refuses a missing one).
"""

from __future__ import annotations

STAGE_PARAMS: dict[str, tuple[str, ...]] = {
    "train": (
        "seed",
        "name",
        "torch_threads",
        "env",
        "policy",
        "algo",
        "train",
        "dataset",
        "eval.max_episode_steps",  # the periodic evaluations' episode cap
        "eval.return_reduction",  # the periodic evaluations' score of a multi-agent env
    ),
    # evaluate and select read train.seeds: which seeds' run folders they cover.
    # evaluate and select read policy.groups: each group's mean return, and the score when eval.return_reduction
    # names a group.
    "evaluate": ("name", "torch_threads", "env", "policy.groups", "eval", "train.seeds"),
    # select scores the selection on the test episodes (env, eval) and draws select.baseline_run's curve beside
    # this run's with train.target_return as the threshold (and the optimality gap's target with train.seeds).
    "select": (
        "name",
        "torch_threads",
        "env",
        "policy.groups",
        "eval",
        "select",
        "train.target_return",
        "train.seeds",
    ),
    "export": ("name", "torch_threads", "export"),
    "collect": ("torch_threads", "env", "policy.groups", "collect"),  # policy.groups: the dataset's group column
}
