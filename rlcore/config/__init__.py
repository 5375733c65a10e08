"""The params sections (``train``, ``eval``, ``select``, ``export``, ...), reading params files safely with
``--set`` overrides, and the sweep section.

May import: ``rlcore.envs`` (it holds the ``env`` section, ``rlcore.envs.config``) and ``rlcore.common``."""
