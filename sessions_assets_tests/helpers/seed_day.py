"""The seed's user (``004_*``): a day of three sessions on 2019-10-23 and the days around it, as the oracle's
tests draw them, and the seed's way of drawing sessions (start, end, number of events)."""

from __future__ import annotations

import itertools
from datetime import datetime

from sessions_assets_tests.helpers.cases import T

_ids = itertools.count()


def ev(at: str | datetime, user: str = "jml") -> dict:
    """One accepted event of ``user`` at ``at`` (UTC), with a fresh message id."""
    moment = T(at) if isinstance(at, str) else at
    return {"message_id": f"m-{next(_ids):05d}", "user_key": user, "timestamp": moment}


def burst(start: str, end: str, n: int, user: str = "jml") -> list[dict]:
    """``n`` events spread evenly from ``start`` to ``end`` (both included)."""
    first, last = T(start), T(end)
    return [ev(first + (last - first) * i / (n - 1), user) for i in range(n)]


def table(sessions: list[dict]) -> list[tuple]:
    """Sessions as the seed draws them: (start, end, num_events), plus the partition and the cap flag."""
    return sorted(
        (
            s["session_start"].strftime("%Y-%m-%d %H:%M"),
            s["session_end"].strftime("%Y-%m-%d %H:%M"),
            s["num_events"],
            s["session_date"].isoformat(),
            s["ended_by_cap"],
        )
        for s in sessions
    )


# The seed's user on 2019-10-23: sessions 09:21-09:30 (10 events), 10:05-10:23 (15), 13:25-14:10 (20).
SEED_DAY = (
    burst("2019-10-23 09:21", "2019-10-23 09:30", 10)
    + burst("2019-10-23 10:05", "2019-10-23 10:23", 15)
    + burst("2019-10-23 13:25", "2019-10-23 14:10", 20)
)
DAY_BEFORE = burst("2019-10-22 23:50", "2019-10-22 23:59", 4)
DAY_AFTER = burst("2019-10-24 00:01", "2019-10-24 00:20", 5)

S1 = ("2019-10-23 09:21", "2019-10-23 09:30", 10, "2019-10-23", False)
S2 = ("2019-10-23 10:05", "2019-10-23 10:23", 15, "2019-10-23", False)
S3 = ("2019-10-23 13:25", "2019-10-23 14:10", 20, "2019-10-23", False)
BEFORE = ("2019-10-22 23:50", "2019-10-22 23:59", 4, "2019-10-22", False)
AFTER = ("2019-10-24 00:01", "2019-10-24 00:20", 5, "2019-10-24", False)
