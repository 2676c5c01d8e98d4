"""What is due, read from the Dagster instance: one plan shared by the sensors, ``run`` and ``status``.

- A received day is due for ingest when its landing folder's fingerprint differs from the one its latest
  ingest recorded (``raw_events`` metadata).
- A refresh of ``events``, ``sessions`` and ``daily_snapshot`` is due when ``partition_map`` was
  materialized after the last refresh run that succeeded; the run covers the event days those ingests
  touched (``partitions.Refresh``) and records the last of them in its tags.

What each table has absorbed is not decided here: the warehouse keeps that with the tables
(``warehouse/ledger.py``) and a refresh applies whatever its inputs hold. This plan only decides when to
run and which partitions a run materializes. Requests carry run keys, so a day or a refresh already
requested is not requested again while it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import dagster as dg

from sessions_assets.defs.partitions import Refresh, bounds
from sessions_assets.warehouse.storage import LandingFolder, Storage

RAW_EVENTS, PARTITION_MAP = dg.AssetKey("raw_events"), dg.AssetKey("partition_map")
FINGERPRINT, EVENT_DAYS = "landing_fingerprint", "event_days"
REFRESH_JOB = "refresh_job"
MAPS_THROUGH = "sessions/partition_maps_through"  # run tag: the last partition_map event a refresh covers
RECEIVED_DAYS = "sessions/received_days"
PAGE = 1000


def _records(instance: dg.DagsterInstance, records_filter: dg.AssetRecordsFilter) -> list[dg.EventLogRecord]:
    records, cursor = [], None
    while True:
        page = instance.fetch_materializations(records_filter, limit=PAGE, cursor=cursor, ascending=True)
        records += page.records
        if not page.has_more:
            return records
        cursor = page.cursor


def ingested_fingerprints(instance: dg.DagsterInstance) -> dict[date, str]:
    """Received day -> the landing fingerprint its latest ingest read."""
    latest = {}
    for record in _records(instance, dg.AssetRecordsFilter(asset_key=RAW_EVENTS)):
        value = record.asset_materialization.metadata.get(FINGERPRINT)
        latest[date.fromisoformat(record.asset_materialization.partition)] = value.value if value else None
    return latest


@dataclass(frozen=True)
class Landing:
    """The landing zone against what was ingested."""

    due: list[tuple[date, str]]  # (received day, fingerprint) to ingest, oldest first
    ignored: list[LandingFolder]  # folders that are not a received day the partitions hold

    def describe_ignored(self) -> list[str]:
        return [f"{f.name}: {f.problem}, skipped" for f in self.ignored]


def landing(instance: dg.DagsterInstance, storage: Storage) -> Landing:
    lo, hi = bounds()
    seen = ingested_fingerprints(instance)
    due, ignored = [], []
    for folder in storage.landing_folders():
        if folder.day is None:
            ignored.append(folder)
        elif not lo <= folder.day <= hi:
            ignored.append(LandingFolder(folder.uri, folder.name, folder.day,
                                         f"outside the partitions {lo}..{hi} (SESSIONS_START_DATE)"))  # fmt: skip
        else:
            fingerprint = storage.fingerprint(folder.day)
            if seen.get(folder.day) != fingerprint:
                due.append((folder.day, fingerprint))
    return Landing(due, ignored)


@dataclass(frozen=True)
class RefreshDue:
    refresh: Refresh
    maps_through: int  # the storage id of the last partition_map materialization it covers

    @property
    def tags(self) -> dict[str, str]:
        received = ",".join(d.isoformat() for d in self.refresh.received_days)
        return {MAPS_THROUGH: str(self.maps_through), RECEIVED_DAYS: received}

    @property
    def run_key(self) -> str:
        return f"refresh:{self.maps_through}"


def last_refreshed(instance: dg.DagsterInstance) -> int:
    """The last partition_map event that a successful refresh covered (-1: none)."""
    runs = instance.get_runs(
        filters=dg.RunsFilter(job_name=REFRESH_JOB, statuses=[dg.DagsterRunStatus.SUCCESS]), limit=100
    )
    return max((int(r.tags[MAPS_THROUGH]) for r in runs if MAPS_THROUGH in r.tags), default=-1)


def refresh_due(instance: dg.DagsterInstance) -> RefreshDue | None:
    """The refresh the ingests since the last successful refresh call for, if any."""
    records = _records(
        instance, dg.AssetRecordsFilter(asset_key=PARTITION_MAP, after_storage_id=last_refreshed(instance))
    )
    if not records:
        return None
    touched: dict[date, set[date]] = {}
    for record in records:
        materialization = record.asset_materialization
        days = materialization.metadata[EVENT_DAYS].value if EVENT_DAYS in materialization.metadata else []
        touched.setdefault(date.fromisoformat(materialization.partition), set()).update(map(date.fromisoformat, days))
    horizon = max(date.fromisoformat(p) for p in instance.get_materialized_partitions(PARTITION_MAP))
    event_days = tuple(sorted({d for days in touched.values() for d in days}))
    return RefreshDue(Refresh(tuple(sorted(touched)), event_days, horizon), records[-1].storage_id)
