"""Processes that do a run's work beside the learner: IMPALA's actors and ES/SVPG's rollout workers, in
subprocesses or on a Dask cluster, supervised (started, watched, replaced) and dying with their parent.

May import: ``rlcore.params``, ``rlcore.registry``, ``rlcore.algos`` and below; not ``rlcore.trainers``."""
