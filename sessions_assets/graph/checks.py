"""Asset checks over whole tables: the invariants a full recompute satisfies. They scan every row, so they
run from the daily checks schedule or the UI, not in each refresh (which checks the numbers it wrote)."""

from collections.abc import Callable

import dagster as dg
from pyspark.sql import DataFrame

from sessions_assets.engine import invariants
from sessions_assets.graph.names import Names
from sessions_assets.graph.resources import PipelineResource, pipeline_of, spark_of
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.tables import DAILY_SNAPSHOT, EVENTS, SESSIONS, USERS


def _result(violations: DataFrame, description: str, **metadata) -> dg.AssetCheckResult:
    """Passed when ``violations`` is empty; the count and a sample in the metadata."""
    sample = [{k: str(v) for k, v in row.asDict().items()} for row in violations.limit(5).collect()]
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
    return _result(
        invariants.uncounted_events(wh.read(SESSIONS), wh.read(EVENTS)), "users whose events and sessions disagree"
    )


def snapshot_counts_every_user(wh: Warehouse, pipeline: PipelineResource) -> dg.AssetCheckResult:
    """Each day, the users on hand are the users seen so far."""
    violations = invariants.unbalanced_snapshot_days(wh.read(DAILY_SNAPSHOT), wh.read(SESSIONS))
    return _result(violations, "snapshot days that lose or invent users")


def users_one_row_per_person(wh: Warehouse, pipeline: PipelineResource) -> dg.AssetCheckResult:
    """Every person of sessions has exactly one row, and no other row."""
    violations = invariants.persons_without_one_row(wh.read(USERS), wh.read(SESSIONS))
    return _result(violations, "persons missing from users, written twice, or without sessions")


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


def definitions(names: Names, calendar: dg.DailyPartitionsDefinition) -> dg.Definitions:
    """The whole-table checks of an instance, and its daily schedule of them."""
    checks = [_asset_check(names, check, asset) for check, asset in CHECKS.items()]
    job = dg.define_asset_job(names.of("checks_job"), selection=dg.AssetSelection.checks(*check_keys(names)))
    schedule = dg.ScheduleDefinition(
        name=names.of("daily_checks"),
        job=job,
        cron_schedule="0 6 * * *",
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    return dg.Definitions(asset_checks=checks, schedules=[schedule])
