"""How scores print in logs and reports: one decimal where that shows three significant digits, more below 10.

A return of 500 prints as ``500.0`` and one of 143.27 as ``143.3``, but a reward of 0.91 would print as ``0.9``
with one decimal (and its interval as ``0.9 to 0.9``): values under 10 keep three significant digits instead.
An interval prints its value, its ends and any number shown beside them (an IQM) with one count of decimals, fitted
to the largest magnitude of the three, so the numbers line up and none of them shows digits the others do not.
"""

from __future__ import annotations

import math

SIGNIFICANT_DIGITS = 3
MAX_DECIMALS = 6


def decimals_for(value: float) -> int:
    """Decimals that show ``value`` with at least :data:`SIGNIFICANT_DIGITS` significant digits, and at least one
    (``500.0``, ``42.5``, ``8.23``, ``0.910``, ``0.00123``); one for zero and for non-finite values."""
    if not math.isfinite(value) or value == 0:
        return 1
    magnitude = math.floor(math.log10(abs(value)))
    return max(1, SIGNIFICANT_DIGITS - 1 - magnitude)


def score(value: float, decimals: int | None = None) -> str:
    """``value`` with :func:`decimals_for` its magnitude (or ``decimals``)."""
    places = decimals_for(value) if decimals is None else decimals
    return f"{value:.{places}f}"


def interval_decimals(value: float, low: float, high: float) -> int:
    """Decimals shared by ``value``, its interval ``[low, high]`` and what prints beside them: :func:`decimals_for`
    the largest finite magnitude of the three (``-0.05`` in ``[-0.3, 0.2]`` takes 0.3's three decimals, not 0.05's
    four), and more, up to :data:`MAX_DECIMALS`, while two of the three that differ would print the same — an
    interval never reads as a point it is not (``499.97`` in ``[499.96, 499.98]`` takes two, not ``500.0`` thrice)."""
    numbers = (value, low, high)
    largest = max((abs(x) for x in numbers if math.isfinite(x)), default=0.0)
    places = decimals_for(largest)

    def collide(places: int) -> bool:
        shown = [score(x, places) for x in numbers]
        return any(shown[i] == shown[j] and numbers[i] != numbers[j] for i in range(3) for j in range(i + 1, 3))

    while places < MAX_DECIMALS and collide(places):
        places += 1
    return places


def score_with_interval(value: float, low: float, high: float) -> tuple[str, str, str]:
    """``value`` and its interval's ends with :func:`interval_decimals`: ``("0.910", "0.905", "0.915")``,
    ``("500.0", "497.9", "500.0")``, ``("-0.050", "-0.300", "0.200")``."""
    places = interval_decimals(value, low, high)
    return score(value, places), score(low, places), score(high, places)
