"""What is measured and handed out: scoring policies on held-out episodes, selecting the best checkpoint,
statistics across seeds, reports, plots and videos, and the exported policy with its parity check.

May import: ``rlcore.nets``, ``rlcore.config``, ``rlcore.envs``, ``rlcore.common``; not ``rlcore.data``."""
