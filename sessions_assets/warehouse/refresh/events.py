"""``events``: the first-received copy of each message, from the received days ingested since the last step,
each with its person as ``user_key`` (``engine/identity.py``)."""

from __future__ import annotations

from datetime import date, timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.engine import dedup, identity
from sessions_assets.settings import Settings
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import Commit, Merge, Warehouse, on_days, op
from sessions_assets.warehouse.refresh import identities
from sessions_assets.warehouse.refresh.outcome import Outcome, days_in, rebuilding, rebuilt, repair_commit
from sessions_assets.warehouse.tables import EVENTS, RAW_EVENTS

# The materialization metadata counting each kind of row written.
METRICS = {"insert": "rows_inserted", "update": "rows_updated", "delete": "rows_deleted"}


def refresh_events(wh: Warehouse, settings: Settings, repair: tuple[date, date] | None = None) -> Outcome:
    """Absorb the received days ingested since the last run; with ``repair``, also recompute those event days."""
    identities.catch_up(wh)  # a run killed between the events' commit and its own left it behind
    # The zone (event days) and stitching (persons) are noted with each commit: a switch rebuilds the table.
    at = ledger.position(
        wh, EVENTS, RAW_EVENTS, **{ledger.TIME_ZONE: settings.time_zone, ledger.STITCHED: settings.stitch_identities}
    )
    rebuild, feed = rebuilding(wh, at)
    if rebuild:
        kept = dedup.keep_first(wh.read(RAW_EVENTS, at.latest)).select(*EVENTS.columns)
        if settings.stitch_identities:
            kept = kept.localCheckpoint()  # read twice: its links, then its rows
            kept = identity.stitch(kept, identity.persons(kept))
        wh.overwrite(EVENTS, kept, at.replacing)
        identities.catch_up(wh, rebuild=True)
        return rebuilt(wh, EVENTS, "event_date", at)
    done = Outcome("incremental" if feed is not None else "up to date", at.latest)
    if feed is not None:
        ingested = ledger.data_commits(wh, at)  # the rows written, and whether any commit took rows out
        with wh.broadcasts(sum(int(c.get("operationMetrics", {}).get("numOutputRows", 0)) for c in ingested)):
            if not all(map(ledger.only_adds, ingested)):  # a day re-ingested with other rows, an erasure
                change = _corrections(wh, feed.select("message_hash").distinct(), at.latest)
            else:
                change = _arrivals(wh, feed.where(F.col("_change_type") == "insert").drop("_change_type"))
            done.add(_apply_events(wh, change, at.commit, settings))
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


# What the arrivals of new copies compare, and what stitching reads, of a stored row: no row is read whole.
NARROW = ("message_hash", "message_id", "event_date", "received_at", "received_date", *identity.LINK_COLUMNS[1:])


def _stored(wh: Warehouse, hashes: DataFrame, columns=EVENTS.columns) -> DataFrame | None:
    """The stored rows of messages with these hashes (only ``columns``): one scan of the narrow hash column finds
    their days, then only those days are read. None: no message is stored yet (a day of new visits)."""
    events = wh.read(EVENTS)
    found = events.select("message_hash", "event_date").join(F.broadcast(hashes), "message_hash", "left_semi")
    days = days_in(found, "event_date")
    if not days:
        return None
    on_days_found = events.where(F.col("event_date").isin(days)).select(*dict.fromkeys(columns))
    return on_days_found.join(F.broadcast(hashes), "message_hash", "left_semi")


def _none_stored(wh: Warehouse, columns=EVENTS.columns) -> DataFrame:
    """No stored row, as a frame of ``columns`` that reads nothing."""
    return wh.spark.createDataFrame([], EVENTS.schema).select(*dict.fromkeys(columns))


def _arrivals(wh: Warehouse, copies: DataFrame) -> tuple[DataFrame, DataFrame]:
    """New copies only: each message's first new copy against the stored one (matched on the id itself). Returns
    the writes and the stored rows they may replace."""
    incoming = dedup.keep_first(copies).select(*EVENTS.columns).localCheckpoint()
    stored = _stored(wh, incoming.select("message_hash").distinct(), NARROW)
    if stored is None:
        stored = _none_stored(wh, NARROW)
    else:
        stored = stored.join(incoming.select("message_id"), "message_id", "left_semi").localCheckpoint()
    padded = stored.select(*[F.col(c) if c in NARROW else F.lit(None).alias(c) for c in EVENTS.columns])
    return dedup.arrivals(incoming, padded, EVENTS.columns), stored


def _corrections(wh: Warehouse, hashes: DataFrame, raw_version: int) -> tuple[DataFrame, DataFrame]:
    """Every copy of these messages, wherever received, decides their rows afresh. Returns the writes and the
    stored rows they may replace."""
    hashes = hashes.localCheckpoint()
    raw = wh.read(RAW_EVENTS, raw_version)
    found = raw.select("message_hash", "received_date").join(F.broadcast(hashes), "message_hash", "left_semi")
    received = days_in(found, "received_date")
    copies = raw.where(F.col("received_date").isin(received)).join(F.broadcast(hashes), "message_hash", "left_semi")
    wanted = dedup.keep_first(copies).select(*EVENTS.columns)
    stored = _stored(wh, hashes)
    stored = _none_stored(wh) if stored is None else stored.localCheckpoint()
    # ``user_key`` is compared by the stitching that follows (``_stitched``): the copies carry the raw identity.
    return dedup.corrections(wanted, stored, EVENTS.columns, ignored=("user_key",)), stored.select(*NARROW)


def _links(rows: DataFrame) -> DataFrame:
    """The links among rows: those carrying both ids (``identity.LINK_COLUMNS``)."""
    return rows.where("user_id IS NOT NULL AND anonymous_id IS NOT NULL").select(*identity.LINK_COLUMNS)


def _stitched(
    wh: Warehouse, ops: DataFrame, replaced: DataFrame | None, also: DataFrame | None
) -> tuple[DataFrame, Outcome]:
    """``ops`` with each written event's person, and the stored events that change person as ``restitch`` rows.

    The persons of the anonymous ids the ops write, delete or replace (and ``also``) are decided afresh from their
    stored latest links (``identities``) and the links written; where a stored link is replaced by other content
    or deleted, that id's links are read again from ``events``. Stored anonymous events of an id whose person
    changes move to the new one, on whatever day they are: the id's tallies say which days to read. ``replaced``
    None: the ops only insert."""
    written = ops.where("_op != 'delete'")
    ids = ops.select("anonymous_id")
    gone = []
    if replaced is not None:
        touched = ops.where("_op != 'insert'").select("message_id")
        replaced = replaced.join(F.broadcast(touched), "message_id", "left_semi")
        ids = ids.union(replaced.select("anonymous_id"))
    if also is not None:
        ids = ids.union(also)
    ids = ids.where("anonymous_id IS NOT NULL").distinct().localCheckpoint()
    stored = identities.of_anonymous_ids(wh, ids).localCheckpoint()
    if replaced is not None:  # a stored link replaced by anything but itself: its id's latest link may be gone
        rewritten = _links(replaced).join(_links(written), list(identity.LINK_COLUMNS), "left_anti")
        gone = [r[0] for r in rewritten.select("anonymous_id").distinct().collect()]
    kept = stored.where(F.col("link_at").isNotNull() & ~F.col("anonymous_id").isin(gone))
    links = _links(written).unionByName(
        kept.select(
            F.col("link_id").alias("message_id"), "user_id", "anonymous_id", F.col("link_at").alias("timestamp")
        )
    )
    if gone:  # rare: a corrected or moved copy of a link
        again = wh.read(EVENTS).select(*identity.LINK_COLUMNS).where(F.col("anonymous_id").isin(gone))
        unwritten = again.join(F.broadcast(ops.select("message_id")), "message_id", "left_anti")
        links = links.unionByName(_links(unwritten))
    before, after = identities.persons_of(stored), identity.persons(links)

    def key(person: str):  # an id's events belong to its person, or to the id itself
        return F.coalesce(F.col(person), F.col("anonymous_id"))

    changed = (
        ids.join(before.withColumnRenamed("person", "_before"), "anonymous_id", "left")
        .join(after.withColumnRenamed("person", "_after"), "anonymous_id", "left")
        .where(~key("_before").eqNullSafe(key("_after")))
        .select("anonymous_id", key("_before").alias("_was"), key("_after").alias("_to"))
    )
    # The days where each such id's anonymous events are: its tally under the person it had.
    on = (F.col("t.anonymous_id") == F.col("c.anonymous_id")) & (F.col("t.user_key") == F.col("c._was"))
    spans = (
        stored.where("user_id IS NULL")
        .alias("t")
        .join(changed.alias("c"), on)
        .select("t.anonymous_id", "c._was", "c._to", "t.first_day", "t.last_day")
        .collect()
    )
    done = Outcome("incremental")
    restitched = ops.limit(0)
    if spans:
        days = sorted({d for r in spans for d in _days_between(r.first_day, r.last_day)})
        moves = wh.spark.createDataFrame(
            [(r.anonymous_id, r._was, r._to) for r in spans], "anonymous_id string, _was string, _to string"
        )
        moved = (
            wh.read(EVENTS)
            .where(F.col("event_date").isin(days) & F.col("user_id").isNull())
            .select("message_id", "event_date", "anonymous_id", "user_key")
            .join(F.broadcast(moves), "anonymous_id")
            .where(F.col("user_key") == F.col("_was"))
            .join(F.broadcast(ops.select("message_id")), "message_id", "left_anti")  # ops say what they become
            .localCheckpoint()
        )
        for row in moved.groupBy("event_date").count().collect():
            done.days[row[0]] += row[1]
            done.counts["events_moved_to_another_person"] += row[1]
            done.counts[METRICS["update"]] += row[1]
        done.counts["anonymous_ids_moved"] = len({r.anonymous_id for r in spans})
        restitched = moved.withColumn("user_key", F.col("_to")).select(
            *[
                F.col(c) if c in moved.columns else F.lit(None).cast(EVENTS.schema[c].dataType).alias(c)
                for c in EVENTS.columns
            ],
            F.lit("restitch").alias("_op"),
        )
    return identity.stitch(written, after).unionByName(ops.where("_op = 'delete'")).unionByName(restitched), done


def _days_between(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def _apply_events(
    wh: Warehouse,
    change: tuple[DataFrame, DataFrame],
    commit: Commit,
    settings: Settings,
    anonymous: DataFrame | None = None,
) -> Outcome:
    """Inserts, updates and deletes in one commit: an append when no stored row changes, else one ``MERGE``
    that reads the target only on the days whose stored rows change. With identities stitched, the events of
    the anonymous ids written (and of ``anonymous``) go to their persons in the same commit. ``identities``
    then absorbs the commit."""
    ops, replaced = change
    ops, done, stored_days = ops.localCheckpoint(), Outcome("incremental"), set()
    for row in ops.groupBy("_op", "event_date").count().collect():
        done.counts[METRICS[row._op]] += row["count"]
        done.days[row.event_date] += row["count"]
        if row._op != "insert":
            stored_days.add(row.event_date)
    with wh.compiled(sum(done.days.values())):  # a day of many events: its stitching and write run compiled
        if settings.stitch_identities:
            ops, moved = _stitched(wh, ops, replaced if stored_days else None, anonymous)
            done.add(moved)
            stored_days.update(moved.days)
            if stored_days:  # a MERGE reads its source more than once, an append once
                ops = ops.localCheckpoint()
        _write(wh, ops, stored_days, commit)
    identities.catch_up(wh)
    return done


def _write(wh: Warehouse, ops: DataFrame, stored_days: set[date], commit: Commit) -> None:
    """An append when no stored row changes, else one ``MERGE`` that reads the target on ``stored_days`` only."""
    if not stored_days:
        wh.append(EVENTS, ops, commit)
        return
    on = "t.event_date = s.event_date AND t.message_id = s.message_id"
    merge = (
        Merge(f"{on} AND {on_days('t.event_date', stored_days)}")
        .when_matched_delete(op("delete"))
        .when_matched_update(EVENTS.columns, op("update"))
        .when_matched_update(["user_key"], op("restitch"))
        .when_not_matched_insert(EVENTS.columns, op("insert", "update"))
    )
    wh.merge(EVENTS, ops, merge, commit)
