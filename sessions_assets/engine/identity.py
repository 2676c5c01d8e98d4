"""Persons, by the contract's identity rules.

A *link* is a kept event carrying both a ``user_id`` and an ``anonymous_id``. An anonymous id belongs to the
``user_id`` of its latest link in (``timestamp``, ``message_id``) order, whatever order links arrive in, so a
shared device goes wholly to whoever logged in on it last. An event's person, its ``user_key``, is its own
``user_id``, else its anonymous id's person, else its anonymous id.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.engine.schema import schema

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


# A person's ids, tallied per (person, anonymous id, user id) over its events: how many, on which days (first and
# last), and the latest of them that is a link. What the identity lookups read instead of every event: the persons
# of a day's anonymous ids (the latest links), where a device's anonymous events are (its days), and the ids a
# person's events carry (``users``: its ``user_id`` and ``anonymous_ids``).
TALLY_KEY = ("user_key", "anonymous_id", "user_id")
TALLY_SCHEMA = schema(
    "user_key string, anonymous_id string, user_id string, events long, first_day date, last_day date, "
    "link_at timestamp, link_id string"
)


def tallies(events: DataFrame) -> DataFrame:
    """Events (``TALLY_KEY``, ``timestamp``, ``message_id``, ``event_date``, and optionally a ``weight``: +1 for
    an event added, -1 for one removed) -> per ``TALLY_KEY``: the net ``events``, the first and last day and the
    latest link (``link_at``, ``link_id``) of those added, and ``unlinked``: whether a removed one was a link."""
    weight = F.col("weight") if "weight" in events.columns else F.lit(1)
    added, is_link = weight > 0, F.col("user_id").isNotNull() & F.col("anonymous_id").isNotNull()
    latest = F.max(F.when(added & is_link, F.struct(F.col("timestamp").alias("at"), F.col("message_id").alias("id"))))
    return (
        events.groupBy(*TALLY_KEY)
        .agg(
            F.sum(weight).cast("long").alias("events"),
            F.min(F.when(added, F.col("event_date"))).alias("first_day"),
            F.max(F.when(added, F.col("event_date"))).alias("last_day"),
            latest.alias("_latest"),
            F.coalesce(F.max(~added & is_link), F.lit(False)).alias("unlinked"),
        )
        .select(*TALLY_KEY, "events", "first_day", "last_day", "_latest.at", "_latest.id", "unlinked")
        .withColumnsRenamed({"at": "link_at", "id": "link_id"})
    )


def latest_links(tallied: DataFrame) -> DataFrame:
    """Tallies -> each linked anonymous id's ``person`` (as ``persons`` does from events)."""
    links = tallied.where(F.col("link_at").isNotNull()).select(
        "anonymous_id", "user_id", F.col("link_at").alias("timestamp"), F.col("link_id").alias("message_id")
    )
    return persons(links)
