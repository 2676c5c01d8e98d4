"""``users``: the rows of the persons whose sessions or events changed since the last step, moved on by what changed.

A person's row is a function of its sessions and the ids its events carry (``identities``, which tallies them), so
the step notes the version of ``sessions`` and ``events`` it absorbed and rewrites every person either feed names:
its counts and sums by the sessions added and removed, its ids from its tallies (``engine/users.py`` ``advanced``).
Only a person whose earliest or latest session went with nothing in its place is recounted from all its sessions.
A person written while ``sessions`` lags behind ``events`` is written again when ``sessions`` catches up (its feed
names the person then).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.engine.users import IDENTIFIED, SESSION_FACTS, advanced, users
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import Commit, Merge, Warehouse
from sessions_assets.warehouse.refresh import identities
from sessions_assets.warehouse.refresh.outcome import Outcome, net_changes, read_once
from sessions_assets.warehouse.tables import EVENTS, IDENTITIES, SESSIONS, USERS

REBUILD = "rebuild"  # a feed whose changes are unknown: the table is rebuilt whole
# Noted with each commit: rows written before the table kept ``revenue_sessions`` cannot be added to.
ADDITIVE = "additive"


def refresh_users(wh: Warehouse, repair: bool = False) -> Outcome:
    """Rewrite the persons the sessions and events changed since the last run touch (``repair``: all)."""
    identities.catch_up(wh)  # the ids each person's events carry, as of the events read below
    at = [ledger.position(wh, USERS, source) for source in (SESSIONS, EVENTS)]
    commit = Commit({ledger.ABSORBED: {p.source.name: p.latest for p in at}, ADDITIVE: True})
    feeds = [] if repair else [_feed(wh, p) for p in at]
    if repair or any(f is REBUILD for f in feeds) or not at[0].note.get(ADDITIVE):
        wh.overwrite(USERS, users(wh.read(SESSIONS, at[0].latest), wh.read(IDENTITIES)), commit)
        done = Outcome("repaired" if repair else "rebuilt whole", at[0].latest)
        done.counts["persons"] = wh.read(USERS).count()
        return done
    if all(f is None for f in feeds):
        return Outcome("up to date", at[0].latest)
    done = Outcome("incremental", at[0].latest)
    done.counts.update(_write_persons(wh, *feeds, at[0].latest, commit))
    if ledger.raced(wh, at[0]):
        return refresh_users(wh, repair=True)
    return done


def _feed(wh: Warehouse, at: ledger.Position) -> DataFrame | str | None:
    """The input's changes since the note (None: none), or ``REBUILD`` when they are unknown."""
    if at.absorbed is None:
        return REBUILD
    if at.current:
        return None
    feed = ledger.unabsorbed(wh, at)
    return REBUILD if feed is None else feed


def _write_persons(
    wh: Warehouse, sessions: DataFrame | None, events: DataFrame | None, version: int, commit: Commit
) -> dict[str, int]:
    """The rows of the persons the feeds name, moved on by their sessions added and removed (recounted where that
    cannot tell), with their ids from their tallies; those left with no session removed; in one ``MERGE``."""
    named = [] if events is None else [events.select("user_key")]
    no_ids = wh.read(IDENTITIES).select(*IDENTIFIED).limit(0)  # the ids are joined below, for every person
    if sessions is None:
        added = removed = wh.read(SESSIONS).select(*SESSION_FACTS).limit(0)
    else:
        # A renumbered session changes nothing of its person's row: its two images cancel out.
        changed = read_once(sessions, SESSION_FACTS)
        added, removed = net_changes(changed)
        named.append(changed.select("user_key"))
    persons = (named[0] if len(named) == 1 else named[0].union(named[1])).distinct().localCheckpoint()
    theirs = F.broadcast(persons)
    stored = persons.join(wh.read(USERS), "user_key", "left")
    moved = advanced(stored, added, removed).localCheckpoint()
    recount = [r[0] for r in moved.where("recount").select("user_key").collect()]
    rows = moved.where(~F.col("recount")).drop("recount")
    if recount:
        again = F.broadcast(wh.spark.createDataFrame([(k,) for k in recount], "user_key string"))
        recounted = users(wh.read(SESSIONS, version).join(again, "user_key", "left_semi"), no_ids)
        rows = rows.unionByName(recounted)
    ids = (
        wh.read(IDENTITIES)
        .select(*IDENTIFIED)
        .join(theirs, "user_key", "left_semi")
        .groupBy("user_key")
        .agg(F.max("user_id").alias("_user_id"), F.count_distinct("anonymous_id").alias("_anonymous_ids"))
    )
    rows = (
        rows.join(ids, "user_key", "left")
        .withColumn("user_id", F.col("_user_id"))
        .withColumn("anonymous_ids", F.coalesce("_anonymous_ids", F.lit(0)))
        .withColumn("_gone", F.coalesce(F.col("sessions") <= 0, F.lit(True)))
        .select(*USERS.columns, "_gone")
    )
    merge = (
        Merge("t.user_key = s.user_key")
        .when_matched_delete("s._gone")
        .when_matched_update(USERS.columns)
        .when_not_matched_insert(USERS.columns, "NOT s._gone")
    )
    wh.merge(USERS, rows, merge, commit)
    log = wh.log(USERS)
    metrics = {k: int(v) for k, v in log.commit_info(log.version()).get("operationMetrics", {}).items()}
    written = metrics.get("numTargetRowsInserted", 0) + metrics.get("numTargetRowsUpdated", 0)
    return {
        "persons_written": written,
        "persons_removed": metrics.get("numTargetRowsDeleted", 0),
        "persons_recounted": len(recount),
    }
