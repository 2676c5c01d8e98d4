"""``identities``: per person, anonymous id and user id, how many events, on which days, and the latest link.

An internal table that follows ``events`` through its change feed, like a derived table, so that the events step
finds a day's persons, and where a device's anonymous events are, without reading every event (``events.py``),
and ``users`` finds the ids a person's events carry. The events step brings it up to date before it reads it and
after it writes: a run killed between the two commits leaves it behind, and the next step catches it up first.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.engine import identity
from sessions_assets.engine.identity import TALLY_KEY, tallies
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import Merge, Warehouse
from sessions_assets.warehouse.refresh.outcome import changes, rebuilding
from sessions_assets.warehouse.tables import EVENTS, IDENTITIES

# What a tally is counted from.
TALLIED = (*TALLY_KEY, "timestamp", "message_id", "event_date")
_SAME_KEY = " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in TALLY_KEY)
# A link later than the stored one replaces it; after a removed link, the one found afresh (``s.unlinked``).
_LATER = "(t.link_at IS NULL OR s.link_at > t.link_at OR (s.link_at = t.link_at AND s.link_id > t.link_id))"
_LINK = f"CASE WHEN s.unlinked OR (s.link_at IS NOT NULL AND {_LATER}) THEN s.{{c}} ELSE t.{{c}} END"


def catch_up(wh: Warehouse, rebuild: bool = False) -> None:
    """Absorb the events committed since the table's note: their change feed, or every event when that is unknown
    (or ``rebuild``: after ``events`` was rebuilt whole)."""
    at = ledger.position(wh, IDENTITIES, EVENTS)
    unknown, feed = rebuilding(wh, at)
    if rebuild or unknown:
        wh.overwrite(IDENTITIES, tallies(wh.read(EVENTS, at.latest).select(*TALLIED)), at.replacing)
    elif feed is not None:
        _absorb(wh, feed, at)
        if ledger.raced(wh, at):
            catch_up(wh, rebuild=True)


def _absorb(wh: Warehouse, feed: DataFrame, at: ledger.Position) -> None:
    """The feed's net tallies added in one ``MERGE``: counts summed, days widened (a removed event leaves its day in
    the span: a span may be wider than the events, never narrower), the latest link kept. A pair whose link was
    removed (a corrected or moved copy) has its latest link found afresh among the events of that pair."""
    # An update that changes none of the tallied columns (a session column corrected) cancels out.
    added, removed = changes(wh, feed, at, TALLIED)
    net = added.withColumn("weight", F.lit(1))
    if removed is not None:
        net = net.unionByName(removed.withColumn("weight", F.lit(-1)))
    change = tallies(net).localCheckpoint()
    unlinked = []  # only a removed link unlinks a pair
    if removed is not None:
        unlinked = [tuple(r) for r in change.where("unlinked").select("anonymous_id", "user_id").collect()]
    if unlinked:  # rare: a link corrected or moved; its pair's latest link is found among the events
        pairs = F.broadcast(wh.spark.createDataFrame(unlinked, "anonymous_id string, user_id string"))
        found = (
            wh.read(EVENTS, at.latest)
            .select(*TALLIED)
            .join(pairs, ["anonymous_id", "user_id"], "left_semi")
            .groupBy("anonymous_id", "user_id")
            .agg(F.max(F.struct(F.col("timestamp").alias("at"), F.col("message_id").alias("id"))).alias("_found"))
        )
        change = (
            change.join(found, ["anonymous_id", "user_id"], "left")
            .withColumn("link_at", F.when(F.col("unlinked"), F.col("_found.at")).otherwise(F.col("link_at")))
            .withColumn("link_id", F.when(F.col("unlinked"), F.col("_found.id")).otherwise(F.col("link_id")))
            .drop("_found")
        )
    merge = (
        Merge(_SAME_KEY)
        .when_matched_delete("t.events + s.events <= 0")
        .when_matched_update(
            events="t.events + s.events",
            first_day="least(t.first_day, s.first_day)",
            last_day="greatest(t.last_day, s.last_day)",
            **{c: _LINK.format(c=c) for c in ("link_at", "link_id")},
        )
        .when_not_matched_insert(IDENTITIES.columns, "s.events > 0")
    )
    wh.merge(IDENTITIES, change.where("events != 0 OR unlinked OR link_at IS NOT NULL"), merge, at.commit)


def of_anonymous_ids(wh: Warehouse, ids: DataFrame) -> DataFrame:
    """The stored tallies of these anonymous ids (a column ``anonymous_id``)."""
    return wh.read(IDENTITIES).join(F.broadcast(ids), "anonymous_id", "left_semi")


def persons_of(tallied: DataFrame) -> DataFrame:
    """Each linked anonymous id among the tallies and its person (the user of its latest link)."""
    return identity.latest_links(tallied)
