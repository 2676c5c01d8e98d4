"""The sensors that keep a deployed instance current with no one clicking, from the one plan (``planning.py``).

- ``landing_sensor``: a received-day folder is new or its files changed -> ingest that day.
- ``late_data_sensor``: a received day was ingested (by the landing sensor, a UI backfill or
  ``sessions-assets run``) -> one run of ``events``, ``sessions`` and ``daily_snapshot``. It is
  launched for one partition, the latest received day, and records a materialization of every day whose
  rows it changed (the event days the received days touched, the session days their late events reached):
  a run over a wide partition range would cost the instance an event per partition, changed or not.
"""

import json

import dagster as dg

from sessions_assets.defs import jobs, planning
from sessions_assets.defs.resources import PipelineResource
from sessions_assets.warehouse.storage import Storage

INTERVAL_SECONDS = 10


@dg.sensor(
    job=jobs.ingest_job, minimum_interval_seconds=INTERVAL_SECONDS, default_status=dg.DefaultSensorStatus.RUNNING
)
def landing_sensor(context: dg.SensorEvaluationContext, pipeline: PipelineResource) -> dg.SensorResult:
    """Ingest each received day whose files differ from what its last ingest read. The cursor remembers the
    folders already reported as not being received days, so each is reported once."""
    landing = planning.landing(context.instance, Storage(pipeline.data_root))
    reported = set(json.loads(context.cursor or "[]"))
    for folder, message in zip(landing.ignored, landing.describe_ignored(), strict=True):
        if folder.name not in reported:
            context.log.warning(f"landing folder {message}")
    requests = [dg.RunRequest(partition_key=day.isoformat(), run_key=f"{day}:{fingerprint}")
                for day, fingerprint in landing.due]  # fmt: skip
    return dg.SensorResult(
        run_requests=requests, cursor=json.dumps(sorted(reported | {f.name for f in landing.ignored}))
    )


@dg.sensor(
    job=jobs.refresh_job, minimum_interval_seconds=INTERVAL_SECONDS, default_status=dg.DefaultSensorStatus.RUNNING
)
def late_data_sensor(context: dg.SensorEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    """The received days ingested since the last refresh -> one refresh of what they touched."""
    due = planning.refresh_due(context.instance)
    if due is None:
        return dg.SkipReason("no received day was ingested since the last refresh")
    context.log.info(due.refresh.describe())
    return dg.RunRequest(run_key=due.run_key, partition_key=due.refresh.partition_key, tags=due.tags)
