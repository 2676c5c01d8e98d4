"""``events``: the first-received copy of each message, from the received days ingested since the last step,
each with its person as ``user_key`` (``engine/identity.py``)."""

from __future__ import annotations

from datetime import date

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.engine import dedup, identity
from sessions_assets.settings import Settings
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import Commit, Warehouse, assign, insert, on_days
from sessions_assets.warehouse.refresh.outcome import Outcome, days_in, rebuilding, rebuilt, repair_commit
from sessions_assets.warehouse.tables import EVENTS, RAW_EVENTS

STITCHED = "stitched"
# The materialization metadata counting each kind of row written.
METRICS = {"insert": "rows_inserted", "update": "rows_updated", "delete": "rows_deleted"}


def refresh_events(wh: Warehouse, settings: Settings, repair: tuple[date, date] | None = None) -> Outcome:
    """Absorb the received days ingested since the last run; with ``repair``, also recompute those event days."""
    at = ledger.position(wh, EVENTS, RAW_EVENTS)
    rebuild, feed = rebuilding(wh, at)
    stitched = {STITCHED: settings.stitch_identities}  # noted with each commit: a switch rebuilds the table
    if rebuild or at.note.get(STITCHED, False) != settings.stitch_identities:
        kept = dedup.keep_first(wh.read(RAW_EVENTS, at.latest)).select(*EVENTS.columns)
        if settings.stitch_identities:
            kept = kept.localCheckpoint()  # read twice: its links, then its rows
            kept = identity.stitch(kept, identity.persons(kept))
        wh.overwrite(EVENTS, kept, Commit(at.replacing.note | stitched))
        return rebuilt(wh, EVENTS, "event_date", at)
    done = Outcome("incremental" if feed is not None else "up to date", at.latest)
    if feed is not None:
        ingested = _ingested(wh, at)
        with wh.broadcasts(sum(int(m.get("numOutputRows", 0)) for m in ingested)):
            if any(int(m.get("numRemovedFiles", 0)) for m in ingested):  # a received day re-ingested, other rows
                change = _corrections(wh, feed.select("message_hash").distinct(), at.latest)
            else:
                change = _arrivals(wh, feed.where(F.col("_change_type") == "insert").drop("_change_type"))
            done.add(_apply_events(wh, change, Commit(at.commit.note | stitched, at.commit.txn), settings))
    if repair is not None:
        on_repaired_days = F.col("event_date").between(*repair)
        stored = wh.read(EVENTS).where(on_repaired_days).select("message_hash", "anonymous_id").localCheckpoint()
        with wh.broadcasts(stored.count()):
            copies = wh.read(RAW_EVENTS).where(on_repaired_days).select("message_hash")
            hashes = stored.select("message_hash").union(copies).distinct()
            corrections = _corrections(wh, hashes, wh.version(RAW_EVENTS))
            anonymous = stored.select("anonymous_id")  # their persons are decided afresh too
            done.add(_apply_events(wh, corrections, repair_commit(repair), settings, anonymous))
        done.how = "repaired"
    return done


def _ingested(wh: Warehouse, at: ledger.Position) -> list[dict[str, str]]:
    """The ``operationMetrics`` of ``raw_events``' data commits since ``at.absorbed``: rows written and files
    removed, known without reading any data."""
    log = wh.log(RAW_EVENTS)
    commits = (log.commit_info(v) for v in range(at.absorbed + 1, at.latest + 1))
    return [c.get("operationMetrics", {}) for c in commits if c.get("operation") not in ledger.NO_DATA_CHANGE]


def _stored(wh: Warehouse, hashes: DataFrame) -> DataFrame:
    """The stored rows of messages with these hashes: one scan of the narrow hash column finds their days,
    then only those days are read whole."""
    events = wh.read(EVENTS)
    found = events.select("message_hash", "event_date").join(F.broadcast(hashes), "message_hash", "left_semi")
    days = days_in(found, "event_date")
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
    received = days_in(found, "received_date")
    copies = raw.where(F.col("received_date").isin(received)).join(F.broadcast(hashes), "message_hash", "left_semi")
    wanted = dedup.keep_first(copies).select(*EVENTS.columns)
    # ``user_key`` is compared by the stitching that follows (``_stitched``): the copies carry the raw identity.
    return dedup.corrections(wanted, _stored(wh, hashes), EVENTS.columns, ignored=("user_key",))


def _stitched(wh: Warehouse, ops: DataFrame, replaces: bool, also: DataFrame | None) -> tuple[DataFrame, Outcome]:
    """``ops`` with each written event's person, and the stored events that change person as updates.

    The anonymous ids of ``ops`` (with those of the rows they replace when ``replaces``, and ``also``) are
    looked up in one scan of narrow columns of ``events``: with the links ``ops`` write, that is every link of
    those ids, so each id's person is decided afresh. Stored anonymous events of those ids whose person is not
    that one move to it, on whatever day they are."""
    ids = ops.select("anonymous_id")
    if replaces:  # a row replaced on its day may have carried another anonymous id: its person is decided too
        hashes = F.broadcast(ops.where("_op = 'update'").select("message_hash", "message_id"))
        ids = ids.union(
            wh.read(EVENTS)
            .select("message_hash", "message_id", "anonymous_id")
            .join(hashes, ["message_hash", "message_id"], "left_semi")
            .select("anonymous_id")
        )
    if also is not None:
        ids = ids.union(also)
    ids = F.broadcast(ids.where("anonymous_id IS NOT NULL").distinct().localCheckpoint())
    narrow = (*identity.LINK_COLUMNS, "user_key", "event_date")
    stored = (
        wh.read(EVENTS)
        .select(*narrow)
        .join(ids, "anonymous_id", "left_semi")
        .join(F.broadcast(ops.select("message_id")), "message_id", "left_anti")  # ops say what they become
        .localCheckpoint()
    )
    written = ops.where("_op != 'delete'")
    persons = identity.persons(stored.unionByName(written.select(*narrow))).localCheckpoint()
    moved = (
        identity.stitch(stored.where("user_id IS NULL").withColumn("_was", F.col("user_key")), persons)
        .where(F.col("user_key") != F.col("_was"))
        .select("message_id", "event_date", "user_key", "anonymous_id")
        .localCheckpoint()
    )
    done, anonymous = Outcome("incremental"), set()
    for row in moved.groupBy("event_date").agg(F.count(F.lit(1)), F.collect_set("anonymous_id")).collect():
        done.days[row[0]] += row[1]
        done.counts["events_moved_to_another_person"] += row[1]
        done.counts[METRICS["update"]] += row[1]
        anonymous.update(row[2])
    done.counts["anonymous_ids_moved"] = len(anonymous)
    rows = wh.read(EVENTS).where(F.col("event_date").isin(sorted(done.days))).drop("user_key")
    updates = rows.join(F.broadcast(moved.drop("anonymous_id")), ["message_id", "event_date"]).select(*EVENTS.columns)
    return (
        identity.stitch(written, persons)
        .unionByName(ops.where("_op = 'delete'"))
        .unionByName(updates.withColumn("_op", F.lit("update"))),
        done,
    )


def _apply_events(
    wh: Warehouse, ops: DataFrame, commit: Commit, settings: Settings, anonymous: DataFrame | None = None
) -> Outcome:
    """Inserts, updates and deletes in one commit: an append when no stored row changes, else one ``MERGE``
    that reads the target only on the days whose stored rows change. With identities stitched, the events of
    the anonymous ids written (and of ``anonymous``) go to their persons in the same commit."""
    ops, done, stored_days = ops.localCheckpoint(), Outcome("incremental"), set()
    for row in ops.groupBy("_op", "event_date").count().collect():
        done.counts[METRICS[row._op]] += row["count"]
        done.days[row.event_date] += row["count"]
        if row._op != "insert":
            stored_days.add(row.event_date)
    with wh.compiled(sum(done.days.values())):  # a day of many events: its stitching and write run compiled
        if settings.stitch_identities:
            ops, moved = _stitched(wh, ops, done.counts[METRICS["update"]] > 0, anonymous)
            ops = ops.localCheckpoint()
            done.add(moved)
            stored_days.update(moved.days)
        _write(wh, ops, stored_days, commit)
    return done


def _write(wh: Warehouse, ops: DataFrame, stored_days: set[date], commit: Commit) -> None:
    """An append when no stored row changes, else one ``MERGE`` that reads the target on ``stored_days`` only."""
    if not stored_days:
        wh.append(EVENTS, ops, commit)
        return
    wh.merge(
        EVENTS,
        ops,
        f"t.event_date = s.event_date AND t.message_id = s.message_id AND {on_days('t.event_date', stored_days)}",
        [
            "WHEN MATCHED AND s._op = 'delete' THEN DELETE",
            f"WHEN MATCHED AND s._op = 'update' THEN UPDATE SET {assign(EVENTS.columns)}",
            f"WHEN NOT MATCHED AND s._op != 'delete' THEN INSERT {insert(EVENTS.columns)}",
        ],
        commit,
    )
