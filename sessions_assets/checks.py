"""Asset checks on ``sessions``: the invariants a full recompute would satisfy, over the whole table.

They scan the table, so they run on demand (UI) and from the daily checks schedule, not in every
incremental run. Each reports actual-versus-expected in its metadata.
"""

from __future__ import annotations

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets.config import PipelineSettings
from sessions_assets.tables import DAILY_SNAPSHOT, EVENTS, SESSIONS, Warehouse


def overlapping_sessions(sessions: DataFrame) -> DataFrame:
    """Sessions that start before the previous session of the same user ended (nested, overlapping, twins)."""
    previous_end = F.lag("session_end").over(Window.partitionBy("user_key").orderBy("session_start", "session_end"))
    return sessions.withColumn("previous_end", previous_end).where(F.col("session_start") <= F.col("previous_end"))


def event_count_mismatches(sessions: DataFrame, events: DataFrame) -> DataFrame:
    """Session days whose ``num_events`` total differs from the events their sessions cover."""
    covered = (
        events.alias("e")
        .join(sessions.alias("s"), "user_key")
        .where(F.col("e.timestamp").between(F.col("s.session_start"), F.col("s.session_end")))
        .groupBy("s.session_date")
        .agg(F.count(F.lit(1)).alias("events_covered"))
    )
    claimed = sessions.groupBy("session_date").agg(F.sum("num_events").alias("num_events"))
    return claimed.join(covered, "session_date", "full_outer").where(
        ~F.coalesce(F.col("num_events") == F.col("events_covered"), F.lit(False))
    )


def overlong_sessions(sessions: DataFrame, max_hours: int) -> DataFrame:
    limit = F.make_dt_interval(F.lit(0), F.lit(max_hours))
    return sessions.where(F.col("session_end") > F.col("session_start") + limit)


def unbalanced_snapshot_days(snapshot: DataFrame, sessions: DataFrame) -> DataFrame:
    """Snapshot days whose on-hand users (all states) differ from the users seen up to that day."""
    first_seen = sessions.groupBy("user_key").agg(F.min("session_date").alias("first_day"))
    new_per_day = first_seen.groupBy(F.col("first_day").alias("snapshot_date")).agg(F.count(F.lit(1)).alias("new"))
    on_hand = snapshot.groupBy("snapshot_date").agg(F.sum("users_on_hand").alias("on_hand"))
    seen = F.sum(F.coalesce("new", F.lit(0))).over(Window.orderBy("snapshot_date").rowsBetween(Window.unboundedPreceding, 0))
    return (
        on_hand.join(new_per_day, "snapshot_date", "full_outer")
        .withColumn("users_seen", seen)
        .where(~F.coalesce(F.col("on_hand") == F.col("users_seen"), F.lit(False)))
    )


def _result(violations: DataFrame, description: str, **expected) -> dg.AssetCheckResult:
    count = violations.count()
    sample = [row.asDict() for row in violations.limit(5).collect()]
    return dg.AssetCheckResult(
        passed=count == 0,
        description=description,
        metadata={"violations": count, "expected": 0, "sample": dg.MetadataValue.json(_jsonable(sample)), **expected},
    )


def _jsonable(rows: list[dict]) -> list[dict]:
    return [{k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()} for row in rows]


@dg.asset_check(asset="sessions", description="No two sessions of a user overlap, in any partitions.")
def sessions_do_not_overlap(spark: LazyPySparkResource, settings: PipelineSettings) -> dg.AssetCheckResult:
    sessions = Warehouse(spark.spark_session, settings).read(SESSIONS)
    return _result(overlapping_sessions(sessions), "sessions overlapping an earlier session of the same user")


@dg.asset_check(asset="sessions", description="Per session day, num_events adds up to the events covered.")
def sessions_count_their_events(spark: LazyPySparkResource, settings: PipelineSettings) -> dg.AssetCheckResult:
    wh = Warehouse(spark.spark_session, settings)
    mismatches = event_count_mismatches(wh.read(SESSIONS), wh.read(EVENTS))
    return _result(mismatches, "session days whose num_events differ from the events their sessions cover")


@dg.asset_check(asset="sessions", description="No session lasts longer than max_session_hours.")
def sessions_within_cap(spark: LazyPySparkResource, settings: PipelineSettings) -> dg.AssetCheckResult:
    sessions = Warehouse(spark.spark_session, settings).read(SESSIONS)
    return _result(
        overlong_sessions(sessions, settings.max_session_hours),
        "sessions longer than the cap",
        max_session_hours=settings.max_session_hours,
    )


@dg.asset_check(asset="daily_snapshot", description="Each day, users on hand over all states = users seen so far.")
def snapshot_accounts_for_every_user(spark: LazyPySparkResource, settings: PipelineSettings) -> dg.AssetCheckResult:
    wh = Warehouse(spark.spark_session, settings)
    return _result(
        unbalanced_snapshot_days(wh.read(DAILY_SNAPSHOT), wh.read(SESSIONS)),
        "snapshot days whose users on hand differ from the distinct users with a session up to that day",
    )


SESSION_CHECKS = [sessions_do_not_overlap, sessions_count_their_events, sessions_within_cap, snapshot_accounts_for_every_user]

checks_job = dg.define_asset_job(
    "sessions_checks", selection=dg.AssetSelection.checks(*SESSION_CHECKS)
)
daily_checks_schedule = dg.ScheduleDefinition(
    job=checks_job, cron_schedule="0 6 * * *", execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)  # fmt: skip
