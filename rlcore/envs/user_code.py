"""The user's code exercised at load (an env module's first import, opponents' test games, wrappers' test reset and
step) in a forked child process under a time bound, so that whatever it does to its process is reported in one line
naming its params key instead of being done to rlcore's: an exception, ``sys.exit(n)``, a hang past the bound (the
child is killed), and ``os._exit(n)`` or a crash (a process that ends without sending its result is an error, never
a success).

One child runs a whole check, which may exercise several pieces of user code in turn (every wrapper of
``env.wrappers``; ``env.opponent`` then each of ``env.self_play.fixed_opponents``): it says which one it is on
(:func:`entering`), so a hang or a death is blamed on that one. The child sends those stages and its result back as
lines of JSON through a pipe (nothing it sends is unpickled); what it prints is discarded (the same code runs again,
visibly, when the run builds its envs). Measured on this project's 2-core machine, busy (load ~4), in a process with
the ``rlcore`` command's imports: a fork and exit ~47 ms; a forked check ~55-65 ms against ~5 ms in-process for a test
game of tic-tac-toe, ~12 ms for connect four, ~2 ms for CartPole's reset and step in a wrapper. At most three checks
run per params load. Where ``os.fork`` does not exist the check runs in this process, ``SystemExit`` still caught,
without the time bound.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.machinery
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from rlcore.common.errors import (
    ConfigError,
    RLCoreError,
    UserCodeError,
    UserCodeValueError,
    describe_exception,
    format_traceback,
    raised_at,
)
from rlcore.common.project import searched_folders
from rlcore.envs.ids import PREFIX as PETTINGZOO_PREFIX
from rlcore.envs.ids import env_spec, import_object
from rlcore.envs.user_envs import MODULE_PATH

DEFAULT_TIMEOUT_SECONDS = 30.0
"""``env.user_code_timeout_seconds``' default: the most one load-time check of user code may take (a test game
of tic-tac-toe or connect four against rlcore's opponents takes milliseconds)."""
MAX_TIMEOUT_SECONDS = 3600.0
"""The largest ``env.user_code_timeout_seconds`` taken (an hour)."""
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


_stages: list[Callable[[int], None]] = []
"""In a child of :func:`run_bounded` only: what :func:`entering` calls (writes the stage to the parent)."""


def entering(index: int) -> None:
    """Called by a check before it exercises ``codes[index]`` of :func:`run_bounded` (0 until the first call)."""
    for report in _stages:
        report(index)


def run_bounded(check: Callable[[], None], codes: Sequence[UserCode], seconds: float) -> None:
    """Run ``check`` on ``codes`` (one after another, :func:`entering` each) in a forked child. ``check`` raises
    ``ValueError`` holding a whole one-line message for what it refuses (the user's own exceptions turned into one).
    Raises ``ValueError`` (one line naming the key of the code at fault; :class:`UserCodeValueError` with the
    traceback for the error log) when the check refused, or the user's code raised, exited, took longer than
    ``seconds`` in all or ended its process."""
    if not hasattr(os, "fork"):
        stage = [0]
        _stages.append(lambda index: stage.__setitem__(0, index))
        try:
            _raise(_outcome(check, codes, stage))
        finally:
            _stages.pop()
        return
    for stream in (sys.stdout, sys.stderr):  # what is buffered now would be written twice, by both processes
        with contextlib.suppress(Exception):
            stream.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's frames
        _run_child(check, codes, read_end, write_end)
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
    lines = [json.loads(line) for line in received.decode(errors="replace").splitlines() if _is_json(line)]
    stages = [line["stage"] for line in lines if "stage" in line]
    code = codes[stages[-1] if stages else 0]
    if not finished:
        raise ValueError(code.failed(f"did not finish within {seconds:g} s ({TIMEOUT_KEY})"))
    outcomes = [line for line in lines if "stage" not in line]
    _raise(outcomes[-1] if outcomes else {"error": code.failed(_death(wait_status))})


def _run_child(check: Callable[[], None], codes: Sequence[UserCode], read_end: int, write_end: int) -> None:
    """The forked child: runs ``check``, writes its stages and outcome to ``write_end``, and exits (never returns)."""
    status = 1
    try:
        os.close(read_end)
        with open(os.devnull, "wb") as null:  # what the user's code prints here is shown when it runs for real
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
        pipe = os.fdopen(write_end, "wb", buffering=0)
        stage = [0]

        def report(index: int) -> None:
            stage[0] = index
            pipe.write(json.dumps({"stage": index}).encode() + b"\n")

        _stages.append(report)
        try:
            outcome = _outcome(check, codes, stage)
        except BaseException as exc:  # KeyboardInterrupt and the like, raised by the user's code in its process
            failure = codes[stage[0]].failed(f"raised {describe_exception(exc)}")
            outcome = {"error": failure, "details": format_traceback(exc)}
        pipe.write(json.dumps(outcome).encode() + b"\n")
        pipe.close()
        status = 0
    finally:
        os._exit(status)


def _is_json(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:  # a line cut short by the child's death
        return False


def _read_until(fd: int, deadline: float) -> tuple[bytes, bool]:
    """Everything written to ``fd`` until its writer closes it (True) or ``deadline`` passes (False)."""
    chunks: list[bytes] = []
    # poll, not select: select() refuses descriptors from 1024 up (FD_SETSIZE), which a long-lived process (a test
    # session, a sweep driver) reaches.
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), False
        if poller.poll(max(1, int(left * 1000))):
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks), True
            chunks.append(chunk)


def _death(wait_status: int) -> str:
    code = os.waitstatus_to_exitcode(wait_status)
    if code < 0:
        return f"crashed its process (killed by {signal.Signals(-code).name})"
    return f"ended its process (exit status {code}, no result sent)"


def _outcome(check: Callable[[], None], codes: Sequence[UserCode], stage: list[int]) -> dict[str, str]:
    """What ``check`` ended with, as plain data: ``{}`` (fine) or ``{"error": line, "details": traceback}``;
    ``stage[0]``: the index of the code being exercised."""
    try:
        check()
    except SystemExit as exc:
        return {"error": codes[stage[0]].failed(f"called sys.exit({exc.code!r})"), "details": format_traceback(exc)}
    except ValueError as exc:  # the check's own refusal: a whole message
        return {"error": str(exc), "details": getattr(exc, "details", "")}
    except Exception as exc:
        return {"error": codes[stage[0]].failed(f"raised {raised_at(exc)}"), "details": format_traceback(exc)}
    return {}


def _raise(outcome: dict[str, str]) -> None:
    if "error" in outcome:
        raise UserCodeValueError(str(outcome["error"]), str(outcome.get("details", "")))


def env_module(env_id: str) -> str | None:
    """The module an ``env.id`` imports: ``module`` of ``module:Name`` and of ``pettingzoo:module[:function]``;
    None for a registered id (``CartPole-v1``, ``ALE/Pong-v5``) or one that is not an import path."""
    path = env_id.removeprefix(PETTINGZOO_PREFIX)
    if path == env_id and ":" not in env_id:
        return None
    module = path.partition(":")[0]
    return module if MODULE_PATH.fullmatch(module) else None


def check_first_import(env_id: str, seconds: float) -> None:
    """Import the user's module of ``env_id`` (:func:`env_module`; one of the project's folders, not imported yet)
    once in a forked child (:func:`run_bounded`), so that an import that hangs past ``seconds`` or ends or crashes
    its process is refused in one line naming ``env.id`` and :data:`TIMEOUT_KEY`. What the import raises is left to
    the import that follows in this process, whose messages name the missing module or the user's file and line.
    Installed packages are imported without the child: their imports are not the user's code."""
    module = env_module(env_id)
    if module is None or module in sys.modules:
        return
    top = module.partition(".")[0]
    found = importlib.machinery.PathFinder.find_spec(top, searched_folders())  # executes nothing of the user's
    if found is None:
        return
    code = UserCode("env.id", env_id, f"importing its module {module}")
    run_bounded(functools.partial(_import_quietly, module), [code], seconds)


def _import_quietly(module: str) -> None:
    with contextlib.suppress(BaseException):  # raised, or sys.exit: the parent's own import reports it
        importlib.import_module(module)


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
    and the ones before it; one child process (:func:`run_bounded`) tests them all, in order, within ``seconds``."""
    doing = f"taking a test reset and step of {env_id}"
    codes = [UserCode(f"env.wrappers.{index}.wrapper", path, doing) for index, (path, _) in enumerate(wrappers)]
    run_bounded(functools.partial(_reset_and_step, env_id, kwargs, wrappers, codes), codes, seconds)


def _reset_and_step(
    env_id: str, kwargs: dict[str, Any], wrappers: list[tuple[str, dict[str, Any]]], codes: list[UserCode]
) -> None:
    """A test reset and step of ``env_id`` alone, then in each wrapper of ``wrappers`` added in turn; nothing when the
    env itself fails to build, reset or step (what the env does is reported where it is built and stepped, naming
    the env)."""
    try:
        env = gym.make(env_spec(env_id), **kwargs)
        _test_episode_start(env)
    except Exception:
        return
    try:
        for index, (path, wrapper_kwargs) in enumerate(wrappers):
            entering(index)
            try:
                env = UserWrapper(index, path, wrapper_kwargs)(env)
                _test_episode_start(env)
            except RLCoreError as exc:  # UserWrapper's, naming its key already
                raise UserCodeValueError(str(exc), exc.details) from None
            except Exception as exc:  # a ValueError of the user's too: ValueError is what a check refuses with
                message = codes[index].failed(f"raised {raised_at(exc)}")
                raise UserCodeValueError(message, format_traceback(exc)) from None
    finally:
        with contextlib.suppress(Exception):
            env.close()


def _test_episode_start(env: gym.Env) -> None:
    env.reset(seed=0)
    env.action_space.seed(0)
    env.step(env.action_space.sample())
