"""Bring the ``sessions`` table up to date for the session days ``first..last``.

The unit of recomputation is the chain (see ``sessionize``): every chain of a user that has an event on
``first..last`` is re-sessionized *whole*, from the ``events`` table, and merged into ``sessions``
wherever its sessions start, deleting the rows it supersedes in whatever partition holds them. Because
it reads events (the truth) and never earlier session rows, the result for those chains is exact whether
or not neighbouring days were rebuilt before, after or in the same run; and since a stale session always
overlaps a chain that gained an event on a day the late-data sensor requests, every stale row is found.

Reads: ``events`` of ``first-1 .. last+1`` for the users seen on ``first..last`` (the declared
neighbour mapping), more days only for users whose chain runs into the edge of what was read (only
continuous, bot-like activity does), and the ``sessions`` rows of those users overlapping their chains.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets.config import PipelineSettings
from sessions_assets.sessionize import assign_chains, sessions_from_chains
from sessions_assets.tables import EVENTS, PARTITION_MAP, SESSIONS, Warehouse, diff_rows

SESSION_COLUMNS = SESSIONS.schema.fieldNames()


@dataclass
class SessionChanges:
    """What one rebuild changed, for materialization metadata."""

    written: int = 0  # new or changed session rows
    merged_away: int = 0  # rows deleted because their events now belong to another session
    moved: int = 0  # rows superseded by a session that starts on another day
    capped: int = 0  # rows written that were ended by the 24 h cap
    users: int = 0  # users whose chains were recomputed
    committed: bool = False


def _midnight(d: date) -> datetime:
    return datetime.combine(d, time(0), tzinfo=timezone.utc)


def _last_event_day(wh: Warehouse) -> date | None:
    return wh.read(PARTITION_MAP).agg(F.max("event_date")).head()[0]


def load_chains(wh: Warehouse, first: date, last: date, settings: PipelineSettings) -> DataFrame:
    """Events, chained, of every chain with an event on ``first..last``, each chain complete."""
    gap = settings.session_gap
    users = wh.read(EVENTS, first, last).select("user_key").distinct()
    lo, hi = first - timedelta(days=1), last + timedelta(days=1)
    events = wh.read(EVENTS, lo, hi).join(F.broadcast(users), "user_key", "left_semi")
    horizon = _last_event_day(wh) or hi
    step = 1
    while True:
        chained = assign_chains(events.select("user_key", "timestamp", "message_id", "event_date"), gap)
        in_range = F.col("event_date").between(F.lit(first), F.lit(last))
        chained = chained.withColumn(
            "relevant", F.max(in_range.cast("int")).over(Window.partitionBy("user_key", "chain")) == 1
        ).where("relevant")
        # A chain may continue past what was read if it comes within one gap of the edge.
        left = F.col("chain_start") < F.lit(_midnight(lo) + gap)
        right = F.col("chain_end") >= F.lit(_midnight(hi + timedelta(days=1)) - gap)
        edges = (
            chained.select("user_key", (left & F.lit(lo > settings.first_day)).alias("l"),
                           (right & F.lit(hi < horizon)).alias("r"))
            .where("l OR r").groupBy("user_key").agg(F.max("l").alias("l"), F.max("r").alias("r"))
            .collect()
        )  # fmt: skip
        if not edges:
            return chained
        more = []
        left_users = [row.user_key for row in edges if row.l]
        right_users = [row.user_key for row in edges if row.r]
        if left_users:
            more.append(wh.read(EVENTS, lo - timedelta(days=step), lo - timedelta(days=1))
                        .where(F.col("user_key").isin(left_users)))  # fmt: skip
            lo -= timedelta(days=step)
        if right_users:
            more.append(wh.read(EVENTS, hi + timedelta(days=1), hi + timedelta(days=step))
                        .where(F.col("user_key").isin(right_users)))  # fmt: skip
            hi += timedelta(days=step)
        for extra in more:
            events = events.unionByName(extra)
        step *= 2


def rebuild_sessions(wh: Warehouse, first: date, last: date, settings: PipelineSettings) -> SessionChanges:
    """Recompute the chains touching ``first..last`` and merge the difference into ``sessions``."""
    chained = load_chains(wh, first, last, settings).persist()
    try:
        fresh = sessions_from_chains(chained, settings.max_session).persist()
        return _merge(wh, fresh)
    finally:
        chained.unpersist()


def _merge(wh: Warehouse, fresh: DataFrame) -> SessionChanges:
    changes = SessionChanges()
    bounds = fresh.agg(
        F.min(F.to_date("chain_start")), F.max(F.to_date("chain_end")), F.countDistinct("user_key")
    ).head()
    if bounds[0] is None:
        return changes
    first_day, last_day, changes.users = bounds
    chains = fresh.select("user_key", "chain_start", "chain_end").distinct()
    # Existing rows of these users that overlap a recomputed chain are the rows it may supersede.
    old = (
        wh.read(SESSIONS, first_day - timedelta(days=1), last_day)
        .join(F.broadcast(chains).alias("c"), "user_key")
        .where((F.col("session_start") <= F.col("c.chain_end")) & (F.col("session_end") >= F.col("c.chain_start")))
        .select(*SESSION_COLUMNS)
        .distinct()
    )
    new = fresh.select(*SESSION_COLUMNS)
    diff = diff_rows(new, old, ["session_id", "session_date"]).persist()
    try:
        summary = diff.agg(
            F.sum((F.col("_op") == "upsert").cast("int")),
            F.sum((F.col("_op") == "delete").cast("int")),
            F.sum(((F.col("_op") == "upsert") & F.col("ended_by_cap")).cast("int")),
            F.collect_set("session_date"),
        ).head()
        changes.written, changes.merged_away, changes.capped = (summary[0] or 0, summary[1] or 0, summary[2] or 0)
        if changes.merged_away:
            changes.moved = _moved(diff.where("_op = 'delete'"), new)
        if changes.written or changes.merged_away:
            wh.apply_diff(SESSIONS, diff, ["session_id", "session_date"], sorted(summary[3]))
            changes.committed = True
        return changes
    finally:
        diff.unpersist()


def _moved(deleted: DataFrame, new: DataFrame) -> int:
    """Deleted rows whose events now belong to a session starting on another day."""
    return (
        deleted.alias("o")
        .join(new.alias("n"), "user_key")
        .where(
            (F.col("o.session_start") <= F.col("n.session_end"))
            & (F.col("o.session_end") >= F.col("n.session_start"))
            & (F.col("o.session_date") != F.col("n.session_date"))
        )
        .select("o.session_id")
        .distinct()
        .count()
    )
