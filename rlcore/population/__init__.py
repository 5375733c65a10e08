"""Population-based learners' rollouts (ES, SVPG): what a worker runs (``tasks``), the shared noise table
(``noise``), the worker that runs tasks in any process (``worker``), and where workers live (``runners``:
in-process or subprocesses; ``dask_runner``: tasks on a Dask cluster). The loop is
``rlcore.trainers.population``."""
