"""A real ``prefect server start`` on 127.0.0.1 and a free port, with its own PREFECT_HOME, for tests.

Every process started here gets its own process group and is killed (group and all) on exit.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

PREFECT = str(Path(sys.executable).parent / "prefect")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(process: subprocess.Popen, grace: float = 10) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left of it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # children that outlived their parent
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@contextlib.contextmanager
def prefect_server(home: Path, startup_timeout: float = 90) -> Iterator[tuple[str, dict[str, str]]]:
    """Yields the API URL and the environment variables that point a process at this server."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    log = open(home / "server.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui", "--analytics-off"],
        cwd=home,
        env={**os.environ, **env, "PREFECT_API_URL": ""},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"prefect server exited {server.returncode}: {(home / 'server.log').read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prefect server not healthy after {startup_timeout} s")
            time.sleep(0.5)
        yield url, env
    finally:
        stop(server)
        log.close()
        assert not group_alive(server.pid), "prefect server left processes behind"


@contextlib.contextmanager
def client_of(url: str) -> Iterator[str]:
    """This process's Prefect client uses the server at ``url`` (what ``prefect_test_harness`` sets, for a server
    started once for several modules), and its logs and events are sent before the next module runs."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain() -> None:
        with contextlib.suppress(RuntimeError):  # no log worker started
            result = APILogWorker.instance().drain()
            if inspect.isawaitable(result):
                await result
        result = EventsWorker.drain_all()
        if inspect.isawaitable(result):
            await result

    with temporary_settings({PREFECT_API_URL: url}):
        try:
            yield url
        finally:
            run_coro_as_sync(drain())


@contextlib.contextmanager
def pointed_at(env: dict[str, str]) -> Iterator[None]:
    """This process (and what it spawns, e.g. Dask workers) uses the server in ``env``."""
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        with temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"], PREFECT_HOME: env["PREFECT_HOME"]}):
            yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
