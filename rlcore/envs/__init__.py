"""The env side: making vector envs from ``env`` params, stepping them with autoreset, actions and observations
between the policy and the env, env parameters, settings and curriculum lessons, the envs rlcore ships (MinAtar).

May import: ``rlcore.config`` (its env section) and ``rlcore.common``."""
