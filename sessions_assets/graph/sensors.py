"""The sensors that keep a deployed instance current with no one clicking, from the one plan (``planning.py``).

- ``landing_sensor``: received-day folders new or changed since their last ingest -> one ``process_job``
  run per range of consecutive days (usually one): it ingests them and refreshes what they touched, so a
  day costs one Spark start. The run names its received days in a tag and is recorded under local days. Days in flight wait; days whose runs failed are requested again after a
  backoff (the daemon has already retried each failed run; ``dagster.yaml``). A tick lists the files of the
  recent, new and still-due days only, and every day's at the slower cadence of its full listing (``cursor.py``),
  so its cost does not grow with the days landed.
- ``late_data_sensor``: the derived tables are behind their inputs and nothing is ingesting (a UI backfill
  of the ingest assets, an ingest-only run, a refresh that failed) -> one ``refresh_job`` run, for one
  local day, the snapshot's horizon after the latest received day; it records a materialization of every other
  day whose rows changed.

Both wait, saying why, while received days were ingested in another time zone than the instance's
(``ledger.ingested_elsewhere``): a changed zone is applied by ``sessions-assets reingest``.
"""

import time

import dagster as dg

from sessions_assets.graph import planning
from sessions_assets.graph.cursor import LandingCursor
from sessions_assets.graph.names import Names
from sessions_assets.graph.partitions import Calendars, bounds
from sessions_assets.graph.resources import pipeline_of
from sessions_assets.warehouse import ledger, pending
from sessions_assets.warehouse.storage import LayoutError

INTERVAL_SECONDS = 10


def _retrying(attempts: planning.Attempts, now: float) -> str:
    return f"{attempts.failures} failed run(s), next try in {attempts.waiting(now):.0f} s: {attempts.error}"


def local_partitions(calendars: Calendars, first, last) -> dict:
    """How a run is recorded under the local days of received days ``first..last``: one partition, or a range."""
    lo, hi = calendars.run_day(first), calendars.run_day(last)
    return {"partition_key": hi.isoformat()} if lo == hi else {"tags": planning.range_tags(lo, hi)}


def definitions(names: Names, calendars: Calendars) -> dg.Definitions:
    """The two sensors of an instance, on its jobs, reading its settings resource from the context (``_called``:
    what a direct call, a test's, passes too)."""

    @dg.sensor(
        name=names.of("landing_sensor"),
        job_name=names.of("process_job"),
        minimum_interval_seconds=INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        required_resource_keys={names.pipeline},
    )
    def landing_sensor(context: dg.SensorEvaluationContext, **_called) -> dg.SensorResult:
        """Ingest (and refresh) the received days whose files differ from what their last ingest read. The cursor
        remembers what was already reported (folders that are not received days, failures), so each is logged
        once, and which folders the next tick looks at."""
        now, pipeline = time.time(), pipeline_of(context, names)
        refused = ledger.ingested_elsewhere(pipeline.storage(), pipeline.time_zone)
        if refused:
            return dg.SensorResult(skip_reason=refused)
        cursor = LandingCursor.read(context.cursor)
        glance = cursor.glance(now, pipeline.landing_recent_days, pipeline.landing_full_listing_minutes)
        try:
            arrivals = pending.arrivals(pipeline.storage(), bounds(calendars.received), glance)
        except LayoutError as error:
            return dg.SensorResult(skip_reason=str(error))
        ready = planning.ready(arrivals, planning.History.read(context.instance, names, now), now)
        ignored = zip(arrivals.ignored, arrivals.describe_ignored(), strict=True)
        messages = {f.name: f"landing folder {m}" for f, m in ignored}
        for day, attempts in ready.waiting.items():
            if attempts.failures:
                messages[f"{day}:{attempts.failures}"] = f"received day {day}: {_retrying(attempts, now)}"
        for key, message in messages.items():
            if key not in cursor.reported:
                context.log.warning(message)
        requests = []
        for first, last, key in ready.requests():
            local = local_partitions(calendars, first, last)
            tags = {**planning.ingest_tags(first, last), **local.get("tags", {})}
            requests.append(dg.RunRequest(run_key=key, partition_key=local.get("partition_key"), tags=tags))
        return dg.SensorResult(run_requests=requests, cursor=cursor.after(arrivals, glance, now, messages).dump())

    @dg.sensor(
        name=names.of("late_data_sensor"),
        job_name=names.of("refresh_job"),
        minimum_interval_seconds=INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        required_resource_keys={names.pipeline},
    )
    def late_data_sensor(context: dg.SensorEvaluationContext, **_called) -> dg.RunRequest | dg.SkipReason:
        """The derived tables are behind what was ingested -> one refresh of what the received days touched."""
        history = planning.History.read(context.instance, names)
        if history.ingesting():
            return dg.SkipReason("a received day is being ingested: its run refreshes, or a later tick does")
        pipeline = pipeline_of(context, names)
        refused = ledger.ingested_elsewhere(pipeline.storage(), pipeline.time_zone)
        if refused:
            return dg.SkipReason(refused)
        due = pending.backlog(pipeline.storage(), bounds(calendars.received))
        if due is None:
            return dg.SkipReason("every derived table has absorbed what was ingested")
        attempts, now = history.refresh(), time.time()
        if attempts.in_flight:
            return dg.SkipReason("a refresh is in flight")
        if attempts.waiting(now):
            return dg.SkipReason(f"refresh: {_retrying(attempts, now)}")
        context.log.info(due.describe())
        day = calendars.run_day(due.latest_day).isoformat()
        return dg.RunRequest(
            run_key=planning.refresh_key(due, attempts), partition_key=day, tags=planning.refresh_tags(due)
        )

    return dg.Definitions(sensors=[landing_sensor, late_data_sensor])
