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
    + ", conversions long, revenue decimal(38,6), first_conversion_at timestamp, revenue_sessions long"
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
        F.count("revenue").alias("revenue_sessions"),
    )
    ids = events.groupBy("user_key").agg(
        F.max("user_id").alias("user_id"),  # a person's events carry one userId at most: its key
        F.count_distinct("anonymous_id").alias("anonymous_ids"),
    )
    joined = seen.join(ids, "user_key", "left").withColumn("anonymous_ids", F.coalesce("anonymous_ids", F.lit(0)))
    firsts = {f"first_{c}": F.col(f"_first.{c}") for c in FIRST_TOUCH}
    return joined.withColumns(firsts).select(*USER_SCHEMA.fieldNames())


# What a person's row reads of a session.
SESSION_FACTS = (
    "user_key",
    "session_start",
    "session_end",
    "num_events",
    *FIRST_TOUCH,
    "conversions",
    "revenue",
    "first_conversion_at",
)


def _tally(sessions: DataFrame, prefix: str) -> DataFrame:
    """Per person, what its row sums, and its earliest and latest, over some of its sessions."""
    return sessions.groupBy("user_key").agg(
        F.count(F.lit(1)).alias(f"{prefix}sessions"),
        F.sum("num_events").alias(f"{prefix}events"),
        F.sum("conversions").alias(f"{prefix}conversions"),
        F.try_sum("revenue").alias(f"{prefix}revenue"),
        F.count("revenue").alias(f"{prefix}revenue_sessions"),
        F.min("session_start").alias(f"{prefix}first_seen"),
        F.max("session_end").alias(f"{prefix}last_seen"),
        F.min("first_conversion_at").alias(f"{prefix}first_conversion_at"),
        F.min_by(F.struct(*FIRST_TOUCH), "session_start").alias(f"{prefix}first"),
    )


def advanced(stored: DataFrame, added: DataFrame, removed: DataFrame) -> DataFrame:
    """Persons' rows moved on by the sessions added and removed since they were stored, without reading their
    other sessions: the counts and sums are kept additively; first and last seen, first touch and the first
    conversion move only with an added session past them. Where a removed session was the earliest (or latest,
    or first to convert) and nothing added takes its place, or a sum does not fit, the row cannot follow from what
    changed: ``recount`` marks the person, to be recounted from all its sessions.

    ``stored``: the persons' stored rows (``USER_SCHEMA``) and, for a person without one, a row of its key alone;
    ``added``, ``removed``: sessions (``SESSION_FACTS``). Returns ``USER_SCHEMA`` but the ids, with ``recount``."""
    s = stored.alias("s")
    joined = s.join(_tally(added, "a_"), "user_key", "left").join(_tally(removed, "r_"), "user_key", "left")
    col, zero = F.col, F.lit(0)

    def net(name: str):
        return (
            F.coalesce(col(f"s.{name}"), zero) + F.coalesce(col(f"a_{name}"), zero) - F.coalesce(col(f"r_{name}"), zero)
        )

    revenue = F.try_add(
        F.try_subtract(F.coalesce(col("s.revenue"), F.lit(0)), F.coalesce(col("r_revenue"), F.lit(0))),
        F.coalesce(col("a_revenue"), F.lit(0)),
    ).cast("decimal(38,6)")
    revenue_sessions = net("revenue_sessions")
    # A sum known only as "past DECIMAL(38,6)" (null with sessions carrying revenue) cannot be added to.
    overflowed = (
        (F.coalesce(col("s.revenue_sessions"), zero) > 0) & col("s.revenue").isNull()
        | (F.coalesce(col("a_revenue_sessions"), zero) > 0) & col("a_revenue").isNull()
        | (F.coalesce(col("r_revenue_sessions"), zero) > 0) & col("r_revenue").isNull()
        | (revenue_sessions > 0) & revenue.isNull()
    )

    def lost(stored_value: str, removed_value: str, added_value: str, earliest: bool):
        """The stored extreme was removed and no added session reaches it."""
        gone = col(removed_value).isNotNull() & (col(removed_value) == col(stored_value))
        reaches = (col(added_value) <= col(stored_value)) if earliest else (col(added_value) >= col(stored_value))
        return gone & ~F.coalesce(reaches, F.lit(False))

    unknown = (
        lost("s.first_seen", "r_first_seen", "a_first_seen", True)
        | lost("s.last_seen", "r_last_seen", "a_last_seen", False)
        | lost("s.first_conversion_at", "r_first_conversion_at", "a_first_conversion_at", True)
        | (col("s.sessions").isNull() & col("r_sessions").isNotNull())  # removed sessions of a person not stored
    )
    # Of its stored sessions, how many it keeps: with none, the added ones are all it has and say everything.
    remaining = F.coalesce(col("s.sessions"), zero) - F.coalesce(col("r_sessions"), zero)
    recount = (unknown & (remaining > 0)) | (overflowed & (net("sessions") > 0)) | (net("sessions") < 0)
    kept = remaining > 0

    def earliest(name: str, latest: bool = False):
        pick = F.greatest if latest else F.least
        return F.when(kept, pick(col(f"s.{name}"), col(f"a_{name}"))).otherwise(col(f"a_{name}"))

    first_is_added = ~kept | col("s.first_seen").isNull() | (col("a_first_seen") <= col("s.first_seen"))
    firsts = {
        f"first_{c}": F.when(first_is_added, col(f"a_first.{c}")).otherwise(col(f"s.first_{c}")) for c in FIRST_TOUCH
    }
    return joined.select(
        "user_key",
        F.lit(None).cast("string").alias("user_id"),
        earliest("first_seen").alias("first_seen"),
        earliest("last_seen", latest=True).alias("last_seen"),
        net("sessions").alias("sessions"),
        net("events").alias("events"),
        F.lit(None).cast("long").alias("anonymous_ids"),
        *[v.alias(k) for k, v in firsts.items()],
        net("conversions").alias("conversions"),
        F.when(revenue_sessions > 0, revenue).alias("revenue"),
        earliest("first_conversion_at").alias("first_conversion_at"),
        revenue_sessions.alias("revenue_sessions"),
        recount.alias("recount"),
    )
