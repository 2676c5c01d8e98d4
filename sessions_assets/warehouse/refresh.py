"""Bring ``events``, ``sessions`` and the snapshot up to date with their inputs: one step per asset.

Each step reads where its table stands (``ledger.position``), the input's change feed since then, applies
the engine, and writes once with its new mark. Without a mark or a feed it rebuilds the table whole. A
step may also repair chosen days: recompute them from their inputs whatever the table holds. A step is a
handful of Spark jobs and one commit: what it reports is collected in one small query.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import date, timedelta

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets.engine import chains, dedup, lifecycle
from sessions_assets.engine.sessionize import EVENT_COLUMNS, sessionize
from sessions_assets.settings import Settings
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import Commit, Warehouse
from sessions_assets.warehouse.tables import (
    DAILY_SNAPSHOT,
    EVENTS,
    LIFECYCLE,
    RAW_EVENTS,
    REJECTED_EVENTS,
    SESSIONS,
)  # fmt: skip

ADDED, REMOVED = ("insert", "update_postimage"), ("delete", "update_preimage")


@dataclass
class Refreshed:
    """What a step did, for materialization metadata."""

    how: str = "up to date"  # 'up to date', 'incremental', 'rebuilt whole', 'repaired'
    absorbed: int | None = None  # the input version now reflected
    counts: Counter = field(default_factory=Counter)
    days: Counter = field(default_factory=Counter)  # partition day -> rows written or deleted there
    tables: dict[str, list[dict]] = field(default_factory=dict)  # small summaries, a row per dict


def _days_in(df: DataFrame, column: str) -> list[date]:
    return sorted(r[0] for r in df.select(column).distinct().collect() if r[0] is not None)


def _in(column: str, days) -> str:
    """A SQL condition on a date column, for a ``MERGE``'s target side; FALSE when there are no days."""
    listed = ", ".join(f"DATE'{d.isoformat()}'" for d in sorted(days))
    return f"{column} IN ({listed})" if listed else "FALSE"


def _repair_commit(days: tuple[date, date]) -> Commit:
    """A repair's write notes what it recomputed, not an input version: it absorbs nothing new."""
    return Commit({"repaired": [d.isoformat() for d in days]})


def _rebuilding(wh: Warehouse, at: ledger.Position) -> tuple[bool, DataFrame | None]:
    """Whether the table must be rebuilt whole, and otherwise the input's changes (None: none pending)."""
    if at.absorbed is None:
        return True, None
    if at.current:
        return False, None
    feed = ledger.changes(wh, at)
    return feed is None, feed


def _rebuilt(wh: Warehouse, table, column: str, at: ledger.Position) -> Refreshed:
    """A table rebuilt whole: every day it holds changed (counted from the narrow date column)."""
    done = Refreshed("rebuilt whole", at.latest)
    for row in wh.read(table).groupBy(column).count().collect():
        done.days[row[column]] = row["count"]
    done.counts["rows"] = sum(done.days.values())
    return done


# --- events -------------------------------------------------------------------------------------------


def refresh_events(wh: Warehouse, repair: tuple[date, date] | None = None) -> Refreshed:
    """Absorb the received days ingested since the last run; with ``repair``, also recompute those event days."""
    at = ledger.position(wh, EVENTS, RAW_EVENTS)
    rebuild, feed = _rebuilding(wh, at)
    if rebuild:
        wh.overwrite(EVENTS, dedup.keep_first(wh.read(RAW_EVENTS, at.latest)).select(*EVENTS.columns), at.replacing)
        return _rebuilt(wh, EVENTS, "event_date", at)
    done = Refreshed("incremental" if feed is not None else "up to date", at.latest)
    if feed is not None:
        if _removed_rows(wh, at):  # a received day re-ingested with other rows: recompute its messages
            change = _corrections(wh, feed.select("message_hash").distinct(), at.latest)
        else:
            change = _arrivals(wh, feed.where(F.col("_change_type") == "insert").drop("_change_type"))
        _apply_events(wh, change, at.commit, done)
    if repair is not None:
        first, last = repair
        stored = wh.read(EVENTS).where(F.col("event_date").between(first, last)).select("message_hash")
        copies = wh.read(RAW_EVENTS).where(F.col("event_date").between(first, last)).select("message_hash")
        _apply_events(
            wh, _corrections(wh, stored.union(copies).distinct(), wh.version(RAW_EVENTS)), _repair_commit(repair), done
        )
        done.how = "repaired"
    return done


def _removed_rows(wh: Warehouse, at: ledger.Position) -> bool:
    """Whether ``raw_events`` lost rows since ``at.absorbed`` (its commits' metrics; no data is read)."""
    commits = (wh.commit_info(RAW_EVENTS, v) for v in range(at.absorbed + 1, at.latest + 1))
    return any(
        int(c.get("operationMetrics", {}).get("numRemovedFiles", "0"))
        for c in commits
        if c.get("operation") != "OPTIMIZE"
    )


def _stored(wh: Warehouse, hashes: DataFrame) -> DataFrame:
    """The stored rows of messages with these hashes: one scan of the narrow hash column finds their days,
    then only those days are read whole."""
    events = wh.read(EVENTS)
    found = events.select("message_hash", "event_date").join(F.broadcast(hashes), "message_hash", "left_semi")
    days = _days_in(found, "event_date")
    return events.where(F.col("event_date").isin(days)).join(F.broadcast(hashes), "message_hash", "left_semi")


def _arrivals(wh: Warehouse, copies: DataFrame) -> DataFrame:
    """New copies only: each message's first new copy against the stored one (matched on the id itself)."""
    incoming = dedup.keep_first(copies).select(*EVENTS.columns).localCheckpoint()
    stored = _stored(wh, incoming.select("message_hash").distinct())
    return dedup.arrivals(
        incoming, stored.join(incoming.select("message_id"), "message_id", "left_semi"), EVENTS.columns
    )


def _corrections(wh: Warehouse, hashes: DataFrame, raw_version: int) -> DataFrame:
    """Every copy of these messages, wherever received, decides their rows afresh."""
    hashes = hashes.localCheckpoint()
    raw = wh.read(RAW_EVENTS, raw_version)
    found = raw.select("message_hash", "received_date").join(F.broadcast(hashes), "message_hash", "left_semi")
    received = _days_in(found, "received_date")
    copies = raw.where(F.col("received_date").isin(received)).join(F.broadcast(hashes), "message_hash", "left_semi")
    return dedup.corrections(dedup.keep_first(copies).select(*EVENTS.columns), _stored(wh, hashes), EVENTS.columns)


def _apply_events(wh: Warehouse, ops: DataFrame, commit: Commit, done: Refreshed) -> None:
    """Inserts, updates and deletes in one commit: an append when no stored row changes, else one ``MERGE``
    that reads the target only on the days whose stored rows change."""
    ops = ops.localCheckpoint()
    stored_days = set()
    for row in ops.groupBy("_op", "event_date").count().collect():
        done.counts[f"rows_{row._op}{'d' if row._op.endswith('e') else 'ed'}"] += row["count"]
        done.days[row.event_date] += row["count"]
        if row._op != "insert":
            stored_days.add(row.event_date)
    if not stored_days:
        wh.append(EVENTS, ops, commit)
        return
    values = {c: f"s.{c}" for c in EVENTS.columns}
    wh.merge(
        EVENTS, ops, f"t.event_date = s.event_date AND t.message_id = s.message_id AND {_in('t.event_date', stored_days)}",
        lambda m: m.whenMatchedDelete("s._op = 'delete'").whenMatchedUpdate("s._op = 'update'", values)
        .whenNotMatchedInsert("s._op != 'delete'", values),
        commit,
    )  # fmt: skip


# --- sessions -----------------------------------------------------------------------------------------


def refresh_sessions(wh: Warehouse, settings: Settings, repair: tuple[date, date] | None = None) -> Refreshed:
    """Recompute the chains that the events changed since the last run touch; with ``repair``, also every
    chain with an event or a session on those days."""
    at = ledger.position(wh, SESSIONS, EVENTS)
    rebuild, feed = _rebuilding(wh, at)
    if rebuild:
        wh.overwrite(SESSIONS, sessionize(wh.read(EVENTS, at.latest), settings), at.replacing)
        return _rebuilt(wh, SESSIONS, "session_date", at)
    done = Refreshed("incremental" if feed is not None else "up to date", at.latest)
    if feed is not None:
        columns = [*EVENT_COLUMNS, "event_date"]
        added = feed.where(F.col("_change_type").isin(*ADDED)).select(*columns)
        removed = feed.where(F.col("_change_type").isin(*REMOVED)).select(*columns)
        added, removed = added.exceptAll(removed).localCheckpoint(), removed.exceptAll(added)
        moments = added.unionByName(removed).select(
            "user_key", F.col("timestamp").alias("dirty_from"), F.col("timestamp").alias("dirty_to"))  # fmt: skip
        _resessionize(wh, settings, moments, added, at.latest, at.commit, done)
    if repair is not None:
        _resessionize(
            wh, settings, _repair_windows(wh, *repair), None, wh.version(EVENTS), _repair_commit(repair), done
        )
        done.how = "repaired"
    return done


def _repair_windows(wh: Warehouse, first: date, last: date) -> DataFrame:
    """Every user with an event or a session on ``first..last``, dirty over those whole days."""
    with_events = wh.read(EVENTS).where(F.col("event_date").between(first, last)).select("user_key")
    with_sessions = (
        wh.read(SESSIONS)
        .where((F.to_date("session_start") <= F.lit(last)) & (F.to_date("session_end") >= F.lit(first)))
        .select("user_key")
    )
    start, end = F.lit(first).cast("timestamp"), F.lit(last + timedelta(days=1)).cast("timestamp")
    return (
        with_events.union(with_sessions)
        .distinct()
        .select("user_key", start.alias("dirty_from"), (end - F.expr("INTERVAL 1 MICROSECOND")).alias("dirty_to"))
    )


def _resessionize(
    wh: Warehouse,
    settings: Settings,
    dirty: DataFrame,
    added: DataFrame | None,
    events_version: int,
    commit: Commit,
    done: Refreshed,
) -> None:
    """Recompute every chain holding a ``dirty`` span and write the difference in one commit.

    Chains near no stored session hold only ``added`` events and are sessionized from them; the others are
    read from ``events`` on their days only. Without ``added`` every chain is read from ``events``.
    """
    dirty = dirty.localCheckpoint()
    users = F.broadcast(dirty.select("user_key").distinct())
    stored = wh.read(SESSIONS).select(*chains.STORED_COLUMNS).join(users, "user_key", "left_semi").localCheckpoint()
    touched = chains.touched_chains(stored, dirty, settings.session_gap).localCheckpoint()
    read = touched if added is None else touched.where("has_stored")
    days = _days_in(
        read.select(F.explode(F.sequence(F.to_date("chain_start"), F.to_date("chain_end"))).alias("d")), "d"
    )
    events = wh.read(EVENTS, events_version).where(F.col("event_date").isin(days)).select(*EVENT_COLUMNS)
    fresh = chains.within(events, read)
    if added is not None:
        fresh = fresh.unionByName(chains.within(added.select(*EVENT_COLUMNS), touched.where("not has_stored")))
    ops = chains.changes(stored, touched, sessionize(fresh, settings).localCheckpoint()).localCheckpoint()
    stored_days = _summarise_sessions(ops, done)
    if not stored_days:
        wh.append(SESSIONS, ops, commit)
    else:
        values = {c: f"s.{c}" for c in SESSIONS.columns}
        wh.merge(
            SESSIONS, ops,
            f"t.session_date = s.session_date AND t.session_id = s.session_id AND {_in('t.session_date', stored_days)}",
            lambda m: m.whenMatchedDelete("s._op = 'delete'")
            .whenMatchedUpdate("s._op = 'renumber'", {"session_number": "s.session_number"})
            .whenMatchedUpdate("s._op = 'update'", values)
            .whenNotMatchedInsert("s._op IN ('insert', 'update')", values),
            commit,
        )  # fmt: skip
    _check_numbers(wh, ops, done)


def _summarise_sessions(ops: DataFrame, done: Refreshed) -> set[date]:
    """Counts per operation and day, the written sessions' top landing paths and sources (one query), and
    the days holding stored rows to change."""
    source = F.coalesce("utm_source", "referrer", F.lit("(direct)"))
    landing = F.coalesce("landing_path", F.lit("(none)"))
    summary = ops.groupBy("_op", "session_date", landing.alias("landing"), source.alias("source")).count().collect()
    stored_days, paths, sources = set(), Counter(), Counter()
    for row in summary:
        done.counts[f"sessions_{row._op}{'d' if row._op.endswith('e') else 'ed'}"] += row["count"]
        done.days[row.session_date] += row["count"]
        if row._op != "insert":
            stored_days.add(row.session_date)
        if row._op in ("insert", "update"):
            paths[row.landing] += row["count"]
            sources[row.source] += row["count"]
    for name, counter in (("top_landing_paths", paths), ("top_sources", sources)):
        ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
        done.tables[name] = [{"value": value, "sessions": n} for value, n in ranked]
    return stored_days


def _check_numbers(wh: Warehouse, ops: DataFrame, done: Refreshed) -> None:
    """The users written, and how many of them the table does not number 1..n in start order (an asset check
    of what was just committed)."""
    users = F.broadcast(ops.select("user_key").distinct())
    theirs = (
        wh.read(SESSIONS).select("user_key", "session_start", "session_number").join(users, "user_key", "left_semi")
    )
    expected = F.row_number().over(Window.partitionBy("user_key").orderBy("session_start"))
    wrong = theirs.withColumn("_expected", expected).groupBy("user_key").agg(
        F.max((F.col("_expected") != F.col("session_number")).cast("int")).alias("_wrong"))  # fmt: skip
    found = wrong.agg(F.count(F.lit(1)), F.coalesce(F.sum("_wrong"), F.lit(0))).head()
    done.counts["users_written"], done.counts["users_misnumbered"] = found[0], found[1]


# --- the snapshot -------------------------------------------------------------------------------------


def horizon(wh: Warehouse) -> date | None:
    """The data's horizon: the latest received day with a line in it, accepted or rejected (each a partition
    value of its table, which Delta answers from its log)."""
    latest = [wh.read(t).agg(F.max("received_date")).head()[0] for t in (RAW_EVENTS, REJECTED_EVENTS)]
    return max((d for d in latest if d is not None), default=None)


def refresh_snapshot(wh: Warehouse, settings: Settings, repair: bool = False) -> Refreshed:
    """Correct the transition totals by the difference the changed users' session days make, then rewrite
    the snapshot from the totals up to the horizon (``repair``: count every user afresh)."""
    at = ledger.position(wh, LIFECYCLE, SESSIONS)
    rebuild, feed = _rebuilding(wh, at)
    done = Refreshed("incremental" if feed is not None else "up to date", at.latest)
    if rebuild or repair:
        days = wh.read(SESSIONS, at.latest).select("user_key", F.col("session_date").alias("day"))
        wh.overwrite(LIFECYCLE, lifecycle.transitions(days, settings), at.replacing)
        done.how = "repaired" if repair else "rebuilt whole"
    elif feed is not None:
        sign = F.when(F.col("_change_type").isin(*ADDED), 1).otherwise(-1)
        net = feed.groupBy("user_key", F.col("session_date").alias("day")).agg(F.sum(sign).alias("net"))
        net = net.where("net != 0").localCheckpoint()
        users = F.broadcast(net.select("user_key").distinct())
        now = wh.read(SESSIONS, at.latest).join(users, "user_key", "left_semi").groupBy(
            "user_key", F.col("session_date").alias("day")).agg(F.count(F.lit(1)).alias("sessions"))  # fmt: skip
        before = now.join(net, ["user_key", "day"], "full_outer").select(
            "user_key", "day", (F.coalesce("sessions", F.lit(0)) - F.coalesce("net", F.lit(0))).alias("sessions")
        )
        # The users' transitions with their sessions now, minus those with their sessions before: one pass.
        timelines = now.withColumn("weight", F.lit(1)).unionByName(
            before.where("sessions > 0").withColumn("weight", F.lit(-1)))  # fmt: skip
        totals = lifecycle.combined(wh.read(LIFECYCLE), lifecycle.transitions(timelines, settings))
        wh.overwrite(LIFECYCLE, totals.localCheckpoint(), at.commit)
    last = horizon(wh)
    old = {(r.snapshot_date, r.state): r for r in wh.read(DAILY_SNAPSHOT).collect()}
    new = (
        {(r.snapshot_date, r.state): r for r in lifecycle.snapshot(wh.read(LIFECYCLE), last).collect()} if last else {}
    )
    for key in set(old) | set(new):
        if old.get(key) != new.get(key):
            done.days[key[0]] += 1
    if done.days:
        rows = wh.spark.createDataFrame(list(new.values()), DAILY_SNAPSHOT.schema)
        wh.overwrite(DAILY_SNAPSHOT, rows)
    done.counts["snapshot_rows_changed"] = sum(done.days.values())
    return done
