"""The params sections (``train``, ``eval``, ``select``, ``export``, ...), reading params files safely with
``--set`` overrides, and the sweep section.

May import: ``rlcore.envs`` (the env section validates against env code) and ``rlcore.common``."""
