"""Asset checks over whole tables: the invariants a full recompute satisfies. They scan every row, so they
run from the daily checks schedule or the UI, not in each refresh (which checks the numbers it wrote).

A check's sample is kept in Dagster's records, which an erasure does not reach: it never shows a person's id. A
session is named by its ``session_id``, a person by the ``session_id`` of one of its sessions."""

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import DataFrame

from sessions_assets.defs.resources import PipelineResource
from sessions_assets.engine import invariants, privacy
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


@dg.asset_check(asset="sessions", description="No two sessions of a user overlap, in any partition.")
def sessions_do_not_overlap(spark: LazyPySparkResource, pipeline: PipelineResource) -> dg.AssetCheckResult:
    sessions = pipeline.warehouse(spark).read(SESSIONS)
    return _result(invariants.overlapping_sessions(sessions), "sessions overlapping an earlier one of their user")


@dg.asset_check(asset="sessions", description="No session lasts longer than max_session_hours.")
def sessions_within_cap(spark: LazyPySparkResource, pipeline: PipelineResource) -> dg.AssetCheckResult:
    sessions = pipeline.warehouse(spark).read(SESSIONS)
    hours = pipeline.max_session_hours
    return _result(invariants.overlong_sessions(sessions, pipeline), "sessions over the cap", max_hours=hours)


@dg.asset_check(asset="sessions", description="Every user's sessions are numbered 1..n in start order.")
def sessions_numbered_in_order(spark: LazyPySparkResource, pipeline: PipelineResource) -> dg.AssetCheckResult:
    sessions = pipeline.warehouse(spark).read(SESSIONS)
    return _result(invariants.misnumbered_sessions(sessions), "sessions numbered out of their start order")


@dg.asset_check(asset="sessions", description="Each user's sessions count exactly their events.")
def sessions_count_every_event(spark: LazyPySparkResource, pipeline: PipelineResource) -> dg.AssetCheckResult:
    wh = pipeline.warehouse(spark)
    sessions = wh.read(SESSIONS)
    violations = invariants.uncounted_events(sessions, wh.read(EVENTS))
    return _result(violations, "users whose events and sessions disagree", sessions)


@dg.asset_check(asset="daily_snapshot", description="Each day, the users on hand are the users seen so far.")
def snapshot_counts_every_user(spark: LazyPySparkResource, pipeline: PipelineResource) -> dg.AssetCheckResult:
    wh = pipeline.warehouse(spark)
    violations = invariants.unbalanced_snapshot_days(wh.read(DAILY_SNAPSHOT), wh.read(SESSIONS))
    return _result(violations, "snapshot days that lose or invent users")


@dg.asset_check(asset="users", description="Every person of sessions has exactly one row, and no other row.")
def users_one_row_per_person(spark: LazyPySparkResource, pipeline: PipelineResource) -> dg.AssetCheckResult:
    wh = pipeline.warehouse(spark)
    sessions = wh.read(SESSIONS)
    violations = invariants.persons_without_one_row(wh.read(USERS), sessions)
    return _result(violations, "persons missing from users, written twice, or without sessions", sessions)


CHECKS = [
    sessions_do_not_overlap,
    sessions_within_cap,
    sessions_numbered_in_order,
    sessions_count_every_event,
    snapshot_counts_every_user,
    users_one_row_per_person,
]
# How many past executions of a check ``clear_check_records`` reads at a time.
_HISTORY_PAGE = 1000


def clear_check_records(instance: dg.DagsterInstance) -> int:
    """Remove every record of the whole-table checks' past evaluations from a Dagster instance: samples written
    before they stopped showing ids listed ``user_key`` rows. The runs that evaluated them are deleted (their event
    logs hold the evaluations), then the checked assets' check history is wiped (which also clears their
    materialization history in the UI; the tables are untouched, and the next runs record new ones). Returns the
    runs deleted."""
    runs = set()
    for check in CHECKS:
        for key in check.check_keys:
            cursor = None
            while True:
                page = instance.event_log_storage.get_asset_check_execution_history(key, _HISTORY_PAGE, cursor)
                runs.update(record.run_id for record in page)
                if len(page) < _HISTORY_PAGE:
                    break
                cursor = page[-1].id
    for run_id in sorted(runs):
        instance.delete_run(run_id)
    instance.wipe_assets(sorted({key.asset_key for check in CHECKS for key in check.check_keys}, key=str))
    return len(runs)


daily_checks = dg.ScheduleDefinition(
    name="daily_checks",
    job=dg.define_asset_job("checks_job", selection=dg.AssetSelection.checks(*CHECKS)),
    cron_schedule="0 6 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
