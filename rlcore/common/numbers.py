"""How scores print in logs and reports: one decimal where that shows three significant digits, more below 10.

A return of 500 prints as ``500.0`` and one of 143.27 as ``143.3``, but a reward of 0.91 would print as ``0.9``
with one decimal (and its interval as ``0.9 to 0.9``): values under 10 keep three significant digits instead.
An interval prints with its value's decimals, so the three numbers line up.
"""

from __future__ import annotations

import math

SIGNIFICANT_DIGITS = 3


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


MAX_DECIMALS = 6


def score_with_interval(value: float, low: float, high: float) -> tuple[str, str, str]:
    """``value`` and its interval's ends with the same decimals: :func:`decimals_for` ``value``, and more (up to
    :data:`MAX_DECIMALS`) while two of the three numbers that differ would print the same — an interval never
    reads as a point it is not: ``("0.910", "0.905", "0.915")``, ``("500.0", "497.9", "500.0")``."""
    places = decimals_for(value)
    numbers = (value, low, high)

    def collide(places: int) -> bool:
        shown = [score(x, places) for x in numbers]
        return any(shown[i] == shown[j] and numbers[i] != numbers[j] for i in range(3) for j in range(i + 1, 3))

    while places < MAX_DECIMALS and collide(places):
        places += 1
    return score(value, places), score(low, places), score(high, places)
