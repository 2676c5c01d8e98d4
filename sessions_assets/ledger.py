"""What makes ``events`` and ``sessions`` incremental: a ledger of the loads each has absorbed.

A *load* is the accepted rows of one received day for one event day, identified in ``partition_map`` by
(``event_date``, ``received_date``, ``content_hash``). ``events`` absorbs the loads ``partition_map``
records; ``sessions`` absorbs the loads ``events`` has absorbed (so it never runs ahead of its input).
Each records what it absorbed in ``applied_loads``. For a window of event days, comparing source and
ledger gives

- *pending* loads: recorded upstream, not absorbed yet -> apply only their rows;
- *stale* days: an absorbed load that upstream no longer records (a received day re-ingested with other
  rows, or without that event day) -> recompute that event day whole.

Applying a load is idempotent (``events`` merges on the message, ``sessions`` recomputes the touched
chains from events), so a run that dies between its table write and its ledger write is simply redone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.tables import APPLIED_LOADS, PARTITION_MAP, RAW_EVENTS, Warehouse

LOAD_COLUMNS = ["event_date", "received_date", "content_hash"]
Load = tuple[date, date, str]


@dataclass
class LedgerState:
    """One consumer's position for a window of event days."""

    pending: set[Load] = field(default_factory=set)  # recorded, not absorbed, on days that are not stale
    stale_days: set[date] = field(default_factory=set)
    whole: set[Load] = field(default_factory=set)  # what upstream records now on the stale days
    versions: dict[Load, int] = field(default_factory=dict)  # upstream's table version that absorbed a pending load

    @property
    def up_to_date(self) -> bool:
        return not (self.pending or self.stale_days)


def _window(df: DataFrame, first: date | None, last: date | None) -> DataFrame:
    """Loads of event days ``first..last``, with the ``version`` that absorbed each (null if not recorded)."""
    if first is not None:
        df = df.where(F.col("event_date").between(F.lit(first), F.lit(last)))
    version = F.col("version") if "version" in df.columns else F.lit(None).cast("long")
    return df.select(*LOAD_COLUMNS, version.alias("version"))


def _as_load(row) -> Load:
    return row.event_date, row.received_date, row.content_hash


def _loads(df: DataFrame, first: date | None, last: date | None) -> set[Load]:
    return {_as_load(r) for r in _window(df, first, last).collect()}


def absorbed(wh: Warehouse, consumer: str) -> DataFrame:
    return wh.read(APPLIED_LOADS).where(F.col("consumer") == consumer)


def state(
    wh: Warehouse, consumer: str, source: DataFrame, first: date | None = None, last: date | None = None
) -> LedgerState:
    """Compare ``source`` loads with what ``consumer`` absorbed, for event days ``first..last`` (default all).

    ``source`` is ``partition_map`` or another consumer's ledger (whose versions come along). The two sides
    are compared in Spark and only their differences collected: both grow with the history (~160 loads a
    received day), a run's differences only with what arrived since the last run.
    """
    upstream = _window(source, first, last).withColumn("_upstream", F.lit(True))
    done = _window(absorbed(wh, consumer), first, last).select(*LOAD_COLUMNS, F.lit(True).alias("_done"))
    differ = upstream.join(done, LOAD_COLUMNS, "full_outer").where(
        F.col("_upstream").isNull() | F.col("_done").isNull()
    )
    recorded, versions, stale_days = set(), {}, set()
    for r in differ.collect():
        if r._upstream:
            recorded.add(_as_load(r))
            if r.version is not None:
                versions[_as_load(r)] = r.version
        else:
            stale_days.add(r.event_date)
    pending = {load for load in recorded if load[0] not in stale_days}
    return LedgerState(
        pending, stale_days, recorded_on(source, stale_days), {k: versions[k] for k in pending if k in versions}
    )


def recorded_on(source: DataFrame, days: set[date]) -> set[Load]:
    """What ``source`` records on ``days`` now: the loads a whole-day rebuild of them absorbs.

    Read before the rebuild reads its rows, so every load named here is in what it reads (``raw_events``
    is written before the map that records it).
    """
    return _loads(source.where(F.col("event_date").isin(sorted(days))), None, None) if days else set()


def partition_map_loads(wh: Warehouse) -> DataFrame:
    return wh.read(PARTITION_MAP)


def mark_all_absorbed(wh: Warehouse, consumers: tuple[str, ...]) -> None:
    """After a full recompute from every received day: each consumer has absorbed every recorded load."""
    loads = _loads(partition_map_loads(wh), None, None)
    for consumer in consumers:
        record(wh, consumer, loads, {load[0] for load in loads})


def record(
    wh: Warehouse, consumer: str, loads: set[Load], whole_days: set[date] = frozenset(), versions: dict[Load, int] | None = None
) -> None:
    """Record ``loads`` as absorbed; on ``whole_days`` they replace everything recorded before (one commit).

    ``versions``: the consumer's table version that absorbed a load, for its own consumers' use.
    """
    if not loads and not whole_days:
        return
    versions = versions or {}
    rows = wh.spark.createDataFrame(
        [(consumer, *load, versions.get(load)) for load in sorted(loads)], APPLIED_LOADS.schema
    )
    merge = (
        wh.delta(APPLIED_LOADS)
        .alias("t")
        .merge(
            rows.alias("s"),
            f"t.consumer = '{consumer}' AND s.consumer = t.consumer AND "
            + " AND ".join(f"t.{c} = s.{c}" for c in LOAD_COLUMNS),
        )
        .whenNotMatchedInsertAll()
    )
    if whole_days:
        days = ", ".join(f"DATE'{d.isoformat()}'" for d in sorted(whole_days))
        merge = merge.whenNotMatchedBySourceDelete(f"t.consumer = '{consumer}' AND t.event_date IN ({days})")
    merge.execute()


def rows_of(wh: Warehouse, loads: set[Load]) -> DataFrame:
    """The ``raw_events`` rows of ``loads``, reading only their received days' partitions."""
    received = sorted({load[1] for load in loads})
    pairs = wh.spark.createDataFrame(sorted({(load[0], load[1]) for load in loads}), "event_date date, received_date date")
    return (
        wh.read(RAW_EVENTS)
        .where(F.col("received_date").isin(received) if received else F.lit(False))
        .join(F.broadcast(pairs), ["event_date", "received_date"], "left_semi")
    )
