"""SIGKILL at random moments in the runs with a replay buffer, DQN (configs/dqn-cartpole.yaml) and SAC
(configs/sac-pendulum.yaml), under ``rlcore train`` and under ``dvc repro``: nothing is lost (issue 12).

The other half of test_kills.py's kills (its docstring says what each kill and re-run must leave; the plan, the
reference runs and the checks are in kill_support.py), in a module of its own so that the two halves run on two
pytest-xdist workers side by side. Besides the checks of every kill: the buffer of the latest checkpoint, and only
it; a re-run that resumed from a checkpoint restored N > 0 transitions from its buffer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .kill_support import KILLS, Kill, Workspace, sigkill_and_rerun

pytestmark = pytest.mark.slow

ALGOS_HERE = ("dqn", "sac")
CASES = [k for k in KILLS if k.algo in ALGOS_HERE]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("kills-replay"))


@pytest.mark.parametrize("kill_case", CASES, ids=[k.id for k in CASES])
def test_a_sigkill_loses_nothing_and_the_rerun_completes(kill_case: Kill, workspace: Workspace, tmp_path: Path) -> None:
    sigkill_and_rerun(kill_case, workspace, tmp_path)


def test_the_two_modules_try_every_kill_of_the_plan() -> None:
    from .test_kills import CASES as OTHERS

    assert sorted(k.index for k in [*CASES, *OTHERS]) == list(range(len(KILLS)))
