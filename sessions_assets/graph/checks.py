"""Asset checks over whole tables: the invariants a full recompute satisfies. They scan every row, so they
run from the daily checks schedule or the UI, not in each refresh (which checks the numbers it wrote).

A check's sample is kept in Dagster's records, which an erasure does not reach: it never shows a person's id. A
session is named by its ``session_id``, a person by the ``session_id`` of one of its sessions."""

from collections.abc import Callable

import dagster as dg
from pyspark.sql import DataFrame

from sessions_assets.engine import invariants, privacy
from sessions_assets.graph.names import Names
from sessions_assets.graph.partitions import Calendars
from sessions_assets.graph.resources import PipelineResource, pipeline_of, spark_of
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.tables import DAILY_SNAPSHOT, EVENTS, SESSIONS, USERS

# Columns a sample never shows.
IDENTIFYING = ("user_key", "user_id", "anonymous_id", "payload")


def _result(violations: DataFrame, description: str, sessions: DataFrame | None = None, **metadata):
    """Passed when ``violations`` is empty; the count and a sample in the metadata, rows naming persons named by a
    session of theirs (``sessions``) and no id shown."""
    shown = violations.limit(5)
    if sessions is not None:
        shown = privacy.name_by_session(shown, sessions)
    shown = shown.drop(*IDENTIFYING)
    sample = [{k: str(v) for k, v in row.asDict().items()} for row in shown.collect()]
    count = violations.count() if sample else 0
    return dg.AssetCheckResult(
        passed=count == 0,
        description=description,
        metadata={"violations": count, "expected": 0, "sample": dg.MetadataValue.json(sample), **metadata},
    )


def sessions_do_not_overlap(wh: Warehouse, pipeline: PipelineResource) -> dg.AssetCheckResult:
    """No two sessions of a user overlap, in any partition."""
    sessions = wh.read(SESSIONS)
    return _result(invariants.overlapping_sessions(sessions), "sessions overlapping an earlier one of their user")


def sessions_within_cap(wh: Warehouse, pipeline: PipelineResource) -> dg.AssetCheckResult:
    """No session lasts longer than max_session_hours."""
    sessions, hours = wh.read(SESSIONS), pipeline.max_session_hours
    return _result(invariants.overlong_sessions(sessions, pipeline), "sessions over the cap", max_hours=hours)


def sessions_numbered_in_order(wh: Warehouse, pipeline: PipelineResource) -> dg.AssetCheckResult:
    """Every user's sessions are numbered 1..n in start order."""
    return _result(invariants.misnumbered_sessions(wh.read(SESSIONS)), "sessions numbered out of their start order")


def sessions_count_every_event(wh: Warehouse, pipeline: PipelineResource) -> dg.AssetCheckResult:
    """Each user's sessions count exactly their events."""
    sessions = wh.read(SESSIONS)
    violations = invariants.uncounted_events(sessions, wh.read(EVENTS))
    return _result(violations, "users whose events and sessions disagree", sessions)


def snapshot_counts_every_user(wh: Warehouse, pipeline: PipelineResource) -> dg.AssetCheckResult:
    """Each day, the users on hand are the users seen so far."""
    violations = invariants.unbalanced_snapshot_days(wh.read(DAILY_SNAPSHOT), wh.read(SESSIONS))
    return _result(violations, "snapshot days that lose or invent users")


def users_one_row_per_person(wh: Warehouse, pipeline: PipelineResource) -> dg.AssetCheckResult:
    """Every person of sessions has exactly one row, and no other row."""
    sessions = wh.read(SESSIONS)
    violations = invariants.persons_without_one_row(wh.read(USERS), sessions)
    return _result(violations, "persons missing from users, written twice, or without sessions", sessions)


# Each whole-table check, by the asset it checks.
CHECKS: dict[Callable[[Warehouse, PipelineResource], dg.AssetCheckResult], str] = {
    sessions_do_not_overlap: "sessions",
    sessions_within_cap: "sessions",
    sessions_numbered_in_order: "sessions",
    sessions_count_every_event: "sessions",
    snapshot_counts_every_user: "daily_snapshot",
    users_one_row_per_person: "users",
}


def check_keys(names: Names) -> list[dg.AssetCheckKey]:
    """The whole-table checks of an instance (what its refresh jobs leave out)."""
    return [dg.AssetCheckKey(names.key(asset), names.of(check.__name__)) for check, asset in CHECKS.items()]


# How many past executions of a check ``clear_check_records`` reads at a time.
_HISTORY_PAGE = 1000


def clear_check_records(instance: dg.DagsterInstance, names: Names) -> int:
    """Remove every record of an instance's whole-table checks' past evaluations from a Dagster instance: samples
    written before they stopped showing ids listed ``user_key`` rows. The runs that evaluated them are deleted
    (their event logs hold the evaluations), then the checked assets' check history is wiped (which also clears
    their materialization history in the UI; the tables are untouched, and the next runs record new ones).
    Returns the runs deleted."""
    runs = set()
    for key in check_keys(names):
        cursor = None
        while True:
            page = instance.event_log_storage.get_asset_check_execution_history(key, _HISTORY_PAGE, cursor)
            runs.update(record.run_id for record in page)
            if len(page) < _HISTORY_PAGE:
                break
            cursor = page[-1].id
    for run_id in sorted(runs):
        instance.delete_run(run_id)
    instance.wipe_assets(sorted({key.asset_key for key in check_keys(names)}, key=str))
    return len(runs)


def _asset_check(names: Names, check, asset: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=names.key(asset),
        name=names.of(check.__name__),
        description=check.__doc__,
        required_resource_keys={names.spark, names.pipeline},
    )
    def _check(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        pipeline = pipeline_of(context, names)
        return check(pipeline.warehouse(spark_of(context, names)), pipeline)

    return _check


def definitions(names: Names, calendars: Calendars) -> dg.Definitions:
    """The whole-table checks of an instance, and its daily schedule of them (at 06:00 in its time zone)."""
    checks = [_asset_check(names, check, asset) for check, asset in CHECKS.items()]
    job = dg.define_asset_job(names.of("checks_job"), selection=dg.AssetSelection.checks(*check_keys(names)))
    schedule = dg.ScheduleDefinition(
        name=names.of("daily_checks"),
        job=job,
        cron_schedule="0 6 * * *",
        execution_timezone=calendars.time_zone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    return dg.Definitions(asset_checks=checks, schedules=[schedule])
