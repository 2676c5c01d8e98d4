"""``sessions``: the touched users' chains of sessions re-sessionized, renumbered and netted against what is stored."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import date, timedelta
from decimal import Decimal

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets.engine import chains
from sessions_assets.engine import days as local
from sessions_assets.engine.sessionize import SESSIONIZED, interval, sessionize
from sessions_assets.settings import Settings
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import Commit, Merge, Warehouse, on_days, op
from sessions_assets.warehouse.refresh.outcome import (
    Outcome,
    changes,
    days_in,
    rebuilding,
    rebuilt,
    repair_commit,
)
from sessions_assets.warehouse.tables import EVENTS, SESSIONS

# The materialization metadata counting each kind of session written.
METRICS = {
    "insert": "sessions_inserted",
    "update": "sessions_updated",
    "delete": "sessions_deleted",
    "renumber": "sessions_renumbered",
}


def refresh_sessions(wh: Warehouse, settings: Settings, repair: tuple[date, date] | None = None) -> Outcome:
    """Recompute the chains that the events changed since the last run touch; with ``repair``, also every
    chain with an event or a session on those days."""
    at = ledger.position(wh, SESSIONS, EVENTS, **{ledger.TIME_ZONE: settings.time_zone})  # session days
    rebuild, feed = rebuilding(wh, at)
    if rebuild:
        wh.overwrite(SESSIONS, sessionize(wh.read(EVENTS, at.latest), settings), at.replacing)
        return rebuilt(wh, SESSIONS, "session_date", at)
    done = Outcome("incremental" if feed is not None else "up to date", at.latest)
    if feed is not None:
        done.add(_absorb(wh, settings, feed, at))
    if repair is not None:
        done.add(_repair(wh, settings, repair))
        done.how = "repaired"
    return done


def _absorb(wh: Warehouse, settings: Settings, feed: DataFrame, at: ledger.Position) -> Outcome:
    """The chains the added and removed events fall in, recomputed: those near no stored session from the added
    events alone, the others from ``events`` on their days."""
    added, removed = changes(wh, feed, at, [*SESSIONIZED, "event_date"])
    added = added.localCheckpoint()
    moments = added if removed is None else added.unionByName(removed)
    moments = moments.select("user_key", F.col("timestamp").alias("dirty_from"), F.col("timestamp").alias("dirty_to"))

    def events_of(touched: DataFrame) -> DataFrame:
        stored = _stored_events(wh, settings, touched.where("has_stored"), at.latest)
        return stored.unionByName(chains.within(added.select(*SESSIONIZED), touched.where("not has_stored")))

    return _resessionize(wh, settings, moments, events_of, at.commit)


def _repair(wh: Warehouse, settings: Settings, days: tuple[date, date]) -> Outcome:
    """Every chain with an event or a session on ``days``, recomputed from ``events``."""
    windows = _repair_windows(wh, settings, *days)
    version = wh.version(EVENTS)
    return _resessionize(
        wh, settings, windows, lambda touched: _stored_events(wh, settings, touched, version), repair_commit(days)
    )


def _repair_windows(wh: Warehouse, settings: Settings, first: date, last: date) -> DataFrame:
    """Every user with an event or a session on the local days ``first..last``, dirty over those whole days and as
    far past them as a session started on ``last`` can reach (a cap): the sessions repaired are recomputed from
    events even where the stored ones that continued them are lost."""
    zone = settings.time_zone
    start, reach = local.day_start(first, zone), local.day_end(last, zone) + settings.max_session
    events = wh.read(EVENTS).where(F.col("event_date").between(first, local.day_of(reach, zone)))
    sessions = wh.read(SESSIONS).where(
        (F.col("session_date") <= F.lit(last)) & (local.local_date(F.col("session_end"), zone) >= F.lit(first))
    )
    return (
        events.select("user_key")
        .union(sessions.select("user_key"))
        .distinct()
        .select(
            "user_key",
            local.instant(start).alias("dirty_from"),
            local.instant(reach - timedelta(microseconds=1)).alias("dirty_to"),
        )
    )


def _stored_events(wh: Warehouse, settings: Settings, touched: DataFrame, version: int) -> DataFrame:
    """The events of ``touched`` chains, read from ``events`` (at ``version``) on the chains' local days only."""
    zone = settings.time_zone
    spanned = touched.select(
        F.explode(
            F.sequence(local.local_date(F.col("chain_start"), zone), local.local_date(F.col("chain_end"), zone))
        ).alias("d")
    )
    events = wh.read(EVENTS, version).where(F.col("event_date").isin(days_in(spanned, "d"))).select(*SESSIONIZED)
    return chains.within(events, touched)


def _resessionize(
    wh: Warehouse,
    settings: Settings,
    dirty: DataFrame,
    events_of: Callable[[DataFrame], DataFrame],
    commit: Commit,
) -> Outcome:
    """Recompute every chain holding a ``dirty`` span from its events (``events_of`` the touched chains) and
    write the difference in one commit. Of each touched user, only the sessions from a little before its earliest
    dirty moment are read (``_window``), with how many came before them."""
    dirty = dirty.localCheckpoint()
    # The session holding a dirty moment starts at most a cap before it, one that ends within a gap before it at
    # most a cap and a gap: from there on the stored sessions are read. Where a session starts depends only on the
    # events before it, so sessionizing a chain from the first one read is exact, however far back the chain goes.
    reach = settings.max_session + settings.session_gap
    windows = dirty.groupBy("user_key").agg((F.min("dirty_from") - interval(reach)).alias("window_from"))
    stored, offsets, since = _window(wh, settings, windows)
    with wh.broadcasts(stored.count()):  # a whole history's sessions are too many to broadcast
        touched = chains.touched_chains(stored, dirty, settings.session_gap).localCheckpoint()
        fresh = sessionize(events_of(touched), settings).localCheckpoint()
        ops = chains.writes(stored, touched, fresh, offsets).localCheckpoint()
        done, stored_days = _summarise_sessions(ops)
        if not stored_days:
            wh.append(SESSIONS, ops, commit)
        else:
            on = "t.session_date = s.session_date AND t.session_id = s.session_id"
            merge = (
                Merge(f"{on} AND {on_days('t.session_date', stored_days)}")
                .when_matched_delete(op("delete"))
                .when_matched_update(["session_number"], op("renumber"))
                .when_matched_update(SESSIONS.columns, op("update"))
                .when_not_matched_insert(SESSIONS.columns, op("insert", "update"))
            )
            wh.merge(SESSIONS, ops, merge, commit)
        done.counts.update(numbering_check(wh, ops, windows.join(offsets, "user_key", "left"), since))
    return done


def _window(wh: Warehouse, settings: Settings, windows: DataFrame) -> tuple[DataFrame, DataFrame, date]:
    """The stored sessions (``chains.STORED_COLUMNS``) of each user of ``windows`` (``user_key``, ``window_from``)
    that start in its window, and how many of its sessions start before it (``offset``): the days from the earliest
    window on are read, before it two narrow columns. Also returns the earliest window's day."""
    # A session's day is its start's local date: the days bound the reads exactly.
    since, last = windows.agg(
        *[local.local_date(f(F.col("window_from")), settings.time_zone) for f in (F.min, F.max)]
    ).head()
    if since is None:  # no user is dirty: read nothing
        since = last = date(9999, 12, 30)
    bounded = F.broadcast(windows)
    sessions = wh.read(SESSIONS)
    stored = (
        sessions.where(F.col("session_date") >= F.lit(since))
        .select(*chains.STORED_COLUMNS)
        .join(bounded, "user_key")
        .where(F.col("session_start") >= F.col("window_from"))
        .drop("window_from")
        .localCheckpoint()
    )
    offsets = (
        sessions.where(F.col("session_date") <= F.lit(last))
        .select("user_key", "session_start")
        .join(bounded, "user_key")
        .where(F.col("session_start") < F.col("window_from"))
        .groupBy("user_key")
        .agg(F.count(F.lit(1)).alias("offset"))
        .localCheckpoint()
    )
    return stored, offsets, since


def _summarise_sessions(ops: DataFrame) -> tuple[Outcome, set[date]]:
    """Counts per operation and day; of the sessions written, the top landing paths and sources, the count by
    channel, their conversions and revenue (one query); and the days holding stored rows to change."""
    done = Outcome("incremental")
    source = F.coalesce("utm_source", "referrer", F.lit("(direct)"))
    landing = F.coalesce("landing_path", F.lit("(none)"))
    keys = ("_op", "session_date", landing.alias("landing"), source.alias("source"), "default_channel_group")
    summary = (
        ops.groupBy(*keys)
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum("conversions").alias("conversions"),
            F.try_sum("revenue").alias("revenue"),
        )
        .collect()
    )
    stored_days, paths, sources, channels = set(), Counter(), Counter(), Counter()
    conversions, revenue = 0, Decimal(0)
    for row in summary:
        done.counts[METRICS[row._op]] += row.n
        done.days[row.session_date] += row.n
        if row._op != "insert":
            stored_days.add(row.session_date)
        if row._op in ("insert", "update"):
            paths[row.landing] += row.n
            sources[row.source] += row.n
            channels[row.default_channel_group or "(no rule matched)"] += row.n
            conversions += row.conversions or 0
            revenue += row.revenue or 0
    done.counts["conversions_written"] = conversions
    done.counts["revenue_written"] = float(revenue)
    for name, counter in (("top_landing_paths", paths), ("top_sources", sources), ("sessions_by_channel", channels)):
        ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[: 10 if name.startswith("top") else None]
        done.tables[name] = [{"value": value, "sessions": n} for value, n in ranked]
    return done, stored_days


def numbering_check(
    wh: Warehouse, ops: DataFrame, windows: DataFrame | None = None, since: date | None = None
) -> dict[str, int]:
    """The users written, and how many of them the table does not number in start order (an asset check of what
    was just committed): 1..n, or, given each user's window (``window_from``, ``offset``: the sessions before it)
    and the day the earliest starts (``since``), offset + 1.. over the sessions in its window."""
    users = F.broadcast(ops.select("user_key").distinct())
    sessions = wh.read(SESSIONS)
    if since is not None:
        sessions = sessions.where(F.col("session_date") >= F.lit(since))
    theirs = sessions.select("user_key", "session_start", "session_number").join(users, "user_key", "left_semi")
    offset = F.lit(0)
    if windows is not None:
        theirs = theirs.join(F.broadcast(windows), "user_key").where(F.col("session_start") >= F.col("window_from"))
        offset = F.coalesce(F.col("offset"), F.lit(0))
    expected = F.row_number().over(Window.partitionBy("user_key").orderBy("session_start")) + offset
    wrong = (
        theirs.withColumn("_expected", expected)
        .groupBy("user_key")
        .agg(F.max((F.col("_expected") != F.col("session_number")).cast("int")).alias("_wrong"))
    )
    found = wrong.agg(F.count(F.lit(1)), F.coalesce(F.sum("_wrong"), F.lit(0))).head()
    return {"users_written": found[0], "users_misnumbered": found[1]}
