"""The env side: the ``env`` params section (``config.py``), making vector envs from it, stepping them with
autoreset, actions and observations between the policy and the env, action masks, env parameters, settings and
curriculum lessons, PettingZoo envs' agents as rows of a vector env and the reduction of their returns, two-player
turn-based games against a fixed opponent, the envs rlcore ships (MinAtar).

May import: ``rlcore.common`` only (the params package imports the ``env`` section from here, not the reverse)."""
