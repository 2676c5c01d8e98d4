"""How many examples a property test draws: its everyday number times ``SESSIONS_SOAK`` (default 1).

``make soak`` runs the property tests (marked ``property``) with 20 times as many, a nightly budget;
``make test-fast`` with half as many, at least one each."""

from __future__ import annotations

import os

SOAK = float(os.environ.get("SESSIONS_SOAK", "1"))


def examples(everyday: int) -> int:
    return max(1, round(everyday * SOAK))
