"""The temporary Prefect server of a flow run without ``PREFECT_API_URL``, started so that it dies with the flow.

Prefect starts that server (uvicorn, ~250 MB) itself, from whichever thread first needs the API, and stops it at
the interpreter's exit: a SIGKILLed ``rlcore pipeline`` left it running for good. Here the flow's process starts it
first, from its main thread, through ``python -m rlcore.workers.parent_death <pid> uvicorn ...``: the server process
sets ``PR_SET_PDEATHSIG`` (Linux) and watches its parent (everywhere) before uvicorn starts, so it ends with the flow's
process however that ends (:mod:`rlcore.workers.parent_death`). It is registered where Prefect looks for its temporary
server, so every Prefect client of the process uses it and none starts another.

Why this and not a watchdog process: a watchdog that outlives the flow to kill the server is one more process that
must itself die, and would race a server restarted on another port; a server that ends itself needs neither. The
main thread matters: ``PR_SET_PDEATHSIG`` fires when the thread that started the child exits, and the main thread
is the last to exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any


def start_embedded_server() -> None:
    """Start the temporary server now, tied to this process, unless ``PREFECT_API_URL`` names a server or one is
    running already; from the main thread only (elsewhere Prefect starts its own, as before)."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value() or threading.current_thread() is not threading.main_thread():
        return
    server = SubprocessASGIServer._instances.get(None) or _server_class()()
    server.start()


def _server_class() -> type[Any]:
    import prefect
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import get_current_settings

    class TiedServer(SubprocessASGIServer):
        """Prefect's temporary server (Prefect 3's command line and environment), its process dying with ours."""

        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            return subprocess.Popen(
                args=[
                    sys.executable,
                    "-m",
                    "rlcore.workers.parent_death",
                    str(os.getpid()),
                    "uvicorn",
                    "--app-dir",
                    str(prefect.__module_path__.parent),
                    "--factory",
                    "prefect.server.api.server:create_app",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--log-level",
                    "error",
                    "--lifespan",
                    "on",
                ],
                env={
                    **os.environ,
                    "PREFECT_UI_ENABLED": "0",
                    "PREFECT__SERVER_EPHEMERAL": "1",
                    "PREFECT__SERVER_FINAL": "1",
                    **get_current_settings().to_environment_variables(exclude_unset=True),
                },
            )

    return TiedServer
