"""Persons, by the contract's identity rules.

A *link* is a kept event carrying both a ``user_id`` and an ``anonymous_id``. An anonymous id belongs to the
``user_id`` of its latest link in (``timestamp``, ``message_id``) order, whatever order links arrive in, so a
shared device goes wholly to whoever logged in on it last. An event's person, its ``user_key``, is its own
``user_id``, else its anonymous id's person, else its anonymous id.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# What the rules read of an event.
LINK_COLUMNS = ("message_id", "user_id", "anonymous_id", "timestamp")


def persons(events: DataFrame) -> DataFrame:
    """Each linked anonymous id's ``person``: the ``user_id`` of its latest link among ``events``."""
    linked = events.where(F.col("user_id").isNotNull() & F.col("anonymous_id").isNotNull())
    return linked.groupBy("anonymous_id").agg(F.max_by("user_id", F.struct("timestamp", "message_id")).alias("person"))


def stitch(events: DataFrame, persons: DataFrame) -> DataFrame:
    """``events`` with ``user_key`` set to each one's person (``persons`` as from ``persons``)."""
    found = persons.select("anonymous_id", F.col("person").alias("_person"))
    joined = events.join(found, "anonymous_id", "left")
    key = F.coalesce("user_id", "_person", "anonymous_id")
    return joined.withColumn("user_key", key).drop("_person").select(*events.columns)
