"""Accepted raw rows -> the ``events`` table (one row per ``messageId`` and event day).

Two ways, same result: ``absorb`` merges only the rows of pending loads (see ``ledger.py``) into the
days they touch; ``rebuild`` recomputes whole days from every received day the map names (used when a
received day was re-ingested with other rows). The dedup key and the rule for which copy survives are
written down once, here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets import ledger, message_filter
from sessions_assets.partitions import contiguous_ranges
from sessions_assets.resources import compiled
from sessions_assets.tables import EVENTS, PARTITION_MAP, RAW_EVENTS, Warehouse

CONSUMER = "events"
DEDUP_KEY = ("event_date", "message_id")
# The copy kept is the earliest received; ties are broken on stable columns so any arrival order agrees.
KEEP_FIRST = ("received_at", "received_date", "payload")


def dedupe(raw: DataFrame) -> DataFrame:
    """One row per ``message_id``: the earliest-received copy, whatever order the received days came in."""
    ranked = raw.withColumn("_copy", F.row_number().over(Window.partitionBy(*DEDUP_KEY).orderBy(*KEEP_FIRST)))
    return ranked.where(F.col("_copy") == 1).select(*EVENTS.schema.fieldNames())


def contributing_received_days(wh: Warehouse, first: date, last: date) -> list[date]:
    """The received days whose accepted rows include event days ``first..last``, from the recorded map."""
    rows = wh.read(PARTITION_MAP).where(F.col("event_date").between(F.lit(first), F.lit(last)))
    return sorted(r.received_date for r in rows.select("received_date").distinct().collect())


def raw_rows_for(wh: Warehouse, received_days: list[date], first: date, last: date) -> DataFrame:
    """Accepted rows of event days ``first..last``, reading only the named ``received_date`` partitions."""
    return (
        wh.read(RAW_EVENTS)
        .where(F.col("received_date").isin(received_days) if received_days else F.lit(False))
        .where(F.col("event_date").between(F.lit(first), F.lit(last)))
    )


def copies_per_day(wh: Warehouse, days: list[date]) -> dict[date, int]:
    """Accepted copies per event day, from the partition map: at least the messages each day holds."""
    rows = wh.read(PARTITION_MAP).where(F.col("event_date").isin(days)).groupBy("event_date").agg(F.sum("events"))
    return {r[0]: r[1] for r in rows.collect()}


# The incoming copy replaces the stored one when it was received earlier. Loads of one received day are
# deduplicated among themselves first, so the two copies always come from different received days.
_EARLIER = "s.received_at < t.received_at OR (s.received_at = t.received_at AND s.received_date < t.received_date)"


@dataclass
class EventChanges:
    inserted: int = 0
    replaced: int = 0  # stored copies replaced by an earlier-received one
    rebuilt_days: list[date] = field(default_factory=list)
    compacted_days: list[date] = field(default_factory=list)
    loads_absorbed: int = 0
    copies_read: int = 0
    version: int | None = None  # the table version of the MERGE of pending loads
    days_opened: int = 0  # touched days the MERGE read (the others were ruled out by their filters)
    # Skipped days another commit gave one of the loads' messages before the MERGE read: rebuilt whole.
    repaired_days: list[date] = field(default_factory=list)
    filters_stored: bool = False  # whether the run stored filters (built anew, or rewritten: ``message_filter.save``)


def absorb(wh: Warehouse, loads: set[ledger.Load], changes: EventChanges) -> None:
    """MERGE the rows of ``loads`` into ``events``: insert new messages, keep the earliest copy of known ones.

    Past ``message_filter_above_rows`` stored rows on the touched days, the days receiving few messages are
    not opened when their Bloom filter rules out every one of them (``message_filter.py``).
    """
    if not loads:
        return
    raw = ledger.rows_of(wh, loads).persist()
    filters = None
    try:
        changes.copies_read += raw.count()
        source = dedupe(raw)
        touched = sorted({load[0] for load in loads})
        days = ", ".join(f"DATE'{d.isoformat()}'" for d in touched)
        condition = f"t.event_date IN ({days}) AND t.event_date = s.event_date AND t.message_id = s.message_id"
        # Matching reads every stored message of the days it opens: compiled when they are millions, as the
        # partition map counts them (a count of the days themselves would be a scan as long as the match).
        copies = copies_per_day(wh, touched)
        skipped: set[date] = set()
        asked: list[date] = []
        if sum(copies.values()) >= wh.settings.message_filter_above_rows:
            arriving = {r.event_date: r[1] for r in raw.groupBy("event_date").count().collect()}
            asked = message_filter.worth_asking(touched, arriving)
        if asked:
            source_asked = source.where(F.col("event_date").isin(asked))
            filters = message_filter.current(wh, asked, copies)
            skipped = message_filter.skippable(asked, filters, source_asked)
            condition += " AND " + message_filter.opened_only(touched, skipped)
        merge = (
            wh.delta(EVENTS).alias("t").merge(source.alias("s"), condition)
            .whenMatchedUpdateAll(condition=_EARLIER)
            .whenNotMatchedInsertAll()
        )  # fmt: skip
        opened = sum(n for day, n in copies.items() if day not in skipped)
        with compiled(wh.spark, when=opened >= wh.settings.compile_above_rows):
            merge.execute()
        commit = wh.delta(EVENTS).history(1).head()
        metrics = commit.operationMetrics
        changes.version = commit.version if commit.operation == "MERGE" else None
        changes.inserted += int(metrics.get("numTargetRowsInserted", 0))
        changes.replaced += int(metrics.get("numTargetRowsUpdated", 0))
        changes.days_opened = len(touched) - len(skipped)
        if filters is not None:
            if changes.version is not None:
                found = message_filter.collisions(wh, filters.version, changes.version, source, skipped)
                changes.repaired_days = sorted(found)
            changes.filters_stored = message_filter.save(wh, asked, filters, source_asked, changes.version)
    finally:
        raw.unpersist()
        if filters is not None:
            filters.unpersist()


def rebuild(wh: Warehouse, first: date, last: date, changes: EventChanges) -> None:
    """Recompute event days ``first..last`` whole, from every received day the map names for them."""
    raw = raw_rows_for(wh, contributing_received_days(wh, first, last), first, last).persist()
    try:
        rows = dedupe(raw)
        wh.replace_partitions(EVENTS, rows, first, last)
        changes.copies_read += raw.count()
        changes.inserted += rows.count()
    finally:
        raw.unpersist()


def update_events(wh: Warehouse, first: date, last: date) -> EventChanges:
    """Bring event days ``first..last`` up to date with the partition map: stale days whole, the rest by load."""
    position = ledger.state(wh, CONSUMER, ledger.partition_map_loads(wh), first, last)
    changes = EventChanges(rebuilt_days=sorted(position.stale_days))
    for a, b in contiguous_ranges(position.stale_days):
        rebuild(wh, a, b, changes)
    absorb(wh, position.pending, changes)
    repaired = ledger.recorded_on(ledger.partition_map_loads(wh), set(changes.repaired_days))
    for a, b in contiguous_ranges(changes.repaired_days):
        rebuild(wh, a, b, changes)
    whole_days = position.stale_days | set(changes.repaired_days)
    changes.rebuilt_days = sorted(whole_days)
    merged = position.pending if changes.version is not None else set()
    versions = {load: changes.version for load in merged if load[0] not in whole_days}
    loads = position.pending | position.whole | repaired
    ledger.record(wh, CONSUMER, loads, whole_days, versions)
    changes.loads_absorbed = len(loads)
    settings = wh.settings
    touched = {load[0] for load in position.pending}
    changes.compacted_days = wh.compact(EVENTS, touched, settings.compact_min_files, settings.compact_most_days)
    return changes
