"""The one record of what a derived table has absorbed: the version of its input, kept in its own commits.

``events`` absorbs ``raw_events``, ``sessions`` absorbs ``events``, ``lifecycle`` absorbs ``sessions``.
Each commit of a derived table notes ``{"absorbed": {<input>: <version>}}`` in its ``userMetadata``,
atomically with its rows, so the note can never disagree with the data. A run reads the note, reads the
input's change feed from the next version to the latest, applies the change, and commits with a new
note. A run that dies before its commit leaves the old note, and a plain re-run redoes the same work;
one that commits has moved the note with its rows. With no note (a new table) or no change feed left
(vacuumed), the table is rebuilt whole from its input.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame

from sessions_assets.warehouse.delta import Commit, Warehouse
from sessions_assets.warehouse.tables import Table

ABSORBED = "absorbed"
# How many of a table's latest commits are searched for its note; past them it is rebuilt whole.
NOTE_HISTORY = 50


@dataclass(frozen=True)
class Position:
    """Where a derived table stands against its input."""

    table: Table
    source: Table
    absorbed: int | None  # the input version the table reflects; None: unknown, rebuild whole
    latest: int  # the input's version now

    @property
    def current(self) -> bool:
        return self.absorbed == self.latest

    @property
    def commit(self) -> Commit:
        """The note and transaction of the write that brings the table to ``latest``."""
        return Commit({ABSORBED: {self.source.name: self.latest}}, (self.table.name, self.latest))

    @property
    def replacing(self) -> Commit:
        """The note of a write that replaces the table whole (a rebuild, a repair): without a transaction,
        since Delta skips a write whose version its id already committed, and a rebuild may well follow a
        commit at the same input version. Two identical overwrites are harmless."""
        return Commit(self.commit.note)


def position(wh: Warehouse, table: Table, source: Table) -> Position:
    latest = wh.version(source)
    for _, note in wh.notes(table, NOTE_HISTORY):
        absorbed = note.get(ABSORBED, {}).get(source.name)
        if absorbed is not None:
            # A version past the input's latest means the input was recreated: start over.
            return Position(table, source, absorbed if absorbed <= latest else None, latest)
    return Position(table, source, None, latest)


def changes(wh: Warehouse, at: Position) -> DataFrame | None:
    """The input's rows changed since ``at.absorbed``, or None when its log no longer holds those versions
    (cleaned up after ``delta.logRetentionDuration``): then the table is rebuilt whole."""
    if at.absorbed + 1 not in wh.versions(at.source):
        return None
    return wh.change_feed(at.source, at.absorbed + 1, at.latest)
