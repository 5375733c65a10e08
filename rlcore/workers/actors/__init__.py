"""Actors for actor-learner runs (IMPALA): what they are (``actor``) and where they run (``runners``,
``dask_runner``). The learner's loop is ``rlcore.trainers.actor_learner``."""
