"""Workers that die before delivering anything stop the run after three replacements in a row, with one error."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import PROJECT

from rlcore.common.errors import UserCodeError
from rlcore.params import load_params
from rlcore.stages import train_stage
from rlcore.workers.actors.runners import ActorError
from rlcore.workers.failed_starts import MAX_FAILED_STARTS, FailedStarts


def test_the_third_replacement_in_a_row_without_a_delivery_raises_and_a_delivery_resets_the_count():
    starts = FailedStarts(2, "actor", "sending a trajectory", ActorError)
    assert MAX_FAILED_STARTS == 3
    starts.replaced(0, delivered=False, why="died (exit code 1)")
    starts.replaced(0, delivered=False, why="died (exit code 1)")
    starts.replaced(1, delivered=False, why="died (exit code 1)")  # counted per worker
    starts.delivered(0)
    starts.replaced(0, delivered=False, why="died (exit code 1)")
    starts.replaced(0, delivered=False, why="died (exit code 1)")
    starts.replaced(0, delivered=True, why="died (exit code -9)")  # a worker that delivered started fine
    assert starts.in_a_row == [0, 1]
    starts.replaced(1, delivered=False, why="died (exit code 1)")
    with pytest.raises(ActorError, match=r"^actor 1 died \(exit code 1\) 3 times in a row before sending a trajectory"):
        starts.replaced(1, delivered=False, why="died (exit code 1)")


@pytest.mark.slow
@pytest.mark.serial  # actor processes
def test_an_impala_run_whose_actor_process_cannot_step_its_env_stops_with_the_error_instead_of_respawning(
    tmp_path: Path,
):
    """``failing_env:Failing-v0`` raises on its first step: the actor sends the error back, and the run stops with it
    at once (one line naming the env and the step) rather than after respawning the actor."""
    params = load_params(
        PROJECT / "configs" / "impala-cartpole.yaml",
        [
            "env.id=failing_env:Failing-v0",
            "algo.runner=local",
            "algo.num_actors=1",
            "train.progress_bar=off",
            "train.target_return=null",
        ],
    )
    with pytest.raises(UserCodeError, match=r"^env.id: failing_env:Failing-v0 raised in step 1: RuntimeError: "):
        train_stage(params, tmp_path)
