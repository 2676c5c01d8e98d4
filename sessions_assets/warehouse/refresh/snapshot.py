"""``lifecycle`` and ``daily_snapshot``: transition totals corrected by the changed users' session days."""

from __future__ import annotations

from datetime import date

from pyspark.sql import functions as F

from sessions_assets.engine import lifecycle
from sessions_assets.settings import Settings
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import Commit, Warehouse
from sessions_assets.warehouse.refresh.outcome import ADDED, Refreshed, rebuilding
from sessions_assets.warehouse.tables import (
    DAILY_SNAPSHOT,
    LIFECYCLE,
    RAW_EVENTS,
    RECEIVED_DAYS,
    REJECTED_EVENTS,
    SESSIONS,
)


def horizon(wh: Warehouse) -> date | None:
    """The data's horizon: the latest received day with a line in it, accepted or rejected (each a partition
    value of its table, which Delta answers from its log)."""
    latest = [wh.read(t).agg(F.max("received_date")).head()[0] for t in (RAW_EVENTS, REJECTED_EVENTS)]
    return max((d for d in latest if d is not None), default=None)


def refresh_snapshot(wh: Warehouse, settings: Settings, repair: bool = False) -> Refreshed:
    """Correct the transition totals by the difference the changed users' session days make, then rewrite
    the snapshot from the totals up to the horizon (``repair``: count every user afresh)."""
    at = ledger.position(wh, LIFECYCLE, SESSIONS)
    # The horizon moves with every ingest, also one that changes no accepted row (a day of rejects only):
    # the totals' note records the received_days version whose horizon the snapshot was summed up to.
    ingested = ledger.position(wh, LIFECYCLE, RECEIVED_DAYS)
    note = {ledger.ABSORBED: {SESSIONS.name: at.latest, RECEIVED_DAYS.name: ingested.latest}}
    rebuild, feed = rebuilding(wh, at)
    done = Refreshed("incremental" if feed is not None else "up to date", at.latest)
    totals, commit = wh.read(LIFECYCLE), None
    if rebuild or repair:
        days = wh.read(SESSIONS, at.latest).select("user_key", F.col("session_date").alias("day"))
        totals, commit = lifecycle.transitions(days, settings).localCheckpoint(), Commit(note)
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
        totals = lifecycle.combined(totals, lifecycle.transitions(timelines, settings)).localCheckpoint()
        # The transaction makes the difference applied once, even by two runs that computed it.
        commit = Commit(note, at.commit.txn)
    elif not ingested.current:
        commit = Commit(note)  # the totals as they are, summed up to a new horizon
    # The snapshot is written before the totals it is summed from: the totals' commit, with its note, is what
    # says this step is done, so a run that dies between the two is redone whole by the next.
    last = horizon(wh)
    old = {(r.snapshot_date, r.state): r for r in wh.read(DAILY_SNAPSHOT).collect()}
    new = {(r.snapshot_date, r.state): r for r in lifecycle.snapshot(totals, last).collect()} if last else {}
    for key in set(old) | set(new):
        if old.get(key) != new.get(key):
            done.days[key[0]] += 1
    if done.days:
        rows = wh.spark.createDataFrame(list(new.values()), DAILY_SNAPSHOT.schema)
        wh.overwrite(DAILY_SNAPSHOT, rows)
    if commit is not None:
        wh.overwrite(LIFECYCLE, totals, commit)
    done.counts["snapshot_rows_changed"] = sum(done.days.values())
    return done
