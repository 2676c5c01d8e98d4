"""Accepted raw rows of one or more event days -> the ``events`` table rows (one per ``messageId``).

The dedup key and the rule for which copy survives are written down once, here.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from datetime import date

from sessions_assets.tables import EVENTS, PARTITION_MAP, RAW_EVENTS, Warehouse

DEDUP_KEY = "message_id"
# The copy kept is the earliest received; ties are broken on stable columns so any arrival order agrees.
KEEP_FIRST = ("received_at", "received_date", "payload")


def dedupe(raw: DataFrame) -> DataFrame:
    """One row per ``message_id``: the earliest-received copy, whatever order the received days came in."""
    ranked = raw.withColumn("_copy", F.row_number().over(Window.partitionBy(DEDUP_KEY).orderBy(*KEEP_FIRST)))
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
