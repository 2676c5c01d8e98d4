"""The "dynamic partition mapping": from received days to the partitions that must rebuild.

One implementation, used by the late-data sensor and by ``sessions-assets run`` alike. A received day
records, in ``partition_map``, the event days E it touched; then
- ``events`` absorbs the new loads of E,
- ``sessions`` recomputes the chains those loads touch, on E and its neighbours (E-1..E+1, the declared
  ``SESSION_NEIGHBOURS``),
- ``daily_snapshot`` rebuilds from the earliest affected session day to the data's horizon (the latest
  received day), as one range: each day is carried from the one before.

Each asset is requested as one span, from the first to the last of its days: ``events`` and ``sessions``
do work only for the loads they have not absorbed (``ledger.py``), so the days in between cost nothing,
while each extra Dagster run costs seconds (a process, a Spark session under the daemon). A months-late
tail scatters one received day over most event days; asking for them as contiguous pieces would mean
dozens of runs per day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from sessions_assets.partitions import contiguous_ranges

DayRange = tuple[date, date]


@dataclass(frozen=True)
class RebuildPlan:
    received_days: tuple[date, ...]
    event_days: tuple[date, ...]
    events: tuple[DayRange, ...] = ()
    sessions: tuple[DayRange, ...] = ()
    snapshot: tuple[DayRange, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.events or self.sessions or self.snapshot)

    def describe(self) -> str:
        """The plan in words, for sensor ticks and the ``run`` command."""
        fmt = lambda rs: ", ".join(a.isoformat() if a == b else f"{a}..{b}" for a, b in rs) or "-"  # noqa: E731
        received = ", ".join(d.isoformat() for d in self.received_days)
        return (
            f"received {received} touched event days {fmt(contiguous_ranges(self.event_days))}: "
            f"events {fmt(self.events)}; sessions {fmt(self.sessions)}; daily_snapshot {fmt(self.snapshot)}"
        )


def neighbour_days(event_days, lo: date, hi: date) -> set[date]:
    """The ``sessions`` days an arrival on ``event_days`` affects: each day and its neighbours, within lo..hi."""
    one = timedelta(days=1)
    return {d + k * one for d in event_days for k in (-1, 0, 1) if lo <= d + k * one <= hi}


def _span(days) -> tuple[DayRange, ...]:
    return ((min(days), max(days)),) if days else ()


def plan_rebuild(
    touched: dict[date, set[date]],
    horizon: date,
    partitions: tuple[date, date],
    with_snapshot: bool = True,
) -> RebuildPlan:
    """Partitions to rebuild after the received days in ``touched`` (received day -> event days).

    ``horizon`` is the latest received day (the snapshot is kept up to it); ``partitions`` the first and
    last partition that exist. Each asset gets one span (under the daemon, the assets' backfill policy
    still splits a span into runs of at most ``SESSIONS_MAX_DAYS_PER_RUN`` days).
    """
    lo, hi = partitions
    event_days = sorted({d for days in touched.values() for d in days if lo <= d <= hi})
    session_days = neighbour_days(event_days, lo, hi)
    # The snapshot is corrected from the earliest affected day and always reaches the horizon.
    snapshot = ((min(session_days | {horizon}), horizon),) if with_snapshot and lo <= horizon <= hi else ()
    return RebuildPlan(
        received_days=tuple(sorted(touched)),
        event_days=tuple(event_days),
        events=_span(event_days),
        sessions=_span(session_days),
        snapshot=snapshot,
    )
