"""Rollout workers of population-based learners (ES, SVPG): the worker that runs tasks in any process
(``worker``) and where workers live (``runners``: in-process or subprocesses; ``dask_runner``: tasks on a Dask
cluster). The tasks are ``rlcore.algos.population_tasks``; the loop is ``rlcore.trainers.population``."""
