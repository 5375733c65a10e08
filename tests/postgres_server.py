"""A real PostgreSQL server on 127.0.0.1 and a free port, in a throw-away data folder, for tests.

PostgreSQL refuses to run as root: as root, the server runs as the ``postgres`` user (``runuser``).
Tests that need it are skipped, saying why, where PostgreSQL's programs are not installed.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect_server import free_port, group_alive, stop


def _program(name: str) -> str | None:
    found = shutil.which(name) or sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found if isinstance(found, str) else (found[-1] if found else None)


@contextlib.contextmanager
def postgres_server(startup_timeout: float = 60) -> Iterator[str]:
    """Yields a SQLAlchemy URL of an empty database ``rlcore`` (user ``rlcore``, trust auth, loopback only)."""
    initdb, postgres = _program("initdb"), _program("postgres")
    if initdb is None or postgres is None:
        pytest.skip("PostgreSQL is not installed (initdb and postgres not found)")
    psycopg2 = pytest.importorskip("psycopg2")
    as_postgres: list[str] = []
    base = Path(tempfile.mkdtemp(prefix="rlcore-postgres-"))  # not under pytest's tmp: that is private to root
    if os.geteuid() == 0:
        as_postgres = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres", "postgres")
    data = base / "data"
    subprocess.run(
        [*as_postgres, initdb, "-D", str(data), "-U", "rlcore", "--auth=trust", "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = free_port()
    log = base / "postgres.log"
    # 300 connections: a SIGKILLed sweep's connections stay open on the server until it notices they are gone,
    # and the re-run's processes (each an engine pool plus Optuna's heartbeat thread) connect meanwhile; at 100 a
    # loaded machine ran out ("sorry, too many clients already").
    server = subprocess.Popen(
        [*as_postgres, postgres, "-D", str(data), "-p", str(port), "-k", str(base)]
        + ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=300"],
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w"),  # noqa: SIM115 - the server's own log; read on failure
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            try:
                connection = psycopg2.connect(host="127.0.0.1", port=port, user="rlcore", dbname="postgres")
                break
            except psycopg2.OperationalError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"PostgreSQL did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.3)
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("CREATE DATABASE rlcore")
        connection.close()
        yield f"postgresql+psycopg2://rlcore@127.0.0.1:{port}/rlcore"
    finally:
        # SIGINT is PostgreSQL's "fast" shutdown: it ends the sessions left open instead of waiting for them.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(30)
        stop(server)
        assert not group_alive(server.pid), "PostgreSQL left processes behind"
        shutil.rmtree(base, ignore_errors=True)
