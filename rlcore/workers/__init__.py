"""Processes that do a run's work beside the learner: IMPALA's actors and ES/SVPG's rollout workers, in
subprocesses (one supervisor, ``processes``, starts, watches and replaces them) or on a Dask cluster, dying with their
parent.

May import: ``rlcore.params``, ``rlcore.registry``, ``rlcore.algos`` and below; not ``rlcore.trainers``."""
