"""Events -> sessions, by the contract's rules, as plain DataFrame functions.

A user's events, ordered by (``timestamp``, ``message_id``), form *chains*: maximal runs in which no gap
exceeds ``session_gap`` (30 min; exactly 30 min does not split). Chains are independent of one another,
and adding an event can only grow or join chains, never split one. Inside a chain a session ends only at
the 24 h cap: the first event more than ``max_session`` after the session's first event starts the next
session. That cut depends on where the chain began, so a chain is always sessionized whole.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets.tables import SESSIONS

ORDER = ("timestamp", "message_id")


def _by_user() -> Window:
    return Window.partitionBy("user_key").orderBy(*ORDER)


def _running_count(flag: Column) -> Column:
    """How many rows so far (in user order, this one included) had ``flag`` set."""
    return F.sum(flag.cast("int")).over(_by_user().rowsBetween(Window.unboundedPreceding, 0))


def _interval(delta: timedelta) -> Column:
    return F.make_dt_interval(F.lit(0), F.lit(0), F.lit(0), F.lit(delta.total_seconds()))


def assign_chains(events: DataFrame, gap: timedelta) -> DataFrame:
    """Add ``prev_ts``, ``new_chain``, ``chain`` (a per-user number), ``chain_start`` and ``chain_end``."""
    by_user = _by_user()
    df = events.withColumn("prev_ts", F.lag("timestamp").over(by_user))
    new_chain = F.col("prev_ts").isNull() | (F.col("timestamp") > F.col("prev_ts") + _interval(gap))
    df = df.withColumn("new_chain", new_chain)
    df = df.withColumn("chain", _running_count(F.col("new_chain")))
    by_chain = Window.partitionBy("user_key", "chain")
    return df.withColumn("chain_start", F.min("timestamp").over(by_chain)).withColumn(
        "chain_end", F.max("timestamp").over(by_chain)
    )


def _cap_cuts(chained: DataFrame, cap: timedelta) -> DataFrame:
    """For chains longer than the cap, the timestamps at which a capped session begins.

    The cut is sequential (each depends on the previous), so it is a fold over the chain's sorted
    timestamps with Spark's ``aggregate``; only the rare long (bot) chains pay for it.
    """
    seconds = int(cap.total_seconds())
    fold = (
        "aggregate(ts, named_struct('start', ts[0], 'cuts', array(ts[0])), "
        f"(acc, t) -> IF(t > acc.start + make_dt_interval(0, 0, 0, {seconds}), "
        "named_struct('start', t, 'cuts', array_append(acc.cuts, t)), acc)).cuts"
    )
    long_chains = chained.where(F.col("chain_end") > F.col("chain_start") + _interval(cap))
    return (
        long_chains.groupBy("user_key", "chain")
        .agg(F.array_sort(F.collect_list("timestamp")).alias("ts"))
        .select("user_key", "chain", F.expr(fold).alias("cuts"))
    )


def session_id(user_key: Column, session_start: Column) -> Column:
    """Deterministic id of (user, start): the same session gets the same id in every run."""
    start = F.date_format(session_start, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS")
    return F.substring(F.sha2(F.concat_ws("|", user_key, start), 256), 1, 32)


def sessions_from_chains(chained: DataFrame, cap: timedelta) -> DataFrame:
    """Cut chained events into sessions (the ``sessions`` table's columns, plus the chain's extent)."""
    cuts = _cap_cuts(chained, cap)
    df = chained.join(cuts, ["user_key", "chain"], "left")
    # Among events sharing a cut timestamp only the first in order starts the session.
    at_cut = F.coalesce(F.array_contains("cuts", F.col("timestamp")), F.lit(False)) & (
        F.col("prev_ts").isNull() | (F.col("prev_ts") < F.col("timestamp"))
    )
    df = df.withColumn("session_no", _running_count(F.col("new_chain") | at_cut))
    sessions = df.groupBy("user_key", "session_no").agg(
        F.min("timestamp").alias("session_start"),
        F.max("timestamp").alias("session_end"),
        F.count(F.lit(1)).alias("num_events"),
        F.first("chain").alias("chain"),
        F.first("chain_start").alias("chain_start"),
        F.first("chain_end").alias("chain_end"),
    )
    # A session that is not the last of its chain was ended by the cap, not by inactivity.
    next_chain = F.lead("chain").over(Window.partitionBy("user_key").orderBy("session_no"))
    return sessions.select(
        session_id(F.col("user_key"), F.col("session_start")).alias("session_id"),
        "user_key",
        "session_start",
        "session_end",
        "num_events",
        F.coalesce(next_chain == F.col("chain"), F.lit(False)).alias("ended_by_cap"),
        F.to_date("session_start").alias("session_date"),
        "chain_start",
        "chain_end",
    )


def sessionize(events: DataFrame, gap: timedelta, cap: timedelta) -> DataFrame:
    """All sessions of ``events`` (columns ``user_key``, ``timestamp``, ``message_id``): a full recompute."""
    chained = assign_chains(events.select("user_key", *ORDER), gap)
    return sessions_from_chains(chained, cap).select(*SESSIONS.schema.fieldNames())
