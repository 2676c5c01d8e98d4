"""Events -> sessions, by the contract's rules.

A user's events, in (``timestamp``, ``message_id``) order, form *chains*: maximal runs in which no gap
exceeds ``session_gap`` (exactly the gap does not split). Chains are independent of one another. Inside a
chain a session ends only at the cap: the first event more than ``max_session`` after the session's first
event starts the next one. That cut depends on where the chain began, so a chain is sessionized whole.
Each attribute is taken from the events in order: the first (or last) event, or the first (or last)
event *carrying* the field.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets.engine import channels, days
from sessions_assets.engine.schema import schema
from sessions_assets.settings import Settings

ORDER = ("timestamp", "message_id")
# What sessionizing reads of an event.
SESSIONIZED = (
    "user_key",
    "timestamp",
    "message_id",
    "type",
    "event",
    "page_path",
    "referrer",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "device_class",
    "device_type",
    "is_bot",
    "revenue",
)
# The sessions table's columns: what ``sessionize`` returns and what is stored (``warehouse/tables.py``).
SESSION_SCHEMA = schema(
    "session_id string, user_key string, session_number long, session_start timestamp, session_end timestamp, "
    "duration_seconds double, num_events long, page_views long, first_event string, last_event string, "
    "landing_path string, exit_path string, referrer string, utm_source string, utm_medium string, "
    "utm_campaign string, device_type string, ended_by_cap boolean, default_channel_group string, is_bot boolean, "
    "conversions long, revenue decimal(38,6), first_conversion_at timestamp, session_date date"
)
SESSION_COLUMNS = tuple(SESSION_SCHEMA.fieldNames())
CAMPAIGN = ("utm_source", "utm_medium", "utm_campaign")


def interval(delta: timedelta) -> Column:
    return F.make_dt_interval(F.lit(0), F.lit(0), F.lit(0), F.lit(delta.total_seconds()))


def _by_user() -> Window:
    return Window.partitionBy("user_key").orderBy(*ORDER)


def _running_count(flag: Column) -> Column:
    """How many rows so far (in user order, this one included) had ``flag`` set."""
    return F.sum(flag.cast("int")).over(_by_user().rowsBetween(Window.unboundedPreceding, 0))


def session_id(user_key: Column, session_start: Column) -> Column:
    """Deterministic id of (user, start): the same session gets the same id in every run."""
    start = F.date_format(session_start, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS")
    return F.substring(F.sha2(F.concat_ws("|", user_key, start), 256), 1, 32)


def starts_chain(moment: Column, reach: Column, gap: timedelta) -> Column:
    """The gap rule: ``moment`` starts a new chain when nothing came before it (``reach`` null) or it is more
    than ``gap`` after the latest moment so far (exactly the gap does not split)."""
    return reach.isNull() | (moment > reach + interval(gap))


def _chained(events: DataFrame, gap: timedelta) -> DataFrame:
    """Events with ``chain`` (a per-user number), ``new_chain``, ``prev_ts`` and the chain's extent."""
    df = events.withColumn("prev_ts", F.lag("timestamp").over(_by_user()))
    df = df.withColumn("new_chain", starts_chain(F.col("timestamp"), F.col("prev_ts"), gap))
    df = df.withColumn("chain", _running_count(F.col("new_chain")))
    by_chain = Window.partitionBy("user_key", "chain")
    return df.withColumn("chain_start", F.min("timestamp").over(by_chain)).withColumn(
        "chain_end", F.max("timestamp").over(by_chain)
    )


def _cap_cuts(chained: DataFrame, cap: timedelta) -> DataFrame:
    """For chains longer than the cap, the timestamps at which a capped session begins.

    Each cut depends on the previous one, so it is a fold over the chain's sorted timestamps (Spark's
    ``aggregate``); only the rare long (bot) chains pay for it.
    """
    fold = (
        "aggregate(ts, named_struct('start', ts[0], 'cuts', array(ts[0])), "
        f"(acc, t) -> IF(t > acc.start + make_dt_interval(0, 0, 0, {int(cap.total_seconds())}), "
        "named_struct('start', t, 'cuts', array_append(acc.cuts, t)), acc)).cuts"
    )
    long_chains = chained.where(F.col("chain_end") > F.col("chain_start") + interval(cap))
    return (
        long_chains.groupBy("user_key", "chain")
        .agg(F.array_sort(F.collect_list("timestamp")).alias("ts"))
        .select("user_key", "chain", F.expr(fold).alias("cuts"))
    )


def _first(value: Column, last: bool = False, when: Column | None = None) -> Column:
    """The value of the first (or last) event in order among those carrying it (or meeting ``when``)."""
    key = F.struct(*ORDER)
    carrying = value.isNotNull() if when is None else when
    pick = F.max_by if last else F.min_by
    return pick(value, F.when(carrying, key))


def sessionize(events: DataFrame, settings: Settings) -> DataFrame:
    """The sessions of ``events`` (``SESSIONIZED``), numbered as if they were all of their users' events."""
    chained = _chained(events.select(*SESSIONIZED), settings.session_gap)
    df = chained.join(_cap_cuts(chained, settings.max_session), ["user_key", "chain"], "left")
    # Among events sharing a cut timestamp only the first in order starts the session.
    at_cut = F.coalesce(F.array_contains("cuts", F.col("timestamp")), F.lit(False)) & (
        F.col("prev_ts").isNull() | (F.col("prev_ts") < F.col("timestamp"))
    )
    df = df.withColumn("session_no", _running_count(F.col("new_chain") | at_cut))
    name = F.when(F.col("type") == "track", F.col("event")).otherwise(F.col("type"))
    has_campaign = F.coalesce(*CAMPAIGN).isNotNull()
    conversion = (F.col("type") == "track") & F.col("event").isin(*settings.conversion_event_list)
    key = F.struct(*ORDER)
    sessions = df.groupBy("user_key", "session_no").agg(
        F.min("timestamp").alias("session_start"),
        F.max("timestamp").alias("session_end"),
        F.count(F.lit(1)).alias("num_events"),
        F.count(F.when(F.col("type") == "page", 1)).alias("page_views"),
        F.min_by(name, key).alias("first_event"),
        F.max_by(name, key).alias("last_event"),
        _first(F.col("page_path")).alias("landing_path"),
        _first(F.col("page_path"), last=True).alias("exit_path"),
        _first(F.col("referrer")).alias("referrer"),
        *[_first(F.col(c), when=has_campaign).alias(c) for c in CAMPAIGN],
        F.coalesce(_first(F.col("device_class")), _first(F.col("device_type"))).alias("device_type"),
        F.coalesce(_first(F.col("is_bot")), F.lit(False)).alias("is_bot"),
        F.count(F.when(conversion, 1)).alias("conversions"),
        F.try_sum(F.when(conversion, F.col("revenue"))).alias("revenue"),  # null past DECIMAL(38,6)
        F.min(F.when(conversion, F.col("timestamp"))).alias("first_conversion_at"),
        F.first("chain").alias("chain"),
    )
    channel = channels.channel_group(
        *[F.col(c) for c in CAMPAIGN],
        F.col("referrer"),
        channels.load(settings.channel_rules),
        settings.own_domain_list,
    )
    # A session that is not the last of its chain was ended by the cap, not by inactivity.
    next_chain = F.lead("chain").over(Window.partitionBy("user_key").orderBy("session_no"))
    return number(
        sessions.select(
            session_id(F.col("user_key"), F.col("session_start")).alias("session_id"),
            "*",
            ((F.unix_micros("session_end") - F.unix_micros("session_start")) / 1_000_000).alias("duration_seconds"),
            F.coalesce(next_chain == F.col("chain"), F.lit(False)).alias("ended_by_cap"),
            channel.alias("default_channel_group"),
            days.local_date(F.col("session_start"), settings.time_zone).alias("session_date"),
        )
    )


def number(sessions: DataFrame) -> DataFrame:
    """``session_number``: 1, 2, 3, ... per user in ``session_start`` order, over the sessions given."""
    numbered = F.row_number().over(Window.partitionBy("user_key").orderBy("session_start")).cast("long")
    return sessions.withColumn("session_number", numbered).select(*SESSION_COLUMNS)
