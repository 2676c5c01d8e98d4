"""The one daily partitioning shared by every time-partitioned asset, and the mappings between them.

Partition keys are UTC days (``YYYY-MM-DD``). ``raw_events`` keys are *received* days, ``events`` keys are
*event* (device timestamp) days, ``sessions`` keys are session *start* days, ``daily_snapshot`` keys are
snapshot days: one calendar, so a key means the same day everywhere.
"""

from __future__ import annotations

from datetime import date, timedelta

import dagster as dg

from sessions_assets.config import start_date_from_env

# A device clock may run up to ``max_future_skew`` (1 h) ahead of ``receivedAt``, so an event received late
# today can belong to tomorrow: keep tomorrow's partition in existence (end_offset=2) so it can be built.
FUTURE_PARTITIONS = 2

daily_partitions = dg.DailyPartitionsDefinition(
    start_date=start_date_from_env(), timezone="UTC", end_offset=FUTURE_PARTITIONS, fmt="%Y-%m-%d"
)

# A session lasts at most 24 h, so sessions starting on day D are decided by events of D-1 (an open
# chain may reach into D), D and D+1 (a session that starts on D may end on D+1).
SESSION_NEIGHBOURS = dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=1)

# The snapshot of day D is the snapshot of D-1 carried forward with the sessions of D.
SAME_DAY = dg.TimeWindowPartitionMapping(start_offset=0, end_offset=0)
PREVIOUS_DAY = dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)

# ``events`` of one day may draw on any received day (events arrive up to 400 days late); which ones is
# decided by the recorded partition map, not by the mapping.
ANY_RECEIVED_DAY = dg.AllPartitionMapping()


def days_between(first: date, last: date) -> list[date]:
    """Every day from ``first`` to ``last`` inclusive."""
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def contiguous_ranges(days: set[date] | list[date], max_len: int | None = None) -> list[tuple[date, date]]:
    """Group days into inclusive ``(first, last)`` runs of consecutive days, each at most ``max_len`` long.

    One run per range is what ``BackfillPolicy.single_run()`` does; the cap bounds a run's size (the
    manifest's ``backfill_limit_days`` in seed 000).
    """
    ranges: list[tuple[date, date]] = []
    for d in sorted(set(days)):
        if ranges and d - ranges[-1][1] == timedelta(days=1) and (
            max_len is None or (d - ranges[-1][0]).days < max_len
        ):
            ranges[-1] = (ranges[-1][0], d)
        else:
            ranges.append((d, d))
    return ranges


def partition_bounds() -> tuple[date, date]:
    """The first and last partition day that exist now."""
    keys = daily_partitions.get_partition_keys()
    return date.fromisoformat(keys[0]), date.fromisoformat(keys[-1])
