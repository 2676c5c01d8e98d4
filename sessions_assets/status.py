"""Where the pipeline stands before a run: Snowplow's manifest questions, answered from the Dagster instance.

- **first run**: nothing was ever ingested;
- **new asset added**: an asset of the graph has never been materialized while its inputs have
  (its whole history is due, e.g. ``daily_snapshot`` added to a running deployment);
- **out of sync**: a received day was ingested but the partitions it affected were not all rebuilt
  after it (a run that crashed or was cancelled half-way): the next run finishes that first;
- **standard**: every recorded received day is fully propagated; only new landing files are due.

The test is by event-log order: a partition is behind a received day when its latest materialization is
older than that day's latest ``partition_map`` materialization: the same instance the UI shows. (What
each table has absorbed, load by load, is the warehouse's own ledger, ``ledger.py``; a run that is
planned from here and finds nothing pending there does almost nothing.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

import dagster as dg
from dagster._core.events import DagsterEventType

from sessions_assets.affected import RebuildPlan, neighbour_days, plan_rebuild
from sessions_assets.config import PipelineSettings
from sessions_assets.partitions import days_between, partition_bounds
from sessions_assets.runner import pending_received_days
from sessions_assets.sensors import PARTITION_MAP, horizon, touched_by

REBUILT = ("events", "sessions", "daily_snapshot")


@dataclass
class PipelineStatus:
    state: str
    to_ingest: list[date] = field(default_factory=list)
    # Partitions that runs already recorded as due but that no run completed: done before new days.
    catch_up: RebuildPlan | None = None
    never_materialized: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"state: {self.state}"]
        if self.never_materialized:
            lines.append(f"never materialized: {', '.join(self.never_materialized)}")
        if self.catch_up is not None and not self.catch_up.empty:
            lines.append(f"unfinished: {self.catch_up.describe()}")
        days = ", ".join(d.isoformat() for d in self.to_ingest) or "-"
        lines.append(f"received days to ingest ({len(self.to_ingest)}): {days}")
        lines.append("event days: known once ingested (each received day records them in partition_map)")
        return "\n".join(lines)


def latest_materializations(instance: dg.DagsterInstance, asset: str) -> dict[date, int]:
    """Partition day -> storage id of its latest materialization (event-log order)."""
    latest = instance.event_log_storage.get_latest_storage_id_by_partition(
        dg.AssetKey(asset), DagsterEventType.ASSET_MATERIALIZATION
    )
    return {date.fromisoformat(p): storage_id for p, storage_id in latest.items()}


def _latest_partition_maps(instance: dg.DagsterInstance) -> list[dg.EventLogRecord]:
    """The latest ``partition_map`` materialization of every received day."""
    latest: dict[str, dg.EventLogRecord] = {}
    cursor = None
    while True:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=PARTITION_MAP), limit=1000, cursor=cursor, ascending=True
        )
        for record in page.records:
            latest[record.asset_materialization.partition] = record
        if not page.has_more:
            return sorted(latest.values(), key=lambda r: r.storage_id)
        cursor = page.cursor


def unfinished(instance: dg.DagsterInstance, assets: set[str]) -> dict[date, set[date]]:
    """Received day -> event days, for the received days whose rebuild no run completed."""
    lo, hi = partition_bounds()
    records = _latest_partition_maps(instance)
    latest = {asset: latest_materializations(instance, asset) for asset in REBUILT if asset in assets}
    behind: dict[date, set[date]] = {}
    for record in records:
        (received, event_days), = touched_by([record]).items()
        sessions = neighbour_days(event_days, lo, hi)
        due = {"events": event_days, "sessions": sessions,
               "daily_snapshot": set(days_between(min(sessions | {received}), received))}  # fmt: skip
        for asset, stored in latest.items():
            if any(stored.get(d, -1) < record.storage_id for d in due[asset] if lo <= d <= hi):
                behind[received] = event_days
                break
    return behind


def pipeline_status(instance: dg.DagsterInstance, settings: PipelineSettings, assets: set[str]) -> PipelineStatus:
    to_ingest = pending_received_days(instance, settings)
    latest_day = horizon(instance)
    if latest_day is None:
        return PipelineStatus("first run", to_ingest)
    never = [a for a in REBUILT if a in assets and not instance.get_materialized_partitions(dg.AssetKey(a))]
    behind = unfinished(instance, assets)
    plan = plan_rebuild(behind, latest_day, partition_bounds(), with_snapshot="daily_snapshot" in assets)
    state = "new asset added" if never else "out of sync" if behind else "standard"
    return PipelineStatus(state, to_ingest, plan, never)
