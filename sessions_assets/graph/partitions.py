"""Dagster's partitions: two calendars per instance, and the rules that map days to days.

Partition keys are days (``YYYY-MM-DD``). The ingest assets are partitioned by **received day**, the collector's
UTC day that names its folders; ``events``, ``sessions``, ``users`` and ``daily_snapshot`` by **local day**, a day of
the instance's ``time_zone`` (event, session start and snapshot days), so the UI's status and backfills are by the
business's days. In UTC the two are the same days. East of UTC the first hours of the local ``start_date`` are
received the day before, so the received calendar starts on the UTC day holding the local start's first instant.
Each instance has its own pair, from its settings. (How each table is laid out on disk is the warehouse's
business: ``tables.py``.)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import dagster as dg

from sessions_assets.engine import days
from sessions_assets.settings import Settings

# A device clock may run up to ``max_future_skew`` ahead of ``receivedAt``, so a day received today can
# hold events of tomorrow: tomorrow's partition must exist (end_offset=2: up to tomorrow).
FUTURE_DAYS = 2

# Lineage for the UI: sessions starting on day D are mostly decided by events of D-1..D+1. A chain under
# the cap can reach further; which days a refresh rewrites is decided by the data, not by this mapping.
SESSION_NEIGHBOURS = dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=1)
# Which received days feed an event day is recorded in ``partition_map``, not declared (and the two calendars'
# days are not the same days).
ANY_RECEIVED_DAY = dg.AllPartitionMapping()
# The snapshot of day D counts every session up to D; the lineage shows the same day.
SAME_DAY = dg.TimeWindowPartitionMapping(start_offset=0, end_offset=0)

# The tags that make one run cover a range of partitions (what a single-run backfill sets).
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


@dataclass(frozen=True)
class Calendars:
    """An instance's two calendars: received days (the ingest assets) and local days (the derived assets)."""

    received: dg.DailyPartitionsDefinition
    local: dg.DailyPartitionsDefinition
    time_zone: str

    def run_day(self, received_day: date) -> date:
        """The local day a refresh after ``received_day`` is recorded under: the last local day that has ended by
        its end (the snapshot's horizon then), within the local calendar."""
        first, last = bounds(self.local)
        return min(max(days.horizon(received_day, self.time_zone), first), last)


def calendars(settings: Settings) -> Calendars:
    """Every received day from the one holding the local ``start_date``'s first instant, and every local day from
    ``start_date``, each to tomorrow (its own tomorrow)."""
    start = days.first_received_day(settings.first_day, settings.time_zone)
    received = dg.DailyPartitionsDefinition(
        start_date=start.isoformat(), timezone="UTC", end_offset=FUTURE_DAYS, fmt="%Y-%m-%d"
    )
    local = dg.DailyPartitionsDefinition(
        start_date=settings.start_date, timezone=settings.time_zone, end_offset=FUTURE_DAYS, fmt="%Y-%m-%d"
    )
    return Calendars(received, local, settings.time_zone)


def bounds(calendar: dg.DailyPartitionsDefinition) -> tuple[date, date]:
    """The first and last partition days that exist now."""
    return date.fromisoformat(calendar.get_first_partition_key()), date.fromisoformat(calendar.get_last_partition_key())
