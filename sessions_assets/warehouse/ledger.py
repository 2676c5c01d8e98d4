"""The one record of what a derived table has absorbed: the version of its input, kept in its own commits.

Which table absorbs which is the registry's (``refresh/steps.py``): ``events`` absorbs ``raw_events``, ``identities``
and ``sessions`` absorb ``events``, ``users`` absorbs both, ``lifecycle`` absorbs ``sessions``, and ``daily_snapshot``
absorbs ``lifecycle`` and ``received_days`` (the snapshot's horizon moves with every ingest).
Each commit of a derived table notes ``{"absorbed": {<input>: <version>}}`` in its ``userMetadata``,
atomically with its rows, so the note can never disagree with the data. A run reads the note, reads the
input's change feed from the next version to the latest, applies the change, and commits with a new
note. A run that dies before its commit leaves the old note, and a plain re-run redoes the same work;
one that commits has moved the note with its rows. With no note (a new table) or no change feed left
(vacuumed), the table is rebuilt whole from its input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import date

from pyspark.sql import DataFrame

from sessions_assets.warehouse.delta import Commit, DeltaLog, Warehouse
from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import RECEIVED_DAYS, Table

# Commits that change no row: compaction, the two marks a VACUUM leaves in the log, a column or a property added,
# and the rewrite of files whose deleted rows an erasure purges.
NO_DATA_CHANGE = (
    "OPTIMIZE",
    "VACUUM START",
    "VACUUM END",
    "ADD COLUMNS",
    "SET TBLPROPERTIES",
    "UNSET TBLPROPERTIES",
    "REORG",
)
ABSORBED = "absorbed"
# Noted on the first commit an erasure keeps when it cuts a table's log (``forget/purge.py``, ``truncate_log``): the last version
# that changed rows before it; a table that absorbed that version has nothing to read in the versions cut.
QUIET_SINCE = "no_rows_changed_since"
# How many of a table's latest commits are searched for its note; past them it is rebuilt whole.
NOTE_HISTORY = 50


# Settings a table's rows are computed with, noted in each of its commits (``Position.baked``): a table whose note
# names other values is rebuilt whole. A note without one was written with the value here.
TIME_ZONE, STITCHED = "time_zone", "stitched"
BAKED_BEFORE = {TIME_ZONE: "UTC", STITCHED: False}


@dataclass(frozen=True)
class Position:
    """Where a derived table stands against its input."""

    table: Table
    source: Table
    absorbed: int | None  # the input version the table reflects; None: unknown, rebuild whole
    latest: int  # the input's version now
    version: int | None = None  # the table's version whose note says so (what to read it at)
    note: dict = field(default_factory=dict)  # that note whole (a step may note more than what it absorbed)
    baked: dict = field(default_factory=dict)  # the settings the step computes rows with, noted with them

    @property
    def current(self) -> bool:
        return self.absorbed == self.latest

    @property
    def rebaked(self) -> bool:
        """Whether the table's rows were computed with other settings (a time zone, stitching) than the step's."""
        return any(self.note.get(k, BAKED_BEFORE.get(k)) != v for k, v in self.baked.items())

    @property
    def commit(self) -> Commit:
        """The note and transaction of the write that brings the table to ``latest``."""
        return Commit({ABSORBED: {self.source.name: self.latest}, **self.baked}, (self.table.name, self.latest))

    @property
    def replacing(self) -> Commit:
        """The note of a write that replaces the table whole (a rebuild, a repair): without a transaction,
        since Delta skips a write whose version its id already committed, and a rebuild may well follow a
        commit at the same input version. Two identical overwrites are harmless."""
        return Commit(self.commit.note)


def position(wh: Warehouse, table: Table, source: Table, **baked) -> Position:
    """Where ``table`` stands against ``source``; ``baked``: the settings its rows are computed with (noted)."""
    wh.log(table)
    return replace(_position(wh.storage, table, source, wh.version(source)), baked=baked)


def _position(storage: Storage, table: Table, source: Table, latest: int) -> Position:
    for version, note in DeltaLog(storage, table).notes(NOTE_HISTORY):
        absorbed = note.get(ABSORBED, {}).get(source.name)
        if absorbed is not None:
            # A version past the input's latest means the input was recreated: start over.
            return Position(table, source, absorbed if absorbed <= latest else None, latest, version, note)
    return Position(table, source, None, latest)


def built_in(storage: Storage, table: Table) -> dict:
    """The settings ``table``'s latest noted commit says its rows were computed with (``BAKED_BEFORE`` where a
    note names none); empty for a table without a note."""
    for _, note in DeltaLog(storage, table).notes(NOTE_HISTORY):
        if ABSORBED in note:
            return {k: note.get(k, v) for k, v in BAKED_BEFORE.items()}
    return {}


def raced(wh: Warehouse, at: Position) -> bool:
    """Whether a step's write was not the only one to absorb input since ``at``, its position when it read: two
    runs outside the run queue (two ``sessions-assets run`` at once) that both add the same changes to a table
    kept by sums (``identities``, ``users``) count them twice, where Delta sees no conflict (one run's rows were
    all new). The step then rebuilds the table whole."""
    log = DeltaLog(wh.storage, at.table)
    since = -1 if at.version is None else at.version
    newer = [v for v in log.versions() if v > since]
    return len(newer) > 1 and sum(1 for _, note in log.notes(len(newer)) if ABSORBED in note) > 1


def behind(storage: Storage, follows: tuple[tuple[Table, Table], ...]) -> list[Position]:
    """Of ``follows`` ((table, input) pairs: ``refresh.steps.FOLLOWS``), the tables that have not absorbed every
    change of their input (read from the logs, no Spark). Commits that change no row (``NO_DATA_CHANGE``) leave a
    table current."""
    late = []
    for table, source in follows:
        log = DeltaLog(storage, source)
        versions = log.versions()
        if not versions:
            continue
        at = _position(storage, table, source, versions[-1])
        if (
            at.absorbed is None
            or first_unabsorbed(log, versions, at.absorbed) is None  # log cleaned up: rebuild whole
            or any(log.commit_info(v).get("operation") not in NO_DATA_CHANGE for v in versions if v > at.absorbed)
        ):
            late.append(at)
    return late


@dataclass(frozen=True)
class FileRecord:
    """One landing file of a received day as its latest read left it (``tables.FILE_RECORD``): the lines it holds
    in the tables (a forgotten person's are not counted), accepted, rejected (a file not read whole counts one
    more), and its accepted lines per event day."""

    source_file: str
    fingerprint: str
    lines: int
    accepted: int
    rejected: int
    events_per_day: dict[date, int]

    @classmethod
    def of(cls, row: dict) -> FileRecord:
        per_day = row["events_per_day"] or {}
        return cls(
            row["source_file"],
            row["fingerprint"],
            row["lines"],
            row["accepted"],
            row["rejected"],
            dict(per_day.items() if isinstance(per_day, dict) else per_day),
        )

    def row(self) -> tuple:
        return (self.source_file, self.fingerprint, self.lines, self.accepted, self.rejected, self.events_per_day)


@dataclass(frozen=True)
class Received:
    """A received day as its latest ingest left it (a row of ``received_days``)."""

    day: date
    fingerprint: str
    lines: int
    accepted: int
    rejected: int
    event_days: tuple[date, ...]
    raw_version: int
    # The zone its event days are local days of; None: ingested before days were local (in UTC) and before ids sent
    # as JSON integers were read.
    time_zone: str | None = None
    # Its files as read; None: ingested before files were recorded (its next ingest reads the day whole).
    files: tuple[FileRecord, ...] | None = None

    @property
    def zone(self) -> str:
        return self.time_zone or BAKED_BEFORE[TIME_ZONE]


def _file_uris(storage: Storage, table: Table, partition_filters=None) -> list[str]:
    """The table's live files (those in ``partition_filters``, delta-rs's form), from its log with delta-rs: no
    Spark; none before the table's first commit."""
    from deltalake import DeltaTable

    if DeltaLog(storage, table).version() is None:
        return []
    uri = storage.table_uri(table.name)
    location = storage.path_of(uri) if uri.startswith("file:") else uri
    return DeltaTable(location).file_uris(partition_filters)


def small_table(storage: Storage, table: Table) -> list[dict]:
    """Every row of a small table without deletion vectors, read with delta-rs: no Spark."""
    import pyarrow.parquet as pq

    # delta-rs names the table's files; each is read whole in this thread. Arrow's dataset scan, even unthreaded,
    # reads through its IO threads, and one left running aborted the interpreter at exit (SIGABRT after a
    # correct answer from ``status``, or from a ``run`` with nothing due) about one time in two.
    rows = []
    for file in _file_uris(storage, table):
        with storage.fs.open(storage.path_of(file), "rb") as f:
            rows += pq.ParquetFile(f).read(use_threads=False).to_pylist()
    return rows


def holds_days(storage: Storage, table: Table, days: list[date]) -> bool:
    """Whether a table partitioned by day has a file on any of ``days`` (one whose rows a deletion vector all
    deleted still counts)."""
    listed = [d.isoformat() for d in days]
    return bool(listed) and bool(_file_uris(storage, table, [(table.partition_column, "in", listed)]))


def received(storage: Storage) -> dict[date, Received]:
    """Every received day ingested, as recorded beside the rows (read with delta-rs: no Spark)."""
    rows = small_table(storage, RECEIVED_DAYS)
    return {
        r["received_date"]: Received(
            r["received_date"],
            r["fingerprint"],
            r["lines"],
            r["accepted"],
            r["rejected"],
            tuple(r["event_days"] or ()),
            r["raw_version"],
            r.get("time_zone"),
            None if r.get("files") is None else tuple(FileRecord.of(f) for f in r["files"]),
        )
        for r in rows
    }


def ingested_elsewhere(storage: Storage, zone: str) -> str | None:
    """Why refreshing in ``zone`` is refused, in one line: received days ingested in another time zone (their
    event days, and the start day's bound, are another zone's); None when there are none."""
    others: dict[str, list[date]] = {}
    for day in received(storage).values():
        if day.zone != zone:
            others.setdefault(day.zone, []).append(day.day)
    if not others:
        return None
    said = "; ".join(
        f"{len(days)} received day(s) ({min(days)}..{max(days)}) were ingested in {name}"
        for name, days in others.items()
    )
    return (
        f"the time zone is {zone}, but {said}: run `sessions-assets reingest` to ingest them again in it and "
        "rebuild the derived tables (refreshes wait until then; forgetting a person does not)"
    )


def to_reingest(storage: Storage, zone: str) -> list[date]:
    """The received days whose stored lines are to be judged again: ingested in another time zone, or before ids
    sent as JSON integers were read."""
    return sorted(d.day for d in received(storage).values() if d.time_zone != zone)


def horizon(storage: Storage) -> date | None:
    """The data's horizon: the latest received day with a line in it, accepted or rejected."""
    return max((r.day for r in received(storage).values() if r.accepted + r.rejected), default=None)


def first_unabsorbed(log: DeltaLog, versions: list[int], absorbed: int) -> int | None:
    """The first version of the input a table at ``absorbed`` still has to read: the next one, or, when an
    erasure cut the log after commits that changed no row (``QUIET_SINCE``, noted on the log's first commit), the
    first one kept. None: the versions between are gone, their changes unknown."""
    if absorbed >= versions[-1] or absorbed + 1 in versions:
        return absorbed + 1
    try:
        quiet = json.loads(log.commit_info(versions[0]).get("userMetadata") or "{}").get(QUIET_SINCE)
    except ValueError:
        quiet = None
    return versions[0] if quiet is not None and quiet <= absorbed < versions[0] else None


# A commit's metrics that say it took rows out or changed them in place: files removed (a day replaced), rows deleted
# (a ``replaceWhere`` that marks part of a file with a deletion vector reports them here, as long as files carry row
# counts: Delta's statistics, which the pipeline keeps on), rows a ``MERGE`` updated or deleted, its deletion vectors.
_TAKES_OUT = (
    "numRemovedFiles",
    "numDeletedRows",
    "numDeletionVectorsAdded",
    "numDeletionVectorsUpdated",
    "numTargetRowsUpdated",
    "numTargetRowsDeleted",
    "numTargetFilesRemoved",
    "numTargetDeletionVectorsAdded",
    "numTargetDeletionVectorsUpdated",
)
# The metric an overwriting write or a MERGE reports: without it, the commit is not judged to have only added.
_REPORTED = {"WRITE": "numRemovedFiles", "MERGE": "numTargetRowsInserted"}


def only_adds(info: dict) -> bool:
    """Whether a commit (its ``commit_info``) only added rows, known from its metrics without reading data: an
    append, a write that replaced nothing (a new received day), a ``MERGE`` that only inserted. Any other operation
    may have taken rows out, compactions and property commits included: ``data_commits`` leaves those out."""
    operation, metrics = info.get("operation"), info.get("operationMetrics", {})
    if operation == "WRITE" and info.get("operationParameters", {}).get("mode") == "Append":
        return True
    if _REPORTED.get(operation) not in metrics:
        return False
    return not any(int(metrics.get(m, 0)) for m in _TAKES_OUT)


def data_commits(wh: Warehouse, at: Position) -> list[dict]:
    """The ``commit_info`` of each commit of the input since ``at.absorbed`` that may have changed rows (not a
    compaction or a property commit): read from its log, no data read."""
    log = wh.log(at.source)
    commits = (log.commit_info(v) for v in log.versions() if at.absorbed < v <= at.latest)
    return [info for info in commits if info.get("operation") not in NO_DATA_CHANGE]


def only_added(wh: Warehouse, at: Position) -> bool:
    """Whether every commit of the input since ``at.absorbed`` only added rows (``only_adds`` of its
    ``data_commits``). Its change feed then holds inserts alone: nothing to net against rows taken out, and no
    stored row replaced. For a feed ``unabsorbed`` returned: a version the log no longer holds is then one that
    changed no row (``first_unabsorbed``)."""
    return all(only_adds(info) for info in data_commits(wh, at))


def unabsorbed(wh: Warehouse, at: Position) -> DataFrame | None:
    """The input's rows changed since ``at.absorbed``, or None when its log no longer holds those versions
    (cleaned up after ``delta.logRetentionDuration``): then the table is rebuilt whole."""
    log = wh.log(at.source)
    first = first_unabsorbed(log, log.versions(), at.absorbed)
    return None if first is None else wh.change_feed(at.source, first, at.latest)
