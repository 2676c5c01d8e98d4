"""``lifecycle`` and ``daily_snapshot``: transition totals corrected by the changed users' session days."""

from __future__ import annotations

from pyspark.sql import functions as F

from sessions_assets.engine import lifecycle
from sessions_assets.settings import Settings
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import Commit, Warehouse
from sessions_assets.warehouse.refresh.outcome import ADDED, Outcome, rebuilding
from sessions_assets.warehouse.tables import (
    DAILY_SNAPSHOT,
    LIFECYCLE,
    RECEIVED_DAYS,
    SESSIONS,
)


def refresh_snapshot(wh: Warehouse, settings: Settings, repair: bool = False) -> Outcome:
    """Correct the transition totals by the difference the changed users' session days make, then rewrite
    the snapshot from the totals up to the horizon (``repair``: count every user afresh)."""
    at = ledger.position(wh, LIFECYCLE, SESSIONS)
    rebuild, feed = rebuilding(wh, at)
    done = Outcome("incremental" if feed is not None else "up to date", at.latest)
    if rebuild or repair:
        days = wh.read(SESSIONS, at.latest).select("user_key", F.col("session_date").alias("day"))
        wh.overwrite(LIFECYCLE, lifecycle.transitions(days, settings), at.replacing)
        done.how = "repaired" if repair else "rebuilt whole"
    elif feed is not None:
        sign = F.when(F.col("_change_type").isin(*ADDED), 1).otherwise(-1)
        net = feed.groupBy("user_key", F.col("session_date").alias("day")).agg(F.sum(sign).alias("net"))
        net = net.where("net != 0").localCheckpoint()
        users = F.broadcast(net.select("user_key").distinct())
        now = (
            wh.read(SESSIONS, at.latest)
            .join(users, "user_key", "left_semi")
            .groupBy("user_key", F.col("session_date").alias("day"))
            .agg(F.count(F.lit(1)).alias("sessions"))
        )
        before = now.join(net, ["user_key", "day"], "full_outer").select(
            "user_key", "day", (F.coalesce("sessions", F.lit(0)) - F.coalesce("net", F.lit(0))).alias("sessions")
        )
        # The users' transitions with their sessions now, minus those with their sessions before: one pass.
        timelines = now.withColumn("weight", F.lit(1)).unionByName(
            before.where("sessions > 0").withColumn("weight", F.lit(-1))
        )
        # The totals the note describes, whatever another run committed since: its transaction id then makes
        # this commit a no-op rather than a second application of the same difference.
        stored = wh.read(LIFECYCLE, at.version)
        totals = lifecycle.combined(stored, lifecycle.transitions(timelines, settings))
        wh.overwrite(LIFECYCLE, totals.localCheckpoint(), at.commit)
    done.add(_sum_snapshot(wh))
    return done


def _sum_snapshot(wh: Warehouse) -> Outcome:
    """Rewrite the snapshot from the committed totals up to the horizon when a row differs or its note is behind:
    the note names the ``lifecycle`` and ``received_days`` versions it was summed from, so a run that died before
    this write, or lost a race to a newer one, leaves the snapshot behind and the next refresh redoes it."""
    ingested, totals = wh.version(RECEIVED_DAYS), wh.version(LIFECYCLE)  # before the horizon is read
    note = {ledger.ABSORBED: {LIFECYCLE.name: totals, RECEIVED_DAYS.name: ingested}}
    last = ledger.horizon(wh.storage)
    old = {(r.snapshot_date, r.state): r for r in wh.read(DAILY_SNAPSHOT).collect()}
    summed = lifecycle.snapshot(wh.read(LIFECYCLE, totals), last).collect() if last else []
    new = {(r.snapshot_date, r.state): r for r in summed}
    done = Outcome()
    for key in set(old) | set(new):
        if old.get(key) != new.get(key):
            done.days[key[0]] += 1
    noted = next((n for _, n in wh.log(DAILY_SNAPSHOT).notes(1)), {})
    if done.days or noted != note:
        wh.overwrite(DAILY_SNAPSHOT, wh.spark.createDataFrame(list(new.values()), DAILY_SNAPSHOT.schema), Commit(note))
    done.counts["snapshot_rows_changed"] = sum(done.days.values())
    return done
