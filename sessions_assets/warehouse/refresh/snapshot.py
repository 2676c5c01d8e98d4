"""``lifecycle`` and ``daily_snapshot``: transition totals corrected by the changed users' session days, and the
snapshot rewritten from the earliest day those totals (or the horizon) changed."""

from __future__ import annotations

from datetime import date, timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.engine import days, lifecycle
from sessions_assets.settings import Settings
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import Commit, Warehouse
from sessions_assets.warehouse.refresh.outcome import ADDED, Outcome, rebuilding
from sessions_assets.warehouse.tables import DAILY_SNAPSHOT, LIFECYCLE, RECEIVED_DAYS, SESSIONS

# The snapshot's note names the day up to which it was summed: a moved horizon rewrites the days past the older one.
HORIZON = "horizon"
# "From the first day on": a rebuilt or repaired lifecycle, or a snapshot whose note is not the totals' last.
EVERY_DAY = date.min


def refresh_snapshot(wh: Warehouse, settings: Settings, repair: bool = False) -> Outcome:
    """Correct the transition totals by the difference the changed users' session days make, then rewrite the
    snapshot's days from the earliest one whose totals changed (``repair``: count every user afresh)."""
    at = ledger.position(wh, LIFECYCLE, SESSIONS, **{ledger.TIME_ZONE: settings.time_zone})  # the days it counts
    rebuild, feed = rebuilding(wh, at)
    done = Outcome("incremental" if feed is not None else "up to date", at.latest)
    before = wh.version(LIFECYCLE)  # the totals the snapshot may already reflect
    changed_from: date | None = None
    if rebuild or repair:
        days = wh.read(SESSIONS, at.latest).select("user_key", F.col("session_date").alias("day"))
        wh.overwrite(LIFECYCLE, lifecycle.transitions(days, settings), at.replacing)
        done.how, changed_from = ("repaired" if repair else "rebuilt whole"), EVERY_DAY
    elif feed is not None:
        difference = _difference(wh, settings, feed, at.latest).localCheckpoint()
        changed_from = difference.agg(F.min("day")).head()[0]
        # The totals the note describes, whatever another run committed since: its transaction id then makes
        # this commit a no-op rather than a second application of the same difference.
        totals = lifecycle.combined(wh.read(LIFECYCLE, at.version), difference)
        wh.overwrite(LIFECYCLE, totals, at.commit)
    done.add(_sum_snapshot(wh, settings, changed_from, before))
    return done


def _difference(wh: Warehouse, settings: Settings, feed: DataFrame, version: int) -> DataFrame:
    """The transitions of the users whose session days changed, with their days now, minus those with their days
    before: one pass over the changed users' session days."""
    sign = F.when(F.col("_change_type").isin(*ADDED), 1).otherwise(-1)
    net = feed.groupBy("user_key", F.col("session_date").alias("day")).agg(F.sum(sign).alias("net"))
    net = net.where("net != 0").localCheckpoint()
    users = F.broadcast(net.select("user_key").distinct())
    now = (
        wh.read(SESSIONS, version)
        .join(users, "user_key", "left_semi")
        .groupBy("user_key", F.col("session_date").alias("day"))
        .agg(F.count(F.lit(1)).alias("sessions"))
    )
    before = now.join(net, ["user_key", "day"], "full_outer").select(
        "user_key", "day", (F.coalesce("sessions", F.lit(0)) - F.coalesce("net", F.lit(0))).alias("sessions")
    )
    timelines = now.withColumn("weight", F.lit(1)).unionByName(
        before.where("sessions > 0").withColumn("weight", F.lit(-1))
    )
    return lifecycle.transitions(timelines, settings)


def _first_day_to_rewrite(noted: dict, changed_from: date | None, before: int, totals: int, last: date | None):
    """The first snapshot day whose rows may differ from those stored (``EVERY_DAY``: all), or None: none.

    The stored rows were summed from the totals at the version their note names, up to the horizon it names: if
    that is the version this step started from, only the days from the step's earliest changed day on can differ,
    and past the older horizon; if it is the totals' latest, only past the older horizon; otherwise, any day."""
    summed = noted.get(ledger.ABSORBED, {}).get(LIFECYCLE.name)
    if summed == totals and totals != before:  # another run applied this difference and summed it already
        changed_from = None
    elif summed != before or HORIZON not in noted:
        return EVERY_DAY
    old = date.fromisoformat(noted[HORIZON]) if noted[HORIZON] else None
    if old != last:
        moved = EVERY_DAY if old is None or last is None else min(old, last) + timedelta(days=1)
        changed_from = moved if changed_from is None else min(changed_from, moved)
    return changed_from


def _sum_snapshot(wh: Warehouse, settings: Settings, changed_from: date | None, before: int) -> Outcome:
    """Rewrite the snapshot's days from the first that may differ (``_first_day_to_rewrite``) from the committed
    totals, in one ``replaceWhere``. Its note names the ``lifecycle`` and ``received_days`` versions and the horizon
    it was summed to, so a run that died before this write, or lost a race to a newer one, leaves the snapshot
    behind and the next refresh sums it again. The horizon is the last local day that has ended by the end of the
    latest received day."""
    ingested, totals = wh.version(RECEIVED_DAYS), wh.version(LIFECYCLE)  # before the horizon is read
    received = ledger.horizon(wh.storage)
    last = None if received is None else days.horizon(received, settings.time_zone)
    note = {
        ledger.ABSORBED: {LIFECYCLE.name: totals, RECEIVED_DAYS.name: ingested},
        HORIZON: last.isoformat() if last else None,
    }
    noted = next((n for _, n in wh.log(DAILY_SNAPSHOT).notes(ledger.NOTE_HISTORY)), {})
    done = Outcome()
    first = _first_day_to_rewrite(noted, changed_from if totals != before else None, before, totals, last)
    if first is None and noted == note:
        return done
    if first is None:  # nothing differs: the note alone moves
        first = EVERY_DAY if last is None else last + timedelta(days=1)
    where = f"snapshot_date >= DATE'{first.isoformat()}'"
    if last is None:
        fresh = wh.spark.createDataFrame([], DAILY_SNAPSHOT.schema)
    else:
        # A row per day and state: compared with the stored rows, then written, from one read of the totals.
        fresh = lifecycle.snapshot(wh.read(LIFECYCLE, totals), last).where(where).localCheckpoint()
    stored = wh.read(DAILY_SNAPSHOT).where(where)
    on = (F.col("s.snapshot_date") == F.col("f.snapshot_date")) & (F.col("s.state") == F.col("f.state"))
    same = F.lit(True)
    for c in DAILY_SNAPSHOT.columns:
        same = same & F.col(f"s.{c}").eqNullSafe(F.col(f"f.{c}"))
    joined = stored.alias("s").join(fresh.alias("f"), on, "full_outer").where(~same)
    for row in joined.groupBy(F.coalesce("s.snapshot_date", "f.snapshot_date")).count().collect():
        done.days[row[0]] += row[1]
    wh.replace_where(DAILY_SNAPSHOT, fresh, where, Commit(note))
    done.counts["snapshot_rows_changed"] = sum(done.days.values())
    if first == EVERY_DAY and last is not None:  # summed from the first day that has a row (rare: a rebuild)
        first = fresh.agg(F.min("snapshot_date")).head()[0] or last + timedelta(days=1)
    done.counts["snapshot_days_summed"] = 0 if last is None or last < first else (last - first).days + 1
    return done
