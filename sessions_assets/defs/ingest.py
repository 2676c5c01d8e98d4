"""The landing assets, one partition per received day: parse its files, keep every line, map its event days."""

from datetime import date

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from sessions_assets.defs.partitions import daily
from sessions_assets.defs.planning import EVENT_DAYS, FINGERPRINT
from sessions_assets.defs.resources import PipelineResource
from sessions_assets.warehouse.delta import is_write_conflict
from sessions_assets.warehouse.ingest import ingest_day


def retry_on_conflict(context: dg.OpExecutionContext, error: Exception) -> None:
    """Re-run the step when Delta refused its commit because another writer won; re-raise anything else."""
    if is_write_conflict(error):
        context.log.warning(f"another run committed first; retrying: {str(error)[:300]}")
        raise dg.RetryRequested(max_retries=5, seconds_to_wait=2.0) from error
    raise error


@dg.multi_asset(
    specs=[
        dg.AssetSpec("raw_events", description="Every accepted line, as parsed, with its payload."),
        dg.AssetSpec("rejected_events", description="Every rejected line, or unread file, with its reason."),
        dg.AssetSpec("partition_map", description="Which event days each received day touched, with counts."),
    ],
    partitions_def=daily,
    group_name="landing",
)
def ingest(context: dg.AssetExecutionContext, spark: LazyPySparkResource, pipeline: PipelineResource):
    """One received day's landing files, replaced whole in each table (the map last)."""
    day = date.fromisoformat(context.partition_key)
    wh = pipeline.warehouse(spark)
    fingerprint = wh.storage.fingerprint(day)
    try:
        done = ingest_day(wh, pipeline.settings, day)
    except Exception as error:  # noqa: BLE001 - conflicts retry, the rest fail the run
        retry_on_conflict(context, error)
    event_days = [d.isoformat() for d in done.event_days]
    files = [{"file": name.rsplit("/", 1)[-1], **counts} for name, counts in sorted(done.files.items())]
    yield dg.MaterializeResult(
        asset_key="raw_events",
        metadata={
            "lines": done.lines,
            "accepted": done.accepted,
            "files": dg.MetadataValue.json(files),
            FINGERPRINT: fingerprint,
        },
    )
    yield dg.MaterializeResult(
        asset_key="rejected_events",
        metadata={"rejected": sum(done.reasons.values()), "reasons": dg.MetadataValue.json(done.reasons)},
    )
    yield dg.MaterializeResult(
        asset_key="partition_map",
        metadata={
            EVENT_DAYS: dg.MetadataValue.json(event_days),
            "events_per_day": dg.MetadataValue.json({d.isoformat(): n for d, n in done.events_per_day.items()}),
        },
    )
