"""Absorb new events into ``sessions`` from the stored sessions alone, without reading ``events``.

A stored session is a run of events with no gap over ``session_gap``, so for the gap rule its start, end
and count stand for its events: new events join the stored sessions they come within one gap of, and as
long as the joined chain spans at most ``max_session`` (no 24 h cut, no capped session in it) it is one
session whose count is the sum. Only a chain that would be cut needs its events; its user goes to
``session_rebuild``'s path, which recomputes chains from ``events``. That keeps a late row from costing a
read of its whole event day.

Adding is exact only for rows that no stored session counts yet, which is decided from two records that
are committed atomically with the data they describe:

- ``events``' change feed: a row is new if the ``MERGE`` that absorbed its load inserted this very copy
  (not a duplicate of a stored message, not replaced by another copy since);
- each ``sessions`` commit's ``userMetadata`` (a *mark*): the ``events`` version it had read up to and
  the event days it read. A row counts as unseen only if it was inserted after every mark covering its
  day, so a run that committed but died before its ledger write, or a neighbour's run that read the
  row's day, sends it back to the recompute instead of adding it twice.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import date, timedelta

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets import ledger
from sessions_assets.config import PipelineSettings
from sessions_assets.sessionize import _interval, session_id
from sessions_assets.tables import EVENTS, SESSIONS, Warehouse

SESSION_COLUMNS = SESSIONS.schema.fieldNames()
MARK = "events_read"
# How far back the ``sessions`` history and ``events``' change feed are searched; older is recomputed.
HISTORY_LIMIT = 100
CHANGE_VERSIONS = 50
# Commits that change no rows: they tell nothing about what the table has read.
INERT = {
    "CREATE TABLE", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES", "ADD COLUMNS", "OPTIMIZE",
    "VACUUM START", "VACUUM END", "UPGRADE PROTOCOL", "ADD CONSTRAINT", "DROP CONSTRAINT",
}  # fmt: skip
UNKNOWN = 2**62  # an events version no row can exceed: nothing is added on top of what it covers


def mark(events_version: int, first: date | None, last: date | None) -> str:
    """A ``sessions`` commit's note: it reflects ``events`` rows up to this version on days ``first..last``
    (``None``: every day)."""
    days = [d.isoformat() if d else None for d in (first, last)]
    return json.dumps({MARK: {"version": events_version, "first": days[0], "last": days[1]}})


@dataclass(frozen=True)
class Mark:
    first: date | None
    last: date | None
    version: int

    def covers(self, day: date) -> bool:
        return (self.first is None or self.first <= day) and (self.last is None or day <= self.last)


def _parse(note: str | None) -> Mark | None:
    try:
        read = json.loads(note)[MARK]
        first, last = (date.fromisoformat(d) if d else None for d in (read["first"], read["last"]))
        return Mark(first, last, int(read["version"]))
    except (TypeError, ValueError, KeyError):
        return None


def read_marks(wh: Warehouse) -> list[Mark]:
    """What ``sessions``' recent commits read. A data commit without a mark (an older version of the
    project, a hand-made write) is taken to have read every day, up to the version of the next newer
    mark (``events`` only grows its versions), or ``UNKNOWN`` if there is none."""
    history = wh.delta(SESSIONS).history(HISTORY_LIMIT).select("operation", "userMetadata").collect()
    marks: list[Mark] = []
    newer = UNKNOWN
    for commit in history:  # newest first
        found = _parse(commit.userMetadata)
        if found is not None:
            marks.append(found)
            newer = found.version
        elif commit.operation not in INERT:
            marks.append(Mark(None, None, newer))
    if len(history) == HISTORY_LIMIT:  # older commits read no later than the oldest seen here
        marks.append(Mark(None, None, newer))
    return marks


def seen_upto(marks: list[Mark], day: date) -> int:
    """The latest ``events`` version any stored session of ``day`` may reflect (-1: none)."""
    return max((m.version for m in marks if m.covers(day)), default=-1)


def tag_unseen(wh: Warehouse, rows: DataFrame, position: ledger.LedgerState, upto: int) -> DataFrame:
    """Pending ``rows`` (deduplicated, ``events`` columns up to ``upto``) with ``_unseen``: whether every
    pending row of the row's user is new to ``events`` and unseen by ``sessions`` (decided per user, so
    that a user is either extended or recomputed, never both)."""
    versions = [position.versions[load] for load in position.pending if load in position.versions]
    first = max(min(versions, default=upto + 1), upto - CHANGE_VERSIONS + 1, 0)
    days = sorted({load[0] for load in position.pending})
    marks = read_marks(wh)
    seen = wh.spark.createDataFrame([(d, seen_upto(marks, d)) for d in days], "event_date date, _seen long")
    same_copy = ["event_date", "message_id", "received_date", "received_at", "timestamp", "user_key"]
    if first <= upto:
        changes = wh.changes(EVENTS, first, upto).where(F.col("event_date").isin(days))
        # A message is new if its only change in the range is one insert (of the copy now pending).
        inserted = (
            changes.groupBy("event_date", "message_id")
            .agg(
                F.count(F.lit(1)).alias("_changes"),
                F.max("_commit_version").alias("_version"),
                F.first(F.struct("_change_type", *same_copy[2:])).alias("_c"),
            )
            .where((F.col("_changes") == 1) & (F.col("_c._change_type") == "insert"))
            .select("event_date", "message_id", "_version", *[f"_c.{c}" for c in same_copy[2:]])
        )
        tagged = rows.join(inserted, same_copy, "left")
    else:
        tagged = rows.withColumn("_version", F.lit(None).cast("long"))
    tagged = tagged.join(F.broadcast(seen), "event_date", "left")
    new = F.coalesce(F.col("_version") > F.col("_seen"), F.lit(False))
    unseen = F.min(new.cast("int")).over(Window.partitionBy("user_key")) == 1
    return tagged.withColumn("_unseen", unseen).drop("_version", "_seen")


def _days_around(delta: timedelta) -> int:
    return math.ceil(delta / timedelta(days=1))


@dataclass
class Extension:
    fresh: DataFrame  # sessions of the extended chains (``SESSIONS`` columns)
    old: DataFrame  # the stored sessions they replace
    overflow: DataFrame  # (user_key) whose joined chain would exceed the cap: recompute from events
    days: list[date]  # the event days of the new rows
    cached: DataFrame  # what the three are computed from, held in memory until they are written


def extend(wh: Warehouse, new: DataFrame, settings: PipelineSettings) -> Extension:
    """Join ``new`` events (``user_key``, ``timestamp``, ``event_date``) to their users' stored sessions."""
    gap, cap = settings.session_gap, settings.max_session
    days = sorted(r[0] for r in new.select("event_date").distinct().collect())
    # Every stored session that can join a chain of at most ``cap`` holding a row of day d starts within
    # these days of d (it ends at most ``gap`` before the chain's start, itself at most ``cap`` before).
    before, after = _days_around(2 * cap + gap), _days_around(cap + gap)
    window = sorted({d + timedelta(days=k) for d in days for k in range(-before, after + 1)})
    near = new.select(
        "user_key",
        F.explode(F.sequence(F.date_sub("event_date", before), F.date_add("event_date", after))).alias("session_date"),
    ).distinct()
    # ``near`` is a few rows per new user, the window's sessions every user's: broadcast, not shuffled.
    stored = wh.read(SESSIONS).where(F.col("session_date").isin(window))
    stored = stored.join(F.broadcast(near), ["user_key", "session_date"], "left_semi")
    intervals = stored.select(
        *SESSION_COLUMNS, F.col("session_start").alias("_from"), F.col("session_end").alias("_to"), F.lit(False).alias("_new")
    ).unionByName(
        new.select(
            "user_key",
            F.col("timestamp").alias("_from"),
            F.col("timestamp").alias("_to"),
            F.lit(1).cast("long").alias("num_events"),
            F.lit(False).alias("ended_by_cap"),
            F.lit(True).alias("_new"),
        ),
        allowMissingColumns=True,
    )
    by_user = Window.partitionBy("user_key").orderBy("_from", "_to")
    reach = F.max("_to").over(by_user.rowsBetween(Window.unboundedPreceding, -1))
    starts = reach.isNull() | (F.col("_from") > reach + _interval(gap))
    chained = intervals.withColumn("_chain", F.sum(starts.cast("int")).over(by_user.rowsBetween(Window.unboundedPreceding, 0)))
    by_chain = Window.partitionBy("user_key", "_chain")
    chained = (
        chained.withColumn("_touched", F.max("_new").over(by_chain))
        .where("_touched")
        .withColumn("_start", F.min("_from").over(by_chain))
        .withColumn("_end", F.max("_to").over(by_chain))
        .withColumn("_events", F.sum("num_events").over(by_chain))
        .withColumn("_cut", F.max("ended_by_cap").over(by_chain) | (F.col("_end") > F.col("_start") + _interval(cap)))
        .withColumn("_overflow", F.max("_cut").over(Window.partitionBy("user_key")))
        .persist()
    )
    chained.count()  # computed whole once: its three parts below are read by separate (and broadcast) jobs
    kept = chained.where(~F.col("_overflow"))
    fresh = kept.where("_new").groupBy("user_key", "_chain").agg(
        F.first("_start").alias("session_start"), F.first("_end").alias("session_end"), F.first("_events").alias("num_events")
    )
    fresh = fresh.select(
        session_id(F.col("user_key"), F.col("session_start")).alias("session_id"),
        "user_key",
        "session_start",
        "session_end",
        "num_events",
        F.lit(False).alias("ended_by_cap"),
        F.to_date("session_start").alias("session_date"),
    )
    old = kept.where(~F.col("_new")).select(*SESSION_COLUMNS)
    overflow = chained.where("_overflow").select("user_key").distinct()
    return Extension(fresh, old, overflow, days, chained)
