"""What a full recompute would satisfy, as queries returning the rows that break it (empty: it holds)."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets.engine.sessionize import interval
from sessions_assets.settings import Settings


def overlapping_sessions(sessions: DataFrame) -> DataFrame:
    """Sessions that start before the previous session of the same user ended (nested, overlapping, twins)."""
    previous_end = F.lag("session_end").over(Window.partitionBy("user_key").orderBy("session_start", "session_end"))
    return sessions.withColumn("previous_end", previous_end).where(F.col("session_start") <= F.col("previous_end"))


def overlong_sessions(sessions: DataFrame, settings: Settings) -> DataFrame:
    return sessions.where(F.col("session_end") > F.col("session_start") + interval(settings.max_session))


def misnumbered_sessions(sessions: DataFrame) -> DataFrame:
    """Sessions whose ``session_number`` is not their rank in their user's ``session_start`` order."""
    rank = F.row_number().over(Window.partitionBy("user_key").orderBy("session_start"))
    return sessions.withColumn("expected_number", rank).where(F.col("expected_number") != F.col("session_number"))


def uncounted_events(sessions: DataFrame, events: DataFrame) -> DataFrame:
    """Users whose sessions' ``num_events`` differ from their events (events outside any session included)."""
    counted = sessions.groupBy("user_key").agg(F.sum("num_events").alias("num_events"))
    stored = events.groupBy("user_key").agg(F.count(F.lit(1)).alias("events"))
    return counted.join(stored, "user_key", "full_outer").where(
        ~F.coalesce(F.col("num_events") == F.col("events"), F.lit(False))
    )


def unbalanced_snapshot_days(snapshot: DataFrame, sessions: DataFrame) -> DataFrame:
    """Snapshot days whose users on hand (all states) differ from the users with a session so far."""
    first_seen = sessions.groupBy("user_key").agg(F.min("session_date").alias("first_day"))
    new_per_day = first_seen.groupBy(F.col("first_day").alias("snapshot_date")).agg(F.count(F.lit(1)).alias("new"))
    on_hand = snapshot.groupBy("snapshot_date").agg(F.sum("users_on_hand").alias("on_hand"))
    so_far = Window.orderBy("snapshot_date").rowsBetween(Window.unboundedPreceding, 0)
    return (
        on_hand.join(new_per_day, "snapshot_date", "full_outer")
        .withColumn("users_seen", F.sum(F.coalesce("new", F.lit(0))).over(so_far))
        .where(F.col("on_hand").isNotNull() & ~F.coalesce(F.col("on_hand") == F.col("users_seen"), F.lit(False)))
    )


def persons_without_one_row(users: DataFrame, sessions: DataFrame) -> DataFrame:
    """Persons of ``sessions`` with no row or several in ``users``, and rows of ``users`` with no session."""
    rows = users.groupBy("user_key").agg(F.count(F.lit(1)).alias("rows"))
    persons = sessions.select("user_key").distinct().withColumn("has_sessions", F.lit(True))
    joined = persons.join(rows, "user_key", "full_outer")
    return joined.where(F.col("has_sessions").isNull() | F.col("rows").isNull() | (F.col("rows") != 1))
