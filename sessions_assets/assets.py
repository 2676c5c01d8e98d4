"""The asset graph: thin assets that read, call the plain functions, write Delta and report metadata.

``ingest`` (per received day) -> ``raw_events``, ``rejected_events``, ``partition_map``;
``events`` (per event day) <- the received days the map names; ``sessions`` (per start day) <- events of
the day and its neighbours. Which partitions must rebuild after an arrival is decided in ``affected.py``.
"""


import time
from datetime import date

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from sessions_assets import events as ev
from sessions_assets import ingest
from sessions_assets.config import PipelineSettings, max_days_per_run_from_env
from sessions_assets.conflicts import WAREHOUSE_POOL, retry_on_write_conflict
from sessions_assets.partitions import ANY_RECEIVED_DAY, PREVIOUS_DAY, SAME_DAY, SESSION_NEIGHBOURS, daily_partitions
from sessions_assets.session_rebuild import update_sessions
from sessions_assets.snapshot import update_snapshot
from sessions_assets.tables import Warehouse

# One run may process at most this many days (the manifest's backfill limit); larger backfills split.
RANGE_POLICY = dg.BackfillPolicy.multi_run(max_partitions_per_run=max_days_per_run_from_env())


def _window(context: dg.AssetExecutionContext) -> tuple[date, date]:
    """The inclusive day range of the run (one day, or a backfill range run as one job)."""
    keys = context.partition_key_range
    return date.fromisoformat(keys.start), date.fromisoformat(keys.end)


def _warehouse(spark: LazyPySparkResource, settings: PipelineSettings) -> Warehouse:
    return Warehouse(spark.spark_session, settings)


@dg.multi_asset(
    specs=[
        dg.AssetSpec("raw_events", description="Accepted landing lines, as parsed, by received day."),
        dg.AssetSpec("rejected_events", description="Rejected landing lines with their reason."),
        dg.AssetSpec(
            "partition_map",
            description="Which event days each received day touched, with counts: drives the rebuilds.",
        ),
    ],
    partitions_def=daily_partitions,
    group_name="sessions_pipeline",
    pool=WAREHOUSE_POOL,
)
def ingest_received_day(context: dg.AssetExecutionContext, spark: LazyPySparkResource, settings: PipelineSettings):
    """Parse one received day's landing files, split accepted from rejected, record the event days touched."""
    started = time.monotonic()
    received_day = date.fromisoformat(context.partition_key)
    fingerprint = ingest.landing_fingerprint(settings, received_day)
    files = ingest.landing_files(settings, received_day)
    with retry_on_write_conflict(context):
        day = ingest.load_received_day(_warehouse(spark, settings), settings, received_day, files)
    event_days = [d.isoformat() for d in day.affected_event_days]
    context.log.info(f"received {received_day}: {day.accepted} accepted, {day.reasons} rejected, event days {event_days}")
    seconds = round(time.monotonic() - started, 2)
    yield dg.MaterializeResult(
        asset_key="raw_events",
        metadata={
            "lines": day.lines,
            "accepted": day.accepted,
            "files": dg.MetadataValue.json(files),
            "affected_event_days": dg.MetadataValue.json(event_days),
            "written": day.written["raw_events"],
            "seconds": seconds,
            ingest.LANDING_FINGERPRINT: fingerprint,
        },
    )
    yield dg.MaterializeResult(
        asset_key="rejected_events",
        metadata={
            "rejected": sum(day.reasons.values()),
            "reasons": dg.MetadataValue.json(day.reasons),
            "written": day.written["rejected_events"],
        },
    )
    yield dg.MaterializeResult(
        asset_key="partition_map",
        metadata={
            "affected_event_days": dg.MetadataValue.json(event_days),
            "events_per_day": dg.MetadataValue.json({d.isoformat(): n for d, n in day.events_per_day.items()}),
            "written": day.written["partition_map"],
        },
    )


@dg.asset(
    partitions_def=daily_partitions,
    deps=[dg.AssetDep("raw_events", partition_mapping=ANY_RECEIVED_DAY), dg.AssetDep("partition_map", partition_mapping=ANY_RECEIVED_DAY)],
    backfill_policy=RANGE_POLICY,
    group_name="sessions_pipeline",
    pool=WAREHOUSE_POOL,
)
def events(context: dg.AssetExecutionContext, spark: LazyPySparkResource, settings: PipelineSettings) -> dg.MaterializeResult:
    """Accepted events by event day, one row per ``messageId``: absorbs only the loads not absorbed yet."""
    first, last = _window(context)
    with retry_on_write_conflict(context):
        changes = ev.update_events(_warehouse(spark, settings), first, last)
    return dg.MaterializeResult(
        metadata={
            "rows": changes.inserted + changes.replaced,
            "rows_inserted": changes.inserted,
            "copies_replaced_by_earlier": changes.replaced,
            "copies_read": changes.copies_read,
            "loads_absorbed": changes.loads_absorbed,
            "days_rebuilt_whole": dg.MetadataValue.json([d.isoformat() for d in changes.rebuilt_days]),
            "days_compacted": dg.MetadataValue.json([d.isoformat() for d in changes.compacted_days]),
            # Touched days the MERGE read; the rest were ruled out by their message filters.
            "days_opened": changes.days_opened,
            "message_filters_stored": changes.filters_stored,
        }
    )


@dg.asset(
    partitions_def=daily_partitions,
    deps=[dg.AssetDep(events, partition_mapping=SESSION_NEIGHBOURS)],
    backfill_policy=RANGE_POLICY,
    group_name="sessions_pipeline",
    pool=WAREHOUSE_POOL,
)
def sessions(context: dg.AssetExecutionContext, spark: LazyPySparkResource, settings: PipelineSettings) -> dg.MaterializeResult:
    """Sessions by start day, exact under late data: only chains that absorbed events change, extended from
    their stored sessions where the 24 h cap allows, otherwise recomputed from their events."""
    first, last = _window(context)
    with retry_on_write_conflict(context):
        changes = update_sessions(_warehouse(spark, settings), first, last, settings)
    return dg.MaterializeResult(
        metadata={
            "sessions_written": changes.written,
            "sessions_merged_away": changes.merged_away,
            "sessions_moved_between_days": changes.moved,
            "capped_sessions_written": changes.capped,
            "users_recomputed": changes.users - changes.extended,
            "users_extended_without_events": changes.extended,
            "committed": changes.committed,
            "loads_absorbed": changes.loads_absorbed,
            "days_rebuilt_whole": dg.MetadataValue.json([d.isoformat() for d in changes.days_rebuilt_whole]),
            "days_compacted": dg.MetadataValue.json([d.isoformat() for d in changes.days_compacted]),
        }
    )


@dg.asset(
    partitions_def=daily_partitions,
    deps=[
        dg.AssetDep(sessions, partition_mapping=SAME_DAY),
        dg.AssetDep("daily_snapshot", partition_mapping=PREVIOUS_DAY),
    ],
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="sessions_pipeline",
    pool=WAREHOUSE_POOL,
)
def daily_snapshot(
    context: dg.AssetExecutionContext, spark: LazyPySparkResource, settings: PipelineSettings
) -> dg.MaterializeResult:
    """Users on hand per lifecycle state at each day's end, carried from the previous day's balance."""
    first, last = _window(context)
    wh = _warehouse(spark, settings)
    # Always up to the data's horizon as it is now: a run planned before another received day landed
    # must not leave the days after its own horizon computed from an older balance.
    last = max(last, wh.horizon() or last)
    with retry_on_write_conflict(context):
        changes = update_snapshot(wh, first, last, settings)
    return dg.MaterializeResult(
        metadata={
            "days_rewritten": changes.days_rewritten,
            "first_day_rewritten": (changes.first or first).isoformat(),
            "users_walked": changes.users_walked,
            "users_whose_state_changed": changes.users_changed,
            "session_days_from_change_feed": changes.days_from_feed,
            **{f"on_hand_{state}": count for state, count in changes.on_hand_latest.items()},
        }
    )


ALL_ASSETS = [ingest_received_day, events, sessions, daily_snapshot]
