"""rlcore.workers.processes: the Supervisor replaces a busy worker silent for the timeout (not an idle one), stops a
worker that keeps dying before it delivers with its kind's error, and raises a worker's failure; real processes."""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any

import pytest

from rlcore.common.errors import RLCoreError, worker_failure
from rlcore.workers.processes import Supervisor, WorkerKind


class EchoError(RLCoreError):
    """The echo workers' error."""


def _echo_main(conn: Any) -> None:
    """Send back each message until "stop"; hold "hang" without answering; report "fail" as a failure."""
    while (message := conn.recv()) != "stop":
        if message == "fail":
            conn.send(worker_failure(ValueError("bad input")))
            return
        if message != "hang":
            conn.send(message)


def _exit_main(code: int, conn: Any) -> None:
    sys.exit(code)


ECHO = WorkerKind(
    noun="echo",
    process_name="rlcore-test-echo",
    main=_echo_main,
    duplex=True,
    delivery="echoing",
    silence="echoed nothing",
    replacement="a new echo process (pid {pid}, incarnation {incarnation})",
    error=EchoError,
    exit_wait_seconds=1.0,
)


def _first_messages(supervisor: Supervisor) -> list[tuple[int, Any]]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if got := list(supervisor.messages(timeout_seconds=1.0)):
            return got
    raise AssertionError("no message in 60 s")


@pytest.mark.serial  # worker processes
def test_a_busy_worker_silent_for_the_timeout_is_replaced_and_an_idle_one_is_not(caplog: pytest.LogCaptureFixture):
    lost: list[int] = []
    supervisor = Supervisor(ECHO, 2, 0.2, lambda *_: (), lambda worker_id: lost.append(worker_id) or "1 dropped; ")
    supervisor.start()
    try:
        supervisor.send(0, "hello")
        supervisor.send(1, "hang")
        assert _first_messages(supervisor) == [(0, "hello")]
        supervisor.delivered(0)
        time.sleep(0.3)
        with caplog.at_level(logging.WARNING, logger="rlcore"):
            supervisor.watch(busy=lambda worker_id: worker_id == 1)
        assert lost == [1]
        pattern = r"echo 1 \(pid \d+\) echoed nothing for 0.2 s; 1 dropped; replaced by a new echo process "
        assert [
            r.getMessage()
            for r in caplog.records
            if re.fullmatch(pattern + r"\(pid \d+, incarnation 1\)", r.getMessage())
        ]
        supervisor.send(1, "again")  # the replacement works
        assert _first_messages(supervisor) == [(1, "again")]
    finally:
        for worker_id in range(2):
            supervisor.send(worker_id, "stop")
        supervisor.close()


@pytest.mark.serial  # worker processes
def test_a_worker_that_keeps_dying_before_it_delivers_stops_with_its_kinds_error():
    kind = WorkerKind(**{**ECHO.__dict__, "main": _exit_main})
    supervisor = Supervisor(kind, 1, 60, lambda *_: (3,), lambda worker_id: "")
    supervisor.start()
    try:
        with pytest.raises(EchoError, match=r"^echo 0 died \(exit code 3\) 3 times in a row before echoing: "):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                list(supervisor.messages(timeout_seconds=1.0))
                supervisor.watch(busy=lambda worker_id: False)
    finally:
        supervisor.close()


@pytest.mark.serial  # a worker process
def test_a_workers_failure_is_raised_as_its_kinds_error_naming_it():
    supervisor = Supervisor(ECHO, 1, 60, lambda *_: (), lambda worker_id: "")
    supervisor.start()
    try:
        supervisor.send(0, "fail")
        with pytest.raises(EchoError, match=r"^echo 0 failed: ValueError: bad input$"):
            _first_messages(supervisor)
    finally:
        supervisor.close()
