"""``python -m rlcore``: the stage subcommands of :mod:`rlcore.cli` without the Prefect ones."""

import sys

from rlcore.cli import main

sys.exit(main())
