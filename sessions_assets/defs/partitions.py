"""Dagster's partitions: one calendar of UTC days for every asset, and the rules that map days to days.

Partition keys are days (``YYYY-MM-DD``): received days for the landing assets, event days for ``events``,
session start days for ``sessions``, snapshot days for ``daily_snapshot``. One calendar, so a key means the
same day everywhere. (How each table is laid out on disk is the warehouse's business: ``tables.py``.)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import dagster as dg

from sessions_assets.settings import Settings

# A device clock may run up to ``max_future_skew`` ahead of ``receivedAt``, so a day received today can
# hold events of tomorrow: tomorrow's partition must exist (end_offset=2: up to tomorrow).
FUTURE_DAYS = 2
daily = dg.DailyPartitionsDefinition(
    start_date=Settings.from_env().start_date, timezone="UTC", end_offset=FUTURE_DAYS, fmt="%Y-%m-%d"
)

# Sessions starting on day D are decided by events of D-1 (a chain that began the day before), D, and D+1
# (a late event on D can drag the next day's first session back into D).
SESSION_NEIGHBOURS = dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=1)
# Which received days feed an event day is recorded in ``partition_map``, not declared.
ANY_RECEIVED_DAY = dg.AllPartitionMapping()
# The snapshot of day D counts every session up to D; the lineage shows the same day.
SAME_DAY = dg.TimeWindowPartitionMapping(start_offset=0, end_offset=0)

# The tags that make one run cover a range of partitions (what a single-run backfill sets).
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def bounds() -> tuple[date, date]:
    """The first and last partition days that exist now."""
    keys = daily.get_partition_keys()
    return date.fromisoformat(keys[0]), date.fromisoformat(keys[-1])


@dataclass(frozen=True)
class Refresh:
    """What one run of ``events``, ``sessions`` and ``daily_snapshot`` does after some received days.

    The run is for the latest received day (the snapshot's horizon): the partition every refresh changes.
    Each asset also records a materialization of every other day whose rows it changed: the event days the
    received days touched, their sessions' days and neighbours, the snapshot days the late sessions
    corrected. So the UI shows exactly those partitions rematerialized, however far back they are, in one
    run (a partition range would mark every day between, and a run per range would be dozens of runs).
    """

    received_days: tuple[date, ...]
    event_days: tuple[date, ...]
    horizon: date

    @property
    def partition_key(self) -> str:
        return self.horizon.isoformat()

    def describe(self) -> str:
        received = ", ".join(d.isoformat() for d in self.received_days)
        days = self.event_days
        touched = f"{len(days)} event days ({days[0]}..{days[-1]})" if len(days) > 3 else \
            ", ".join(d.isoformat() for d in days) or "no event day"  # fmt: skip
        return f"received {received} touched {touched}; refresh up to {self.horizon}"
