"""Dagster's partitions: one calendar of UTC days for every asset of an instance, and the rules that map days to
days.

Partition keys are days (``YYYY-MM-DD``): received days for the landing assets, event days for ``events``,
session start days for ``sessions``, snapshot days for ``daily_snapshot``. One calendar, so a key means the
same day everywhere; each instance has its own, from its ``start_date``. (How each table is laid out on disk is
the warehouse's business: ``tables.py``.)
"""

from __future__ import annotations

from datetime import date

import dagster as dg

# A device clock may run up to ``max_future_skew`` ahead of ``receivedAt``, so a day received today can
# hold events of tomorrow: tomorrow's partition must exist (end_offset=2: up to tomorrow).
FUTURE_DAYS = 2

# Lineage for the UI: sessions starting on day D are mostly decided by events of D-1..D+1. A chain under
# the cap can reach further; which days a refresh rewrites is decided by the data, not by this mapping.
SESSION_NEIGHBOURS = dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=1)
# Which received days feed an event day is recorded in ``partition_map``, not declared.
ANY_RECEIVED_DAY = dg.AllPartitionMapping()
# The snapshot of day D counts every session up to D; the lineage shows the same day.
SAME_DAY = dg.TimeWindowPartitionMapping(start_offset=0, end_offset=0)

# The tags that make one run cover a range of partitions (what a single-run backfill sets).
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def daily(start_date: str) -> dg.DailyPartitionsDefinition:
    """The calendar of an instance: every day from ``start_date`` to tomorrow (UTC)."""
    return dg.DailyPartitionsDefinition(start_date=start_date, timezone="UTC", end_offset=FUTURE_DAYS, fmt="%Y-%m-%d")


def bounds(calendar: dg.DailyPartitionsDefinition) -> tuple[date, date]:
    """The first and last partition days that exist now."""
    return date.fromisoformat(calendar.get_first_partition_key()), date.fromisoformat(calendar.get_last_partition_key())
