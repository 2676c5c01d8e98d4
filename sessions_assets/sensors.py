"""Sensors and the schedule that keep a deployed instance current with no one clicking.

- ``landing_sensor``: a received-day folder is new or gained files -> ``raw_events`` for that day.
- ``late_data_sensor``: each new ``partition_map`` materialization (from the landing sensor, the daily
  schedule, a UI backfill or ``sessions-assets run``) -> one asset backfill of exactly the partitions
  that received day affected (``affected.plan_rebuild``), in dependency order.
- ``daily_ingest_schedule``: shortly after midnight UTC, yesterday's received day, in its final form.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import dagster as dg
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
from dagster._core.definitions.events import AssetKeyPartitionKey

from sessions_assets import ingest
from sessions_assets.affected import RebuildPlan, plan_rebuild
from sessions_assets.config import PipelineSettings
from sessions_assets.partitions import daily_partitions, days_between, partition_bounds

PARTITION_MAP = dg.AssetKey("partition_map")
RECEIVED_DAYS_TAG = "sessions/received_days"

ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=dg.AssetSelection.assets("raw_events").required_multi_asset_neighbors(),
    partitions_def=daily_partitions,
)


@dg.sensor(job=ingest_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def landing_sensor(context: dg.SensorEvaluationContext, settings: PipelineSettings) -> dg.SensorResult:
    """Request ``raw_events`` for received days whose landing files are new or changed (cursor: fingerprints)."""
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    first, last = partition_bounds()
    requests = []
    for received_day in ingest.landing_days(settings):
        fingerprint = ingest.landing_fingerprint(settings, received_day)
        day = received_day.isoformat()
        if seen.get(day) != fingerprint and first <= received_day <= last:
            requests.append(dg.RunRequest(partition_key=day, run_key=f"{day}:{fingerprint}"))
            seen[day] = fingerprint
    if requests:
        context.log.info(f"landing changed for {[r.partition_key for r in requests]}")
    return dg.SensorResult(run_requests=requests, cursor=json.dumps(seen, sort_keys=True))


def touched_by(records: list[dg.EventLogRecord]) -> dict[date, set[date]]:
    """Received day -> event days, as each ``partition_map`` materialization recorded in its metadata."""
    touched: dict[date, set[date]] = {}
    for record in records:
        materialization = record.asset_materialization
        days = materialization.metadata["affected_event_days"].value
        touched.setdefault(date.fromisoformat(materialization.partition), set()).update(map(date.fromisoformat, days))
    return touched


def horizon(instance: dg.DagsterInstance) -> date | None:
    """The data's horizon: the latest received day with a ``partition_map`` materialization."""
    days = instance.get_materialized_partitions(PARTITION_MAP)
    return max(map(date.fromisoformat, days)) if days else None


def plan_for(instance: dg.DagsterInstance, records: list[dg.EventLogRecord], with_snapshot: bool) -> RebuildPlan:
    """What the received days of these ``partition_map`` materializations require: the one decision
    shared by the late-data sensor and ``sessions-assets run``."""
    return plan_rebuild(
        touched_by(records), horizon(instance), partition_bounds(), with_snapshot=with_snapshot
    )


def partition_map_records(instance: dg.DagsterInstance, after: int | None = None, partition: str | None = None):
    """``partition_map`` materializations after a storage id (oldest first), or the latest of one day."""
    if partition is not None:
        return list(
            instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=PARTITION_MAP, asset_partitions=[partition]), limit=1
            ).records
        )
    return list(
        instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=PARTITION_MAP, after_storage_id=after), limit=100, ascending=True
        ).records
    )


def backfill_request(plan: RebuildPlan, asset_graph) -> dg.RunRequest:
    """One asset backfill of the plan's partitions; Dagster orders it by the declared dependencies.

    ``RunRequest.for_asset_graph_subset`` is not a stable API yet, so it is used here only. The fallback,
    should it change, is one ``RunRequest`` per asset and range with the partition-range tags.
    """
    wanted = set()
    for asset, ranges in (("events", plan.events), ("sessions", plan.sessions), ("daily_snapshot", plan.snapshot)):
        key = dg.AssetKey(asset)
        if not asset_graph.has(key):
            continue
        for first, last in ranges:
            wanted |= {AssetKeyPartitionKey(key, d.isoformat()) for d in days_between(first, last)}
    received = ",".join(d.isoformat() for d in plan.received_days)
    return dg.RunRequest.for_asset_graph_subset(
        AssetGraphSubset.from_asset_partition_set(wanted, asset_graph), tags={RECEIVED_DAYS_TAG: received}
    )


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    asset_selection=dg.AssetSelection.assets("events", "sessions", "daily_snapshot"),
)
def late_data_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
    """The dynamic partition mapping: received days -> the partitions their events touched, and neighbours."""
    records = partition_map_records(context.instance, after=int(context.cursor) if context.cursor else None)
    if not records:
        return dg.SkipReason("no received day was ingested since the last tick")
    asset_graph = context.repository_def.asset_graph
    plan = plan_for(context.instance, records, with_snapshot=asset_graph.has(dg.AssetKey("daily_snapshot")))
    context.log.info(plan.describe())
    cursor = str(records[-1].storage_id)
    if plan.empty:
        return dg.SensorResult(skip_reason=f"{plan.describe()}: nothing to rebuild", cursor=cursor)
    return dg.SensorResult(run_requests=[backfill_request(plan, asset_graph)], cursor=cursor)


@dg.schedule(
    job=ingest_job,
    cron_schedule="15 0 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
def daily_ingest_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """Ingest yesterday's received day once it is complete; the late-data sensor does the rest."""
    now = context.scheduled_execution_time or datetime.now(timezone.utc)
    yesterday = (now.astimezone(timezone.utc) - timedelta(days=1)).date().isoformat()
    return dg.RunRequest(partition_key=yesterday, run_key=f"daily:{yesterday}")
