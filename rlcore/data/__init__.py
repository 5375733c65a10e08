"""The data side: experience in (rollout and replay buffers, sequences for recurrent policies) and out
(datasets as Parquet files: collecting, reading, streaming, demonstrations, Minari import).

May import: ``rlcore.nets``, ``rlcore.config``, ``rlcore.envs``, ``rlcore.common``; not ``rlcore.evaluation``."""
