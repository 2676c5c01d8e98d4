"""Sessions and events -> one row per person: who it is, when it was seen, how much, and its first touch."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.engine.schema import schema

# The session columns a person's first session gives as ``first_<column>``.
FIRST_TOUCH = (
    "landing_path",
    "referrer",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "device_type",
    "default_channel_group",
)
# The users table's columns: what ``users`` returns and what is stored (``warehouse/tables.py``).
USER_SCHEMA = schema(
    "user_key string, user_id string, first_seen timestamp, last_seen timestamp, sessions long, events long, "
    "anonymous_ids long, "
    + ", ".join(f"first_{c} string" for c in FIRST_TOUCH)
    + ", conversions long, revenue decimal(38,6), first_conversion_at timestamp"
)
# What ``users`` reads of an event.
IDENTIFIED = ("user_key", "user_id", "anonymous_id")


def users(sessions: DataFrame, events: DataFrame) -> DataFrame:
    """A row per person of ``sessions`` (with its ``events``, given as ``IDENTIFIED`` columns): the sessions
    give the times, counts, first touch and conversions, the events the ``user_id`` and how many anonymous ids
    it used."""
    first = F.min_by(F.struct(*FIRST_TOUCH), "session_start")
    seen = sessions.groupBy("user_key").agg(
        F.min("session_start").alias("first_seen"),
        F.max("session_end").alias("last_seen"),
        F.count(F.lit(1)).alias("sessions"),
        F.sum("num_events").alias("events"),
        first.alias("_first"),
        F.sum("conversions").alias("conversions"),
        F.try_sum("revenue").alias("revenue"),  # null when no session has any, or past DECIMAL(38,6)
        F.min("first_conversion_at").alias("first_conversion_at"),
    )
    ids = events.groupBy("user_key").agg(
        F.max("user_id").alias("user_id"),  # a person's events carry one userId at most: its key
        F.count_distinct("anonymous_id").alias("anonymous_ids"),
    )
    joined = seen.join(ids, "user_key", "left").withColumn("anonymous_ids", F.coalesce("anonymous_ids", F.lit(0)))
    firsts = {f"first_{c}": F.col(f"_first.{c}") for c in FIRST_TOUCH}
    return joined.withColumns(firsts).select(*USER_SCHEMA.fieldNames())
