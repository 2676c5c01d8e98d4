"""What a refresh step did, and when it rebuilds its table whole instead of applying changes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import date

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import Commit, Warehouse

# A change feed's row kinds: what a commit added to the table, and what it took out.
ADDED, REMOVED = ("insert", "update_postimage"), ("delete", "update_preimage")


@dataclass
class Outcome:
    """What a step did, for materialization metadata."""

    how: str = "up to date"  # 'up to date', 'incremental', 'rebuilt whole', 'repaired'
    absorbed: int | None = None  # the input version now reflected
    counts: Counter = field(default_factory=Counter)
    days: Counter = field(default_factory=Counter)  # partition day -> rows written or deleted there
    tables: dict[str, list[dict]] = field(default_factory=dict)  # small summaries, a row per dict

    def add(self, part: Outcome) -> None:
        """Count in what another part of the same step did."""
        self.counts.update(part.counts)
        self.days.update(part.days)
        self.tables.update(part.tables)


def read_once(feed: DataFrame, columns) -> DataFrame:
    """A change feed's rows (of ``columns``, with ``_added``: whether the commit added the row or took it out), read
    once: the server plans a change feed anew wherever a query refers to it (three executions each)."""
    return feed.select(*columns, F.col("_change_type").isin(*ADDED).alias("_added")).localCheckpoint()


def net_changes(rows: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The rows added and those taken out (``read_once``'s), net: an update that changes none of the columns
    cancels out."""
    added, removed = rows.where("_added").drop("_added"), rows.where("NOT _added").drop("_added")
    return added.exceptAll(removed), removed.exceptAll(added)


def changes(wh: Warehouse, feed: DataFrame, at: ledger.Position, columns) -> tuple[DataFrame, DataFrame | None]:
    """The rows the input's commits since ``at`` added and those they took out, net (``net_changes``); None for
    the second when the commits only added rows (``ledger.only_added``): the feed's rows are then the added ones,
    read where they are used, with nothing to cancel them."""
    if ledger.only_added(wh, at):
        return feed.select(*columns), None
    return net_changes(read_once(feed, columns))


def days_in(df: DataFrame, column: str) -> list[date]:
    return sorted(r[0] for r in df.select(column).distinct().collect() if r[0] is not None)


def repair_commit(days: tuple[date, date]) -> Commit:
    """A repair's write notes what it recomputed, not an input version: it absorbs nothing new."""
    return Commit({"repaired": [d.isoformat() for d in days]})


def rebuilding(wh: Warehouse, at: ledger.Position) -> tuple[bool, DataFrame | None]:
    """Whether the table must be rebuilt whole, and otherwise the input's changes (None: none pending)."""
    if at.absorbed is None or at.rebaked:
        return True, None
    if at.current:
        return False, None
    feed = ledger.unabsorbed(wh, at)
    return feed is None, feed


def rebuilt(wh: Warehouse, table, column: str, at: ledger.Position) -> Outcome:
    """A table rebuilt whole: every day it holds changed (counted from the narrow date column)."""
    done = Outcome("rebuilt whole", at.latest)
    for row in wh.read(table).groupBy(column).count().collect():
        done.days[row[column]] = row["count"]
    done.counts["rows"] = sum(done.days.values())
    return done
