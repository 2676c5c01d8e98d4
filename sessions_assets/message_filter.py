"""Which event days a load's ``MERGE`` into ``events`` must open: a Bloom filter of each day's message ids.

A late tail puts a few new messages on almost every event day, and the ``MERGE`` opens each of those days
to look for stored copies of them (at 100,000 events a day over 180 days: 15.8 M stored rows read for ~17
late messages a day). A day's filter answers "certainly not stored" for nearly all of them; such a day is
not opened and the load's messages for it are inserted. ``HASHES`` and ``BITS_PER_ID`` make a false "maybe"
about 1 id in 2,000, so a day with 17 late messages is opened for nothing about once in 120 runs.

A filter row is a claim: "these bits hold every id day D had at ``events`` version V". A row behind the
table is completed by the ids its change feed inserted after V, tested exactly; a missing, outgrown or
unreadable one is built again from the day. A claim can only over-answer "maybe", so a lost or stale
filter write costs a read, never a duplicate. A run stores only the rows it built anew, appended beside
the older ones (a day's latest row is the one read); once the rows it read are ``STORE_BEHIND`` versions
behind, it rewrites the table whole with the ids they lacked set.

Not opening a day must not hide it from Delta's conflict check. The ``MERGE`` keeps every touched day in
its partition predicate, which is what Delta checks concurrent commits against, and leaves the skipped
days' files unread through a ``timestamp`` range, which Delta applies from file statistics (``event_date``
is the UTC day of ``timestamp``). A commit that lands after the filters' version but before the ``MERGE``
reads the table is checked afterwards (``collisions``): a skipped day it gave one of the load's messages
is rebuilt whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, timedelta
from functools import reduce

from pyspark.sql import DataFrame, Window
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
# Rows are stored again once this many ``events`` versions behind (a run adds one or two). Until then a run
# reads the ids they lack from the change feed (~0.3 s at 100,000 events a day), where storing rewrites
# the whole table (181 days of 100,000 ids: 45 MB, 3.7 s).
STORE_BEHIND = 16
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


@dataclass
class Filters:
    """What is known of some days' ids at ``events`` version ``version``: each day's ``bitmaps`` row (as stored,
    or built anew) and the ids inserted on it after that row's own version (``since``, exact)."""

    version: int
    bitmaps: DataFrame  # persisted, ``COLUMNS``
    since: DataFrame  # persisted (unless empty), ``event_date``, ``message_id``
    behind: int = 0  # how many versions the stalest stored row is behind ``version``
    built: tuple[date, ...] = ()

    def unpersist(self) -> None:
        self.bitmaps.unpersist()
        self.since.unpersist()


def maybe_stored(filters: Filters, source: DataFrame) -> DataFrame:
    """The ``source`` rows (``event_date``, ``message_id``) whose day's filter may hold their id.

    The bitmaps are broadcast and each row tests its bits in place: no row carries a filter along.
    """

    def bit_set(i: int) -> str:
        byte = f"substring(bitmap, CAST({_position(i)} DIV 8 AS INT) + 1, 1)"
        return f"(CAST(conv(hex({byte}), 16, 10) AS INT) & shiftleft(1, CAST({_position(i)} % 8 AS INT))) != 0"

    ids = source.select("event_date", "message_id")
    probed = ids.join(F.broadcast(filters.bitmaps.select("event_date", "bits", "bitmap")), "event_date")
    bloom = probed.where(F.expr(" AND ".join(bit_set(i) for i in range(HASHES)))).select("event_date", "message_id")
    return bloom.union(ids.join(F.broadcast(filters.since), ["event_date", "message_id"], "left_semi"))


def _built(wh: Warehouse, days: list[date], version: int, copies: dict[date, int]) -> DataFrame:
    """Filters of ``days`` from their rows at ``version``, each sized for the day's copies."""
    sizes = wh.spark.createDataFrame([(d, bits_for(copies.get(d, 0))) for d in days], "event_date date, bits long")
    ids = wh.read_at(EVENTS, version).where(F.col("event_date").isin(days)).select("event_date", "message_id")
    made = set_bits(ids.join(F.broadcast(sizes), "event_date"))
    return sizes.join(made.drop("bits"), "event_date", "left").select(
        "event_date",
        F.lit(version).cast("long").alias("version"),
        F.lit(HASHES).alias("hashes"),
        "bits",
        _scatter(F.lit(None), "bits", "offsets", "masks").alias("bitmap"),
    )


def _latest(rows: DataFrame) -> DataFrame:
    """Each day's latest row: a day built anew is stored beside the table's older row for it (``save``)."""
    newest = Window.partitionBy("event_date").orderBy(
        F.desc("version"), F.desc(F.col("hashes") == HASHES), F.desc("bits")
    )
    return rows.withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n")


def _inserted(wh: Warehouse, first: int, last: int, days: list[date]) -> DataFrame:
    """The ids ``events``' change feed inserted on ``days`` in versions ``first..last`` (with ``_commit_version``)."""
    return (
        wh.changes(EVENTS, first, last)
        .where(F.col("event_date").isin(sorted(days)) & F.col("_change_type").isin(*INSERTED))
        .select("event_date", "message_id", "_commit_version")
    )


def _inserted_since(wh: Warehouse, as_of: dict[date, int], version: int) -> DataFrame:
    """The ids the change feed inserted on each day of ``as_of`` after that day's version, up to ``version``."""
    versions = wh.spark.createDataFrame(list(as_of.items()), "event_date date, _as_of long")
    return (
        _inserted(wh, min(as_of.values()) + 1, version, list(as_of))
        .join(F.broadcast(versions), "event_date")
        .where(F.col("_commit_version") > F.col("_as_of"))
        .select("event_date", "message_id")
    )


def current(wh: Warehouse, days: list[date], copies: dict[date, int]) -> Filters:
    """What the filters of ``days`` and the change feed know of their ids at the latest ``events`` version.

    ``copies``: each day's accepted copies (``events.copies_per_day``), which size a filter built anew.
    """
    version = wh.version(EVENTS)
    stored = _latest(wh.read(MESSAGE_FILTERS).where(F.col("event_date").isin(days)))
    found = {r.event_date: r for r in stored.select("event_date", "version", "hashes", "bits").collect()}
    usable, rebuild = [], []
    for day in days:
        row = found.get(day)
        unusable = row is None or row.hashes != HASHES or not 0 <= version - row.version <= CATCH_UP_VERSIONS
        if unusable or copies.get(day, 0) * BITS_PER_ID > row.bits:  # outgrown: false "maybe"s would climb
            rebuild.append(day)
        else:
            usable.append(day)
    as_of = {day: found[day].version for day in usable if found[day].version < version}
    since = None
    if as_of:
        try:
            since = _inserted_since(wh, as_of, version).persist()
            since.count()
        except Exception:  # noqa: BLE001 - the change feed is gone (log clean-up, VACUUM): build them again
            if since is not None:
                since.unpersist()
            since = None
            rebuild += sorted(as_of)
            usable, as_of = [d for d in usable if d not in as_of], {}
    if since is None:
        since = wh.spark.createDataFrame([], "event_date date, message_id string")
    parts = [stored.where(F.col("event_date").isin(usable)).select(*COLUMNS)]
    if rebuild:
        parts.append(_built(wh, sorted(rebuild), version, copies))
    bitmaps = reduce(DataFrame.unionByName, parts).persist()
    # Building reads whole days: compiled when they are millions of rows, as the MERGE would be.
    with compiled(wh.spark, when=sum(copies.get(d, 0) for d in rebuild) >= wh.settings.compile_above_rows):
        bitmaps.count()
    behind = max((version - v for v in as_of.values()), default=0)
    return Filters(version, bitmaps, since, behind, tuple(sorted(rebuild)))


def worth_asking(touched: list[date], arriving: dict[date, int]) -> list[date]:
    """The touched days whose filter is worth asking: those receiving at most ``ASK_AT_MOST`` messages."""
    return [day for day in touched if arriving.get(day, 0) <= ASK_AT_MOST]


def skippable(days: list[date], filters: Filters, source: DataFrame) -> set[date]:
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
    inserted = _inserted(wh, version + 1, committed - 1, list(skipped)).select("event_date", "message_id")
    clashes = inserted.join(source.select("event_date", "message_id"), ["event_date", "message_id"], "left_semi")
    return {r.event_date for r in clashes.select("event_date").distinct().collect()}


def save(
    wh: Warehouse, days: list[date], filters: Filters, source: DataFrame | None = None, committed: int | None = None
) -> bool:
    """Store the filters of ``days`` that need it, with the ids they lacked set; moved to ``committed`` with
    ``source``'s ids when the ``MERGE`` was the very next commit. Returns whether any were stored.

    Once ``STORE_BEHIND`` versions behind, the table is rewritten whole (a row per event day); before, only
    the days built anew are stored, appended beside the rows they replace. Losing a race to another run's
    write is harmless: every row either writes is a true claim, so the step goes on without them.
    """
    whole = filters.behind >= STORE_BEHIND
    if not whole and not filters.built:
        return False  # the change feed carries what they lack until then
    bitmaps = filters.bitmaps if whole else filters.bitmaps.where(F.col("event_date").isin(list(filters.built)))
    bits = bitmaps.select("event_date", "bits")
    ids, version = filters.since.join(bits, "event_date"), filters.version
    if source is not None and committed == version + 1:
        ids, version = ids.unionByName(source.select("event_date", "message_id").join(bits, "event_date")), committed
    rows = _union(bitmaps, set_bits(ids)).withColumn("version", F.lit(version).cast("long")).select(*COLUMNS)
    if whole:
        rows = _latest(wh.read(MESSAGE_FILTERS).where(~F.col("event_date").isin(days))).unionByName(rows)
    try:
        rows.write.format("delta").mode("overwrite" if whole else "append").save(wh.path(MESSAGE_FILTERS))
        return True
    except Exception as error:
        if not is_write_conflict(error):
            raise
        return False
