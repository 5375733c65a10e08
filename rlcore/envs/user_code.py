"""The user's code exercised at load (an opponent's test game, a wrapper's test reset and step) in a forked child
process under a time bound, so that whatever it does to its process is reported in one line naming its params key
instead of being done to rlcore's: an exception, ``sys.exit(n)``, a hang past the bound (the child is killed), and
``os._exit(n)`` or a crash (a process that ends without sending its result is an error, never a success).

The child sends its result back as one JSON object through a pipe (nothing it sends is unpickled). A fork costs
~16 ms on this project's machine with torch loaded (a test game of tic-tac-toe ~3 ms, of connect four ~12 ms); where
``os.fork`` does not exist the check runs in this process, ``SystemExit`` still caught, without the time bound.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from rlcore.common.errors import ConfigError, RLCoreError, UserCodeError, describe_exception, format_traceback
from rlcore.envs.ids import UserCodeValueError, env_spec, import_object, raised_at

DEFAULT_TIMEOUT_SECONDS = 30.0
"""``env.user_code_timeout_seconds``' default: the most one load-time check of user code may take (a test game
of tic-tac-toe or connect four against rlcore's opponents takes milliseconds)."""
TIMEOUT_KEY = "env.user_code_timeout_seconds"


@dataclass(frozen=True)
class UserCode:
    """Who is exercised: its params ``key`` (``env.opponent``), its import ``path`` and what it is ``doing`` (``playing
    its test game of <env>``), the words of every message about it."""

    key: str
    path: str
    doing: str

    def failed(self, what: str) -> str:
        return f"{self.key}: {self.path} {what} while {self.doing}"


def run_bounded(check: Callable[[], None], code: UserCode, seconds: float) -> None:
    """Run ``check`` on ``code`` in a forked child; ``check`` raises ``ValueError`` holding a whole one-line message
    for what it refuses (the user's own exceptions turned into one). Raises ``ValueError`` (one line naming
    ``code.key``; :class:`UserCodeValueError` with the traceback for the error log) when the check refused, or the
    user's code raised, exited, took longer than ``seconds`` or ended its process."""
    if not hasattr(os, "fork"):
        _raise(_outcome(check, code))
        return
    for stream in (sys.stdout, sys.stderr):  # what is buffered now would be written twice, by both processes
        with contextlib.suppress(Exception):
            stream.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's frames
        status = 1
        try:
            os.close(read_end)
            try:
                outcome = _outcome(check, code)
            except BaseException as exc:  # KeyboardInterrupt and the like, raised by the user's code in its process
                outcome = {"error": code.failed(f"raised {describe_exception(exc)}"), "details": format_traceback(exc)}
            payload = json.dumps(outcome).encode()
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(payload)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    received, finished = b"", False
    try:
        received, finished = _read_until(read_end, time.monotonic() + seconds)
    finally:  # also when this process is interrupted while it waits: no child is left behind
        os.close(read_end)
        if not finished:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, wait_status = os.waitpid(pid, 0)
    if not finished:
        raise ValueError(code.failed(f"did not finish within {seconds:g} s ({TIMEOUT_KEY})"))
    try:
        outcome = json.loads(received.decode())
    except ValueError:  # nothing (or a part) was sent: the process ended under the check
        outcome = {"error": code.failed(_death(wait_status))}
    _raise(outcome)


def _read_until(fd: int, deadline: float) -> tuple[bytes, bool]:
    """Everything written to ``fd`` until its writer closes it (True) or ``deadline`` passes (False)."""
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), False
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks), True
            chunks.append(chunk)


def _death(wait_status: int) -> str:
    code = os.waitstatus_to_exitcode(wait_status)
    if code < 0:
        return f"crashed its process (killed by {signal.Signals(-code).name})"
    return f"ended its process (exit status {code}, no result sent)"


def _outcome(check: Callable[[], None], code: UserCode) -> dict[str, str]:
    """What ``check`` ended with, as plain data: ``{}`` (fine) or ``{"error": line, "details": traceback}``."""
    try:
        check()
    except SystemExit as exc:
        return {"error": code.failed(f"called sys.exit({exc.code!r})"), "details": format_traceback(exc)}
    except ValueError as exc:  # the check's own refusal: a whole message
        return {"error": str(exc), "details": getattr(exc, "details", "")}
    except Exception as exc:
        return {"error": code.failed(f"raised {raised_at(exc)}"), "details": format_traceback(exc)}
    return {}


def _raise(outcome: dict[str, str]) -> None:
    if "error" in outcome:
        raise UserCodeValueError(str(outcome["error"]), str(outcome.get("details", "")))


class UserWrapper:
    """Builds ``env.wrappers.<index>`` around a sub-env: what the user's wrapper raises, or a result that is not an
    env, becomes one error naming that key (a plain class, so async vectorization can pickle it)."""

    def __init__(self, index: int, path: str, kwargs: dict[str, Any]) -> None:
        self.key = f"env.wrappers.{index}.wrapper"
        self.path = path
        self.kwargs = dict(kwargs)
        try:
            self.wrapper = import_object(path)  # checked at load; params built in code may skip that
        except ValueError as exc:
            raise ConfigError(f"{self.key}: {exc}") from None

    def __call__(self, env: gym.Env) -> Any:  # a gym.Env (a wrapper, or what a function returns)
        try:
            wrapped = self.wrapper(env, **self.kwargs)
        except RLCoreError:
            raise
        except Exception as exc:
            raise UserCodeError.raised(f"{self.key}: {self.path} raised when built", exc) from None
        if not isinstance(wrapped, gym.Env):
            shown = repr(wrapped)
            shown = f"({shown[:60]}…)" if len(shown) > 60 else f"({shown})"
            raise ConfigError(f"{self.key}: {self.path} returned {type(wrapped).__name__} {shown}, not a gymnasium env")
        return wrapped


def check_wrappers(
    env_id: str, kwargs: dict[str, Any], wrappers: list[tuple[str, dict[str, Any]]], seconds: float
) -> None:
    """Refuse (``ValueError``, one line naming ``env.wrappers.<index>.wrapper``) a wrapper of ``wrappers`` (import
    path, kwargs; in order) that fails a test reset (seed 0) and step (a random action) of ``env_id`` wrapped in it
    and the ones before it, each in a child process bounded by ``seconds`` (:func:`run_bounded`)."""
    for index, (path, _) in enumerate(wrappers):
        code = UserCode(f"env.wrappers.{index}.wrapper", path, f"taking a test reset and step of {env_id}")
        test = functools.partial(_reset_and_step, env_id, kwargs, wrappers[: index + 1], code)
        run_bounded(test, code, seconds)


def _reset_and_step(
    env_id: str, kwargs: dict[str, Any], wrappers: list[tuple[str, dict[str, Any]]], code: UserCode
) -> None:
    """A test reset and step of ``env_id`` in ``wrappers``; nothing when the env itself fails to build, reset or step
    on its own (what the env does is reported where it is built and stepped, naming the env)."""
    try:
        env = gym.make(env_spec(env_id), **kwargs)
        if len(wrappers) == 1:
            _test_episode_start(env)
    except Exception:
        return
    try:
        for index, (path, wrapper_kwargs) in enumerate(wrappers):
            env = UserWrapper(index, path, wrapper_kwargs)(env)
        _test_episode_start(env)
    except RLCoreError as exc:  # UserWrapper's, naming its key already
        raise UserCodeValueError(str(exc), exc.details) from None
    except Exception as exc:  # a ValueError of the user's too: ValueError is what a check refuses with
        raise UserCodeValueError(code.failed(f"raised {raised_at(exc)}"), format_traceback(exc)) from None
    finally:
        with contextlib.suppress(Exception):
            env.close()


def _test_episode_start(env: gym.Env) -> None:
    env.reset(seed=0)
    env.action_space.seed(0)
    env.step(env.action_space.sample())
