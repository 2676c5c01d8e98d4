"""Which event days a load's ``MERGE`` into ``events`` must open: a Bloom filter of each day's message ids.

A late tail puts a few new messages on almost every event day, and the ``MERGE`` opens each of those days
to look for stored copies of them (at 100,000 events a day over 180 days: 15.8 M stored rows read for ~17
late messages a day). A day's filter answers "certainly not stored" for nearly all of them; such a day is
not opened and the load's messages for it are inserted. ``HASHES`` and ``BITS_PER_ID`` make a false "maybe"
about 1 id in 2,000, so a day with 17 late messages is opened for nothing about once in 120 runs.

A filter row is a claim: "these bits hold every id day D had at ``events`` version V". A row behind the
table is brought forward with the ids its change feed inserted after V; a missing, outgrown or
unreadable one is built again from the day. A claim can only over-answer "maybe", so a lost or stale
filter write costs a read, never a duplicate.

Not opening a day must not hide it from Delta's conflict check. The ``MERGE`` keeps every touched day in
its partition predicate, which is what Delta checks concurrent commits against, and leaves the skipped
days' files unread through a ``timestamp`` range, which Delta applies from file statistics (``event_date``
is the UTC day of ``timestamp``). A commit that lands after the filters' version but before the ``MERGE``
reads the table is checked afterwards (``collisions``): a skipped day it gave one of the load's messages
is rebuilt whole.
"""

from __future__ import annotations

import math
from datetime import date, timedelta
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sessions_assets.conflicts import is_write_conflict
from sessions_assets.partitions import contiguous_ranges
from sessions_assets.resources import compiled
from sessions_assets.tables import EVENTS, MESSAGE_FILTERS, Warehouse

HASHES = 11
BITS_PER_ID = 16
# Sized for this many times the day's copies when built: late rows keep arriving; an outgrown filter is rebuilt.
HEADROOM = 1.25
# A row further behind the table than this many versions is rebuilt rather than read forward from the
# change feed (whose old versions Delta's log clean-up may have removed).
CATCH_UP_VERSIONS = 200
# A day receiving more of a load's messages than this is opened without asking its filter: it would say
# "maybe" too often to pay (1,000 ids at 1 false "maybe" in 2,000), and keeping its filter up to date
# costs as much as the read it might save. At 100,000 events a day those are the last few days.
ASK_AT_MOST = 1_000
INSERTED = ("insert", "update_postimage")
COLUMNS = MESSAGE_FILTERS.schema.fieldNames()


def _position(i: int) -> str:
    """The ``i``-th bit of ``message_id`` in a filter of ``bits`` bits: one definition for setting and testing."""
    return f"pmod(hash(message_id, {i}), bits)"


def bits_for(copies: int) -> int:
    """A filter's size in bits for a day of ``copies`` stored messages: whole 64-bit words, at least one."""
    return 64 * max(1, math.ceil(copies * HEADROOM * BITS_PER_ID / 64))


def set_bits(ids: DataFrame) -> DataFrame:
    """``(event_date, bits, message_id)`` -> ``(event_date, bits, offsets, masks)``: the bytes of each day's
    filter those ids set and the bits they set in each (only those: a few late ids touch a few bytes)."""
    positions = ids.select(
        "event_date", "bits", F.explode(F.array(*(F.expr(_position(i)) for i in range(HASHES)))).alias("bit")
    )
    masks = positions.groupBy("event_date", "bits", F.expr("CAST(bit DIV 8 AS INT)").alias("offset")).agg(
        F.expr("bit_or(shiftleft(1, CAST(bit % 8 AS INT)))").alias("mask")
    )
    pairs = masks.groupBy("event_date", "bits").agg(F.collect_list(F.struct("offset", "mask")).alias("_pairs"))
    return pairs.select(
        "event_date", "bits", F.expr("transform(_pairs, p -> p.offset)").alias("offsets"),
        F.expr("transform(_pairs, p -> p.mask)").alias("masks"),
    )  # fmt: skip


@F.udf(T.BinaryType(), useArrow=False)
def _scatter(bitmap: bytes | None, bits: int, offsets: list[int] | None, masks: list[int] | None) -> bytes:
    """``bitmap`` (all zeros if null) with ``masks`` ORed into the bytes at ``offsets``.

    A Python loop: SQL has no way to set one element of an array or binary, and building one from the pairs
    with a map lookup per element scans the map each time (quadratic: hours for a 100,000-id day).
    """
    out = bytearray(bitmap) if bitmap is not None else bytearray(bits // 8)
    for offset, mask in zip(offsets or (), masks or ()):
        out[offset] |= mask
    return bytes(out)


def _union(filters: DataFrame, more: DataFrame) -> DataFrame:
    """``filters`` with the ``set_bits`` output ``more`` ORed in (days it lacks are kept as they are)."""
    both = filters.join(more.select("event_date", "offsets", "masks"), "event_date", "left")
    return both.withColumn("bitmap", _scatter("bitmap", "bits", "offsets", "masks")).drop("offsets", "masks")


def maybe_stored(filters: DataFrame, source: DataFrame) -> DataFrame:
    """The ``source`` rows (``event_date``, ``message_id``) whose day's filter may hold their id.

    The filters are broadcast and each row tests its bits in place: no row carries a filter along.
    """

    def bit_set(i: int) -> str:
        byte = f"substring(bitmap, CAST({_position(i)} DIV 8 AS INT) + 1, 1)"
        return f"(CAST(conv(hex({byte}), 16, 10) AS INT) & shiftleft(1, CAST({_position(i)} % 8 AS INT))) != 0"

    probed = source.select("event_date", "message_id").join(
        F.broadcast(filters.select("event_date", "bits", "bitmap")), "event_date"
    )
    return probed.where(F.expr(" AND ".join(bit_set(i) for i in range(HASHES)))).select("event_date", "message_id")


def _built(wh: Warehouse, days: list[date], version: int, copies: dict[date, int]) -> DataFrame:
    """Filters of ``days`` from their rows at ``version``, each sized for the day's copies."""
    sizes = wh.spark.createDataFrame([(d, bits_for(copies.get(d, 0))) for d in days], "event_date date, bits long")
    ids = wh.read_at(EVENTS, version).where(F.col("event_date").isin(days)).select("event_date", "message_id")
    made = set_bits(ids.join(F.broadcast(sizes), "event_date"))
    return sizes.join(made.drop("bits"), "event_date", "left").select(
        "event_date",
        F.lit(version).alias("version"),
        F.lit(HASHES).alias("hashes"),
        "bits",
        _scatter(F.lit(None), "bits", "offsets", "masks").alias("bitmap"),
    )


def _caught_up(wh: Warehouse, behind: DataFrame, since: int, version: int, days: list[date]) -> DataFrame:
    """``behind`` rows brought to ``version`` with the ids the change feed inserted on their days after them."""
    inserted = (
        wh.changes(EVENTS, since + 1, version)
        .where(F.col("event_date").isin(days) & F.col("_change_type").isin(*INSERTED))
        .select("event_date", "message_id", "_commit_version")
        .join(F.broadcast(behind.select("event_date", F.col("version").alias("_as_of"), "bits")), "event_date")
        .where(F.col("_commit_version") > F.col("_as_of"))
        .select("event_date", "bits", "message_id")
    )
    return _union(behind, set_bits(inserted)).withColumn("version", F.lit(version)).select(*COLUMNS)


def current(wh: Warehouse, days: list[date], copies: dict[date, int]) -> tuple[int, DataFrame]:
    """Filters of ``days`` holding every id those days have at the ``events`` version returned (persisted).

    ``copies``: each day's accepted copies (``events.copies_per_day``), which size a filter built anew.
    """
    version = wh.version(EVENTS)
    stored = wh.read(MESSAGE_FILTERS).where(F.col("event_date").isin(days))
    found = {r.event_date: r for r in stored.select("event_date", "version", "hashes", "bits").collect()}
    fresh, behind, rebuild = [], [], []
    for day in days:
        row = found.get(day)
        unusable = row is None or row.hashes != HASHES or not 0 <= version - row.version <= CATCH_UP_VERSIONS
        if unusable or copies.get(day, 0) * BITS_PER_ID > row.bits:  # outgrown: false "maybe"s would climb
            rebuild.append(day)
        else:
            (fresh if row.version == version else behind).append(day)
    parts = [stored.where(F.col("event_date").isin(fresh)).select(*COLUMNS)]
    if behind:
        since = min(found[d].version for d in behind)
        caught = _caught_up(wh, stored.where(F.col("event_date").isin(behind)), since, version, behind).persist()
        try:
            caught.count()
            parts.append(caught)
        except Exception:  # noqa: BLE001 - the change feed is gone (log clean-up, VACUUM): build them again
            caught.unpersist()
            rebuild += behind
    if rebuild:
        parts.append(_built(wh, sorted(rebuild), version, copies))
    filters = reduce(DataFrame.unionByName, parts).persist()
    # Building reads whole days: compiled when they are millions of rows, as the MERGE would be.
    with compiled(wh.spark, when=sum(copies.get(d, 0) for d in rebuild) >= wh.settings.compile_above_rows):
        filters.count()
    return version, filters


def worth_asking(touched: list[date], arriving: dict[date, int]) -> list[date]:
    """The touched days whose filter is worth asking: those receiving at most ``ASK_AT_MOST`` messages."""
    return [day for day in touched if arriving.get(day, 0) <= ASK_AT_MOST]


def skippable(days: list[date], filters: DataFrame, source: DataFrame) -> set[date]:
    """Of ``days`` (those ``filters`` cover), the ones on which none of ``source``'s messages may be stored:
    the ``MERGE`` need not open them."""
    maybe = {r.event_date for r in maybe_stored(filters, source).select("event_date").distinct().collect()}
    return set(days) - maybe


def opened_only(touched: list[date], skipped: set[date]) -> str:
    """A ``MERGE`` condition on the target's ``timestamp`` that leaves the skipped days' files unread.

    A data predicate, not a partition one: Delta still counts every touched day as read when it checks
    concurrent commits.
    """

    def start(day: date) -> str:
        return f"TIMESTAMP'{day.isoformat()} 00:00:00Z'"

    ranges = contiguous_ranges(set(touched) - skipped)
    if not ranges:
        return f"t.timestamp < {start(min(touched))}"
    spans = (f"(t.timestamp >= {start(a)} AND t.timestamp < {start(b + timedelta(days=1))})" for a, b in ranges)
    return "(" + " OR ".join(spans) + ")"


def collisions(wh: Warehouse, version: int, committed: int, source: DataFrame, skipped: set[date]) -> set[date]:
    """Skipped days on which a commit between the filters' ``version`` and the ``MERGE`` (``committed``) stored
    one of ``source``'s messages: the ``MERGE`` may have inserted a second copy there."""
    if committed <= version + 1 or not skipped:
        return set()
    inserted = (
        wh.changes(EVENTS, version + 1, committed - 1)
        .where(F.col("event_date").isin(sorted(skipped)) & F.col("_change_type").isin(*INSERTED))
        .select("event_date", "message_id")
    )
    clashes = inserted.join(source.select("event_date", "message_id"), ["event_date", "message_id"], "left_semi")
    return {r.event_date for r in clashes.select("event_date").distinct().collect()}


def save(
    wh: Warehouse,
    days: list[date],
    version: int,
    filters: DataFrame,
    source: DataFrame | None = None,
    committed: int | None = None,
) -> bool:
    """Store ``filters`` of ``days`` (as of ``version``), moved to ``committed`` with ``source``'s ids when the
    ``MERGE`` was the very next commit. Returns whether they were stored.

    The table is rewritten whole (a row per event day). Losing a race to another run's write is harmless:
    every row either writes is a true claim, so the step goes on without them.
    """
    if source is not None and committed == version + 1:
        ids = source.select("event_date", "message_id").join(filters.select("event_date", "bits"), "event_date")
        filters = _union(filters, set_bits(ids)).withColumn("version", F.lit(committed)).select(*COLUMNS)
    kept = wh.read(MESSAGE_FILTERS).where(~F.col("event_date").isin(days))
    try:
        kept.unionByName(filters.select(*COLUMNS)).write.format("delta").mode("overwrite").save(
            wh.path(MESSAGE_FILTERS)
        )
        return True
    except Exception as error:
        if not is_write_conflict(error):
            raise
        return False
