"""One row per ``messageId``: the copy received first, whatever day it is on and whenever it arrives.

The rule is written down once, here: copies are ranked by ``COPY_ORDER`` (earliest ``receivedAt``, then
the earlier received day, then the payload, then the source: one message sent alike by two Segment sources),
so every arrival order keeps the same copy. That copy's
``timestamp`` is the one that counts, so a copy received earlier but processed later can move its event
to another event day.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

KEY = "message_id"
COPY_ORDER = ("received_at", "received_date", "payload", "source_id")


def message_hash(message_id: Column) -> Column:
    """A 64-bit hash of the id: stored beside it so that finding known ids scans one narrow column."""
    return F.xxhash64(message_id)


def keep_first(copies: DataFrame) -> DataFrame:
    """The first-received copy of each message among ``copies`` (which hold the ``COPY_ORDER`` columns)."""
    rank = F.row_number().over(Window.partitionBy(KEY).orderBy(*COPY_ORDER))
    return copies.withColumn("_rank", rank).where("_rank = 1").drop("_rank")


def _earlier(a: str, b: str) -> Column:
    """Copy ``a`` was received before copy ``b`` (they never share a received day here: see ``arrivals``)."""
    at_a, at_b = F.col(f"{a}.received_at"), F.col(f"{b}.received_at")
    return (at_a < at_b) | ((at_a == at_b) & (F.col(f"{a}.received_date") < F.col(f"{b}.received_date")))


def arrivals(incoming: DataFrame, stored: DataFrame, columns: list[str]) -> DataFrame:
    """What new copies change in ``events``, tagged ``_op``: ``insert``, ``update`` (a stored row replaced on
    its own day) or ``delete`` (a stored row whose message moves to another day, where it is inserted).

    ``incoming``: the first copy of each message among newly received days; ``stored``: the stored rows
    of those messages (from other received days). The new copy wins when it was received first.
    """
    joined = incoming.alias("n").join(stored.alias("o"), KEY, "left")
    is_stored = F.col("o.event_date").isNotNull()
    wins = ~is_stored | _earlier("n", "o")
    same_day = is_stored & (F.col("o.event_date") == F.col("n.event_date"))
    new = joined.where(wins).select(
        *[F.col(f"n.{c}").alias(c) for c in columns], F.when(same_day, "update").otherwise("insert").alias("_op")
    )
    moved = joined.where(wins & is_stored & ~same_day)
    return new.unionByName(moved.select(*[F.col(f"o.{c}").alias(c) for c in columns], F.lit("delete").alias("_op")))


def corrections(wanted: DataFrame, stored: DataFrame, columns: list[str], ignored: tuple[str, ...] = ()) -> DataFrame:
    """What makes ``stored`` rows of some messages equal ``wanted`` (the first copies among all their copies),
    tagged ``_op`` like ``arrivals``: after a received day was re-ingested with other rows, or to repair days.
    A difference in ``ignored`` columns alone leaves a row as it is."""
    w = wanted.select(*[F.col(c).alias(f"w_{c}") for c in columns])
    s = stored.select(*[F.col(c).alias(f"s_{c}") for c in columns])
    joined = w.join(s, F.col(f"w_{KEY}") == F.col(f"s_{KEY}"), "full_outer")
    same = F.lit(True)
    for c in columns:
        if c not in ignored:
            same = same & F.col(f"w_{c}").eqNullSafe(F.col(f"s_{c}"))
    wanted_here, stored_here = F.col(f"w_{KEY}").isNotNull(), F.col(f"s_{KEY}").isNotNull()
    same_day = stored_here & F.coalesce(F.col("w_event_date") == F.col("s_event_date"), F.lit(False))
    new = joined.where(wanted_here & ~same).select(
        *[F.col(f"w_{c}").alias(c) for c in columns], F.when(same_day, "update").otherwise("insert").alias("_op")
    )
    gone = joined.where(stored_here & ~same_day & (~wanted_here | ~same))
    return new.unionByName(gone.select(*[F.col(f"s_{c}").alias(c) for c in columns], F.lit("delete").alias("_op")))
