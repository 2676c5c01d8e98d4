"""Accepted raw rows of one or more event days -> the ``events`` table rows (one per ``messageId``).

The dedup key and the rule for which copy survives are written down once, here.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets.tables import EVENTS

DEDUP_KEY = "message_id"
# The copy kept is the earliest received; ties are broken on stable columns so any arrival order agrees.
KEEP_FIRST = ("received_at", "received_date", "payload")


def dedupe(raw: DataFrame) -> DataFrame:
    """One row per ``message_id``: the earliest-received copy, whatever order the received days came in."""
    ranked = raw.withColumn("_copy", F.row_number().over(Window.partitionBy(DEDUP_KEY).orderBy(*KEEP_FIRST)))
    return ranked.where(F.col("_copy") == 1).select(*EVENTS.schema.fieldNames())


def partition_map_rows(accepted: DataFrame) -> DataFrame:
    """Which event days one received day's accepted rows touch, with counts (the recorded mapping)."""
    return accepted.groupBy("received_date", "event_date").agg(F.count(F.lit(1)).alias("events"))
