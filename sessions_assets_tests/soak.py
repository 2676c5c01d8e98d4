"""How many examples a property test draws: a few in CI, many more in a soak run (``make soak``).

The suite must stay within CI's budget, so each property test draws only a handful of examples a run, and
a bug that needs a rare shape of input can wait many runs to show (the snapshot's "days between" bug of
session 14 did). ``SESSIONS_SOAK=N`` multiplies every property test's examples by ``N``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from hypothesis import settings


def examples(in_ci: int) -> int:
    """``in_ci`` examples, times ``SESSIONS_SOAK`` (default 1)."""
    return in_ci * max(1, int(os.environ.get("SESSIONS_SOAK", "1")))


def property_test(in_ci: int, **kwargs) -> Callable:
    """Hypothesis settings for a property test (``examples(in_ci)``, no deadline: a first Spark query takes
    seconds), and the ``property`` mark that ``make soak`` selects."""

    def decorate(test: Callable) -> Callable:
        return pytest.mark.property(settings(max_examples=examples(in_ci), deadline=None, **kwargs)(test))

    return decorate
