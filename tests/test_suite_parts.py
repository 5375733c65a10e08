"""The test suite's own parts: which files ``make test`` collects for its ``serial`` and ``server`` parts."""

from __future__ import annotations

import pytest
from conftest import marks_the_makefile_misses

pytest_plugins = ["pytester"]


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """An empty test folder knowing the project's marks; no installed plugins (each would cost its imports again)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeini("[pytest]\nmarkers =\n    serial: alone\n    server: servers\n")
    return pytester


def test_a_serial_mark_applied_from_another_module_is_reported_with_its_file_and_test(suite: pytest.Pytester) -> None:
    suite.makepyfile(marks="import pytest\n\nALONE = pytest.mark.serial\n")
    items = suite.getitems("from marks import ALONE\n\n\n@ALONE\ndef test_apart():\n    pass\n")
    assert [line.split(": ", 1)[1] for line in marks_the_makefile_misses(items)] == ["test_apart is serial"]


def test_marks_written_in_the_test_file_are_found(suite: pytest.Pytester) -> None:
    items = suite.getitems(
        "import pytest\n\npytestmark = pytest.mark.server\n\n\n@pytest.mark.serial\ndef test_apart():\n    pass\n"
    )
    assert marks_the_makefile_misses(items) == []
