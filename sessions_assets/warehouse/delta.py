"""Reads and atomic writes of the Delta tables, and the mark each write leaves.

Every write is one Delta commit: ``replaceWhere`` replaces exactly a received day, ``MERGE`` inserts,
updates and deletes at once, an overwrite replaces a small table whole. A failed run therefore leaves a
table at its last commit. A derived table's commit also records, in its ``userMetadata``, the version of
its input it now reflects (``ledger.py``), and carries a Delta transaction id for that version, so two
runs that computed the same change cannot both commit it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import Table

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID, TXN_VERSION = "spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion"
# How another process's creation of the same table shows in ours, and how long to wait for its commit.
_CREATION_RACE = ("DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", "DELTA_TABLE_NOT_FOUND", "DELTA_PATH_EXISTS")
CREATION_WAIT_SECONDS = 30.0
# From this many rows, an ingest's parsing and the events step's stitching and write run compiled
# (``Warehouse.compiled``). At 100,000 events a day: an ingest of 5 days, 87 s compiled and 110 s interpreted; the
# events step of one more day, 38 s and 71 s. A day of a thousand events is faster interpreted.
COMPILED_FROM_ROWS = 100_000
# Up to this many rows of input, a step's joins broadcast the sets their hints name (a day's messages, its ids, its
# users); past it, Spark picks each join by its size estimates: broadcasting every message of a whole-history repair
# (18 M at 100,000 a day and H = 180) runs the default 3 GB driver out of memory.
BROADCAST_UP_TO_ROWS = 2_000_000
# Delta refusing a commit because another one won (io.delta.exceptions.Concurrent*, MetadataChanged,
# ProtocolChanged), by the error classes they carry: in a driver of the run's own and over Spark Connect alike.
_CONFLICTS = ("DELTA_CONCURRENT_", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED", "io.delta.exceptions.Concurrent")


def is_write_conflict(error: BaseException | None) -> bool:
    """Whether ``error`` (or what caused it) is Delta refusing a commit because another one won."""
    while error is not None:
        if any(mark in str(error)[:1000] for mark in _CONFLICTS):
            return True
        error = error.__cause__ or error.__context__
    return False


def assign(columns) -> str:
    """A ``MERGE``'s ``UPDATE SET``: each column from the source row."""
    return ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)


def insert(columns) -> str:
    """A ``MERGE``'s ``INSERT``: the columns, from the source row."""
    return f"({', '.join(f'`{c}`' for c in columns)}) VALUES ({', '.join(f's.`{c}`' for c in columns)})"


def on_days(column: str, days) -> str:
    """A SQL condition on a date column (a ``replaceWhere``, a ``MERGE``'s target side); FALSE without days."""
    listed = ", ".join(f"DATE'{d.isoformat()}'" for d in sorted(days))
    return f"{column} IN ({listed})" if listed else "FALSE"


class DeltaLog:
    """A table's commits, read from its ``_delta_log`` (Delta's protocol: one JSON file per version, whose
    ``commitInfo`` holds the note and the operation's metrics) through the storage layer: a listing and a few
    small reads, no Spark, so the sensors and ``status`` read where each table stands without starting it."""

    def __init__(self, storage: Storage, table: Table):
        self.storage = storage
        self.path = f"{storage.path_of(storage.table_uri(table.name))}/_delta_log"

    def versions(self) -> list[int]:
        """The versions whose commit files the log holds, oldest first (none: no table yet)."""
        if not self.storage.fs.isdir(self.path):
            return []
        names = (name.rsplit("/", 1)[-1] for name in self.storage.fs.ls(self.path, detail=False))
        return sorted(int(name[:-5]) for name in names if name.endswith(".json") and name[:-5].isdigit())

    def version(self) -> int | None:
        versions = self.versions()
        return versions[-1] if versions else None

    def commit_info(self, version: int) -> dict:
        """The ``commitInfo`` of one version: ``operation``, ``operationMetrics``, ``userMetadata``, ..."""
        text = self.storage.fs.cat_file(f"{self.path}/{version:020d}.json").decode()
        return next((json.loads(line)["commitInfo"] for line in text.splitlines() if '"commitInfo"' in line), {})

    def notes(self, limit: int) -> Iterator[tuple[int, dict]]:
        """The notes of the latest ``limit`` commits, newest first (commits without one left out)."""
        for version in reversed(self.versions()[-limit:]):
            try:
                yield version, json.loads(self.commit_info(version).get("userMetadata") or "")
            except ValueError:
                continue


@dataclass(frozen=True)
class Commit:
    """What a write records with its rows: a note (``userMetadata``) and, to make it happen once, a Delta
    transaction (application id, version): Delta skips a write whose version that id already committed,
    and fails one that raced with it."""

    note: dict | None = None
    txn: tuple[str, int] | None = None


def _as_specified(df: DataFrame, table: Table, *more: str) -> DataFrame:
    """``df`` with the spec's columns in order; a column added after the version read is null there."""
    present = set(df.columns)
    columns = [F.col(f.name) if f.name in present else F.lit(None).cast(f.dataType).alias(f.name) for f in table.schema]
    return df.select(*columns, *more)


class Warehouse:
    """The tables under ``$ROOT/warehouse``, each created on first use so that readers never meet a missing one."""

    def __init__(self, spark: SparkSession, storage: Storage):
        self.spark = spark
        self.storage = storage
        self._ready: set[str] = set()

    def uri(self, table: Table) -> str:
        return self.storage.table_uri(table.name)

    def _ensure(self, table: Table) -> None:
        """Create the table on first use, or add the columns its spec has gained since it was stored."""
        if table.name not in self._ready:
            if not DeltaLog(self.storage, table).versions():
                self._create(table)
            else:
                self._add_columns(table)
            self._ready.add(table.name)

    def _add_columns(self, table: Table) -> None:
        """Schema evolution: a column of the spec that the stored table lacks is added (null in the rows
        already stored, until a repair recomputes them; the README says how)."""

        def missing() -> list:
            stored = set(self.spark.read.format("delta").load(self.uri(table)).columns)  # the schema, read once
            return [f for f in table.schema.fields if f.name not in stored]

        absent = missing()
        if absent:
            added = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in absent)
            try:
                self.spark.sql(f"ALTER TABLE delta.`{self.uri(table)}` ADD COLUMNS ({added})")
            except Exception:  # another run may have added them first
                if missing():
                    raise

    def _create(self, table: Table) -> None:
        """Create the table unless it exists; if another process creates it at the same moment, wait for it."""
        columns = [f"`{f.name}` {f.dataType.simpleString()}" for f in table.schema]
        if isinstance(table.partition, tuple):
            name, expression = table.partition
            columns.append(f"`{name}` STRING GENERATED ALWAYS AS ({expression})")
        ddl = f"CREATE TABLE IF NOT EXISTS delta.`{self.uri(table)}` ({', '.join(columns)}) USING delta"
        if table.partition:
            ddl += f" PARTITIONED BY (`{table.partition_column}`)"
        if table.properties:
            properties = ", ".join(f"'{k}' = '{v}'" for k, v in table.properties)
            ddl += f" TBLPROPERTIES ({properties})"
        try:
            self.spark.sql(ddl)
        except Exception as error:  # re-raised below unless the table now exists
            racing = is_write_conflict(error) or any(mark in str(error)[:500] for mark in _CREATION_RACE)
            deadline = time.monotonic() + (CREATION_WAIT_SECONDS if racing else 0)
            while not DeltaLog(self.storage, table).versions():
                if time.monotonic() >= deadline:
                    raise error from None
                time.sleep(0.2)

    # --- reading ------------------------------------------------------------------------------------

    def read(self, table: Table, version: int | None = None) -> DataFrame:
        """The table's columns (not the generated partition column), at ``version`` if given."""
        self._ensure(table)
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return _as_specified(reader.load(self.uri(table)), table)

    def log(self, table: Table) -> DeltaLog:
        self._ensure(table)
        return DeltaLog(self.storage, table)

    def version(self, table: Table) -> int:
        return self.log(table).version()

    def change_feed(self, table: Table, first: int, last: int) -> DataFrame:
        """Rows changed by versions ``first..last``, with ``_change_type`` (Delta's change data feed)."""
        self._ensure(table)
        feed = (
            self.spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", first)
            .option("endingVersion", last)
            .load(self.uri(table))
        )
        return _as_specified(feed, table, "_change_type")

    # --- upkeep -------------------------------------------------------------------------------------

    def compact(self, table: Table) -> dict:
        """Rewrite small files into large ones and fold deletion vectors in: a commit that changes no rows,
        so readers, change feeds and the absorbed notes are unaffected."""
        self._ensure(table)
        self.spark.sql(f"OPTIMIZE delta.`{self.uri(table)}`")
        log = self.log(table)
        return log.commit_info(log.version()).get("operationMetrics", {})

    def vacuum(self, table: Table, retain_hours: int) -> None:
        """Delete the files no version younger than ``retain_hours`` reads (change-feed files included).

        ``LITE`` finds them in the log instead of listing every file (seconds instead of ~20 s a table here);
        Delta refuses it when the log no longer reaches back to the last full vacuum, and then it is ``FULL``."""
        self._ensure(table)
        for mode in ("LITE", "FULL"):
            try:
                self.spark.sql(f"VACUUM delta.`{self.uri(table)}` RETAIN {int(retain_hours)} HOURS {mode}").collect()
                return
            except Exception as error:
                if mode == "FULL" or "VACUUM_LITE" not in str(error)[:2000]:
                    raise

    # --- writing ------------------------------------------------------------------------------------

    def _prepared(self, table: Table, rows: DataFrame) -> DataFrame:
        """Rows in the table's column order, a file per physical partition, sorted for file statistics."""
        rows = rows.select(*table.columns)
        if table.partition:
            rows = rows.repartition(
                F.expr(table.partition[1]) if isinstance(table.partition, tuple) else table.partition
            )
        else:
            rows = rows.coalesce(1)
        return rows.sortWithinPartitions(*table.sort_by) if table.sort_by else rows

    def replace_where(self, table: Table, rows: DataFrame, condition: str, commit: Commit = Commit()) -> None:
        """Make the rows matching ``condition`` exactly ``rows``, in one commit."""
        self._ensure(table)
        self._writer(self._prepared(table, rows), commit).option("replaceWhere", condition).save(self.uri(table))

    def overwrite(self, table: Table, rows: DataFrame, commit: Commit = Commit()) -> None:
        """Replace the whole table with ``rows``, in one commit."""
        self._ensure(table)
        self._writer(self._prepared(table, rows), commit).save(self.uri(table))

    def append(self, table: Table, rows: DataFrame, commit: Commit = Commit()) -> None:
        self._ensure(table)
        self._writer(self._prepared(table, rows), commit, mode="append").save(self.uri(table))

    def _writer(self, rows: DataFrame, commit: Commit, mode: str = "overwrite"):
        writer = rows.write.format("delta").mode(mode)
        if commit.note is not None:
            writer = writer.option("userMetadata", json.dumps(commit.note, sort_keys=True))
        if commit.txn is not None:
            writer = writer.option("txnAppId", commit.txn[0]).option("txnVersion", commit.txn[1])
        return writer

    def merge(self, table: Table, source: DataFrame, condition: str, clauses: list[str], commit: Commit = Commit()):
        """One ``MERGE`` of ``source`` (alias ``s``) into the table (alias ``t``) on ``condition``, with ``clauses``
        (``WHEN MATCHED ... THEN ...``; ``assign`` and ``insert`` spell the columns). Delta's SQL, so that it runs
        the same over Spark Connect; the source is a view of this session's, named for this one statement."""
        self._ensure(table)
        view = f"merge_source_{uuid.uuid4().hex}"
        source.createOrReplaceTempView(view)
        try:
            with self._session_commit(commit):
                self.spark.sql(
                    f"MERGE INTO delta.`{self.uri(table)}` AS t USING {view} AS s ON {condition} {' '.join(clauses)}"
                )
        finally:
            self.spark.catalog.dropTempView(view)

    def compiled(self, rows: int) -> AbstractContextManager:
        """From ``COMPILED_FROM_ROWS`` rows, Spark compiles query plans to Java (whole-stage code generation): the
        session runs them interpreted (``graph/resources.py``), cheaper for the small queries of a day's refresh."""
        if rows < COMPILED_FROM_ROWS:
            return nullcontext()
        return self._session_settings(
            {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}
        )

    def broadcasts(self, rows: int) -> AbstractContextManager:
        """Joins built in the block keep their broadcast hints for inputs up to ``BROADCAST_UP_TO_ROWS`` rows; past
        it, the hints are dropped (Spark drops them as the block builds each DataFrame, not when it runs)."""
        if rows <= BROADCAST_UP_TO_ROWS:
            return nullcontext()
        return self._session_settings({"spark.sql.optimizer.disableHints": "true"})

    def _session_commit(self, commit: Commit) -> AbstractContextManager:
        """A ``MERGE`` takes its note and transaction from the session's configuration, for its one commit."""
        settings = {}
        if commit.note is not None:
            settings[USER_METADATA] = json.dumps(commit.note, sort_keys=True)
        if commit.txn is not None:
            settings.update({TXN_APP_ID: commit.txn[0], TXN_VERSION: str(commit.txn[1])})
        return self._session_settings(settings)

    @contextmanager
    def _session_settings(self, settings: dict[str, str]) -> Iterator[None]:
        """The session's configuration with ``settings`` for the block, then as it was."""
        before = {key: self.spark.conf.get(key, None) for key in settings}
        for key, value in settings.items():
            self.spark.conf.set(key, value)
        try:
            yield
        finally:
            for key, value in before.items():
                if value is None:
                    self.spark.conf.unset(key)
                else:
                    self.spark.conf.set(key, value)
