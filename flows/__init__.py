"""Prefect flows over rlcore's stages: the training pipeline, collection, parallel evaluation, sweeps, deployments.

prefect.toml attaches Prefect's log handlers to the ``rlcore`` logger (``extra_loggers``) but leaves its
level at the root's WARNING; INFO makes rlcore's evaluation, selection and export lines visible in flow runs.
"""

import logging

if logging.getLogger("rlcore").level == logging.NOTSET:
    logging.getLogger("rlcore").setLevel(logging.INFO)
