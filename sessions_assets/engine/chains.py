"""Keeping ``sessions`` exact when events come and go: recompute only the chains they touch.

An added or removed event can only change the chain it falls in (or joins), and a stored session is a
run of events with no gap over ``session_gap``, so the stored sessions of the touched users, taken as
intervals, say where those chains begin and end without reading any event. The events of a touched chain
are then sessionized whole, and the chain's stored sessions are replaced. A chain of new events that comes
near no stored session needs nothing read at all. Numbers follow: a user's sessions are renumbered in
``session_start`` order wherever any of them changed.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets.engine.sessionize import SESSION_COLUMNS, starts_chain

# What chaining needs of a stored session; the rest is only written.
STORED_COLUMNS = ("session_id", "user_key", "session_number", "session_start", "session_end", "session_date")


def touched_chains(stored: DataFrame, dirty: DataFrame, gap: timedelta) -> DataFrame:
    """The chains holding a dirty span, with their extent and whether any stored session is in them.

    ``stored``: sessions (``STORED_COLUMNS``) of the dirty users; ``dirty``: spans (``user_key``,
    ``dirty_from``, ``dirty_to``) whose chains must be recomputed: an added or removed event's moment,
    or a whole window to repair. Returns ``user_key``, ``chain_start``, ``chain_end``, ``has_stored``.
    """
    spans = stored.select(
        "user_key",
        F.col("session_start").alias("_from"),
        F.col("session_end").alias("_to"),
        F.lit(True).alias("_stored"),
        F.lit(False).alias("_dirty"),
    ).unionByName(
        dirty.select(
            "user_key",
            F.col("dirty_from").alias("_from"),
            F.col("dirty_to").alias("_to"),
            F.lit(False).alias("_stored"),
            F.lit(True).alias("_dirty"),
        )
    )
    by_user = Window.partitionBy("user_key").orderBy("_from", "_to")
    reach = F.max("_to").over(by_user.rowsBetween(Window.unboundedPreceding, -1))
    starts = starts_chain(F.col("_from"), reach, gap)
    chained = spans.withColumn(
        "_chain", F.sum(starts.cast("int")).over(by_user.rowsBetween(Window.unboundedPreceding, 0))
    )
    return (
        chained.groupBy("user_key", "_chain")
        .agg(
            F.min("_from").alias("chain_start"),
            F.max("_to").alias("chain_end"),
            F.max("_stored").alias("has_stored"),
            F.max("_dirty").alias("_touched"),
        )
        .where("_touched")
        .drop("_chain", "_touched")
    )


def within(rows: DataFrame, chains: DataFrame, moment: str = "timestamp") -> DataFrame:
    """Rows of ``rows`` (with ``user_key``) whose ``moment`` lies in one of their user's ``chains``."""
    extent = F.broadcast(chains.select("user_key", "chain_start", "chain_end"))
    inside = (F.col(moment) >= F.col("chain_start")) & (F.col(moment) <= F.col("chain_end"))
    return rows.join(extent, "user_key").where(inside).drop("chain_start", "chain_end")


def writes(stored: DataFrame, chains: DataFrame, fresh: DataFrame, offsets: DataFrame | None = None) -> DataFrame:
    """``sessions`` rows to write, tagged ``_op``: ``insert``, ``update`` or ``delete`` for the touched
    chains' sessions, ``renumber`` for their users' other sessions whose number moved.

    ``stored``: the touched users' stored sessions (``STORED_COLUMNS``); ``fresh``: the touched chains
    sessionized from their events (``SESSION_COLUMNS``, numbers not yet final). One window numbers the
    kept and the fresh sessions of each user together; one join on the id sorts the fresh ones into new
    and changed, and the replaced ones left over are deleted. ``offsets`` (``user_key``, ``offset``): how many
    sessions each user has before those in ``stored`` (none: ``stored`` holds all of them).
    """
    replaced = within(stored, chains, "session_start").select("session_id", F.lit(True).alias("_replaced"))
    old = stored.join(F.broadcast(replaced), "session_id", "left")
    everyone = (
        old.where(F.col("_replaced").isNull())
        .select(*STORED_COLUMNS, F.lit(False).alias("_fresh"))
        .unionByName(fresh.withColumn("_fresh", F.lit(True)), allowMissingColumns=True)
    )
    number = F.row_number().over(Window.partitionBy("user_key").orderBy("session_start")).cast("long")
    if offsets is not None:
        everyone = everyone.join(F.broadcast(offsets), "user_key", "left")
        number = number + F.coalesce(F.col("offset"), F.lit(0))
    numbered = everyone.withColumn("_number", number)
    renumbered = numbered.where(~F.col("_fresh") & (F.col("_number") != F.col("session_number"))).select(
        *STORED_COLUMNS[:2],
        F.col("_number").alias("session_number"),
        *STORED_COLUMNS[3:],
        F.lit("renumber").alias("_op"),
    )
    new = numbered.where("_fresh").withColumn("session_number", F.col("_number")).select(*SESSION_COLUMNS)
    gone = old.where("_replaced").select("session_id", "session_date", F.lit(True).alias("_gone"))
    written = new.join(gone, ["session_id", "session_date"], "full_outer").select(
        *SESSION_COLUMNS,
        F.when(F.col("user_key").isNull(), "delete").when(F.col("_gone"), "update").otherwise("insert").alias("_op"),
    )
    return written.unionByName(renumbered, allowMissingColumns=True)
