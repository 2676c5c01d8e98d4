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
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import Table

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
# Delta refuses a VACUUM that keeps less than a week unless told to: an erasure purges with no retention.
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
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
# ProtocolChanged): the error conditions PySpark's exceptions carry (``getCondition``) in a driver of the run's own
# and over Spark Connect alike. An error without one (raised outside Spark's error framework, or wrapped by another
# library) is recognised by its text: the same conditions, or Delta's exception class.
_CONFLICTS = ("DELTA_CONCURRENT_", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED")
_CONFLICT_CLASS = "io.delta.exceptions.Concurrent"


def is_write_conflict(error: BaseException | None) -> bool:
    """Whether ``error`` (or what caused it) is Delta refusing a commit because another one won."""
    while error is not None:
        condition = error.getCondition() if isinstance(error, PySparkException) else None
        if condition:
            if condition.startswith(_CONFLICTS):
                return True
        elif any(mark in str(error)[:1000] for mark in (*_CONFLICTS, _CONFLICT_CLASS)):
            return True
        error = error.__cause__ or error.__context__
    return False


def _assign(columns) -> str:
    return ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)


def _when(matched: str, condition: str | None, action: str) -> str:
    return f"WHEN {matched}{f' AND {condition}' if condition else ''} THEN {action}"


def op(*kinds: str) -> str:
    """A clause's condition on the source's ``_op`` column (the engine's write plans: what each row does)."""
    listed = ", ".join(f"'{k}'" for k in kinds)
    return f"s._op = {listed}" if len(kinds) == 1 else f"s._op IN ({listed})"


@dataclass(frozen=True)
class Merge:
    """A ``MERGE`` of a source (``s``) into a table (``t``) on ``on``, described by its actions in the shape of
    Delta's own builder (``DeltaTable.merge(...).whenMatchedUpdate(...)``, which a Spark Connect client cannot use
    without Delta's Connect plugins on the server). Each action adds one clause; the first whose condition holds
    acts on a row."""

    on: str
    clauses: tuple[str, ...] = ()

    def _and(self, clause: str) -> Merge:
        return Merge(self.on, (*self.clauses, clause))

    def when_matched_delete(self, condition: str | None = None) -> Merge:
        return self._and(_when("MATCHED", condition, "DELETE"))

    def when_matched_update(self, columns=(), condition: str | None = None, **expressions: str) -> Merge:
        """Set ``columns`` from the source row, and each keyword's column to its SQL expression."""
        sets = [_assign(columns)] if columns else []
        sets += [f"t.`{c}` = {e}" for c, e in expressions.items()]
        return self._and(_when("MATCHED", condition, f"UPDATE SET {', '.join(sets)}"))

    def when_not_matched_insert(self, columns, condition: str | None = None) -> Merge:
        """Insert the source row's ``columns``."""
        names, values = ", ".join(f"`{c}`" for c in columns), ", ".join(f"s.`{c}`" for c in columns)
        return self._and(_when("NOT MATCHED", condition, f"INSERT ({names}) VALUES ({values})"))

    def sql(self, target: str, source: str) -> str:
        return f"MERGE INTO {target} AS t USING {source} AS s ON {self.on} {' '.join(self.clauses)}"


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

    def lost_files(self, version: int) -> list[str]:
        """The files that version's commit added and that are not on disk (a purge with no retention removed them
        while they were written, before their commit named them)."""
        text = self.storage.fs.cat_file(f"{self.path}/{version:020d}.json").decode()
        table = self.path.rsplit("/", 1)[0]
        added = [json.loads(line)["add"]["path"] for line in text.splitlines() if line.startswith('{"add"')]
        return [p for p in added if not self.storage.fs.exists(f"{table}/{urllib.parse.unquote(p)}")]

    def last_checkpoint(self) -> int | None:
        """The version of the latest checkpoint (``_last_checkpoint``), or None."""
        try:
            return int(json.loads(self.storage.fs.cat_file(f"{self.path}/_last_checkpoint"))["version"])
        except (FileNotFoundError, KeyError, ValueError):
            return None

    def checkpoint_files(self, version: int) -> list[str]:
        """The files of the checkpoint at ``version`` (one, or its parts)."""
        return sorted(self.storage.fs.glob(f"{self.path}/{version:020d}.checkpoint*.parquet"))

    def files(self) -> list[str]:
        """The paths of every file of the log: commits, checksums, checkpoints and their hidden checksum files."""
        return self.storage.fs.ls(self.path, detail=False)

    def remove_before(self, version: int) -> None:
        """Remove the log's files of every version before ``version``, which holds a checkpoint: the log starts
        there (Delta reads a table from its latest checkpoint on)."""
        for path in self.files():
            name = path.rsplit("/", 1)[-1].lstrip(".")
            if name[:20].isdigit() and int(name[:20]) < version:
                self.storage.fs.rm(path)

    def metadata(self) -> dict:
        """The table's latest ``metaData`` action (its schema, partitioning and ``configuration``): from the commits
        after the latest checkpoint, newest first, else from the checkpoint."""
        checkpoint = self.last_checkpoint()
        for version in reversed(self.versions()):
            if checkpoint is not None and version <= checkpoint:
                break
            for line in self.storage.fs.cat_file(f"{self.path}/{version:020d}.json").decode().splitlines():
                if '"metaData"' in line:
                    return json.loads(line)["metaData"]
        if checkpoint is None:
            return {}
        import pyarrow.parquet as pq

        for file in self.checkpoint_files(checkpoint):
            with self.storage.fs.open(file, "rb") as f:
                found = [m for m in pq.ParquetFile(f).read(["metaData"], use_threads=False)[0].to_pylist() if m]
            if found:
                meta = found[0]
                configuration = meta.get("configuration") or {}
                return {**meta, "configuration": dict(configuration)}
        return {}

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
                self._set_properties(table)
            self._ready.add(table.name)

    def _set_properties(self, table: Table) -> None:
        """A table stored before its spec gained a property (the statistics it keeps) is given it: a commit that
        changes no row (``SET TBLPROPERTIES``). Files written before keep the statistics they were written with
        until rewritten; an erasure deals with them (``forget.py``)."""

        def missing() -> dict[str, str]:
            stored = DeltaLog(self.storage, table).metadata().get("configuration", {})
            return {k: v for k, v in table.table_properties.items() if stored.get(k) != v}

        wanted = missing()
        if wanted:
            try:
                self.alter_properties(table, wanted)
            except Exception:  # another run may have set them first
                if missing():
                    raise

    def alter_properties(self, table: Table, properties: dict[str, str], note: dict | None = None) -> None:
        """``ALTER TABLE ... SET TBLPROPERTIES``: one commit, with ``note`` as its ``userMetadata`` if given."""
        listed = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
        with self._session_commit(Commit(note)):
            self.spark.sql(f"ALTER TABLE delta.`{self.uri(table)}` SET TBLPROPERTIES ({listed})")

    def _add_columns(self, table: Table) -> None:
        """Schema evolution: a column of the spec that the stored table lacks is added (null in the rows
        already stored, until a repair recomputes them; docs/operations.md says how)."""

        def missing() -> list:  # the stored schema, from the log: no Spark query
            schema = json.loads(DeltaLog(self.storage, table).metadata().get("schemaString") or '{"fields": []}')
            stored = {f["name"] for f in schema["fields"]}
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
        if table.table_properties:
            properties = ", ".join(f"'{k}' = '{v}'" for k, v in table.table_properties.items())
            ddl += f" TBLPROPERTIES ({properties})"
        self._clear_unfinished(table)
        try:
            self.spark.sql(ddl)
        except Exception as error:  # re-raised below unless the table now exists
            racing = is_write_conflict(error) or any(mark in str(error)[:500] for mark in _CREATION_RACE)
            deadline = time.monotonic() + (CREATION_WAIT_SECONDS if racing else 0)
            while not DeltaLog(self.storage, table).versions():
                if time.monotonic() >= deadline:
                    raise error from None
                time.sleep(0.2)

    def _clear_unfinished(self, table: Table) -> None:
        """A create killed before its first commit leaves a ``_delta_log`` folder without one, which Delta takes
        for a table (``CREATE TABLE IF NOT EXISTS`` passes, every read fails): unless another process's create
        commits in the meantime, the folder goes."""
        log = DeltaLog(self.storage, table)
        deadline = time.monotonic() + CREATION_WAIT_SECONDS
        while self.storage.fs.isdir(log.path) and not log.versions():
            if time.monotonic() >= deadline:
                self.storage.fs.rm(log.path, recursive=True)
                return
            time.sleep(0.5)

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

    def unset_properties(self, table: Table, names: list[str], note: dict | None = None) -> None:
        """``ALTER TABLE ... UNSET TBLPROPERTIES``: one commit, with ``note`` as its ``userMetadata`` if given."""
        listed = ", ".join(f"'{n}'" for n in names)
        with self._session_commit(Commit(note)):
            self.spark.sql(f"ALTER TABLE delta.`{self.uri(table)}` UNSET TBLPROPERTIES IF EXISTS ({listed})")

    def vacuum(self, table: Table, retain_hours: int, full: bool = False) -> None:
        """Delete the files no version younger than ``retain_hours`` reads (change-feed files included).

        ``LITE`` finds them in the log instead of listing every file (seconds instead of ~20 s a table here);
        Delta refuses it when the log no longer reaches back to the last full vacuum, and then it is ``FULL``.
        ``full``: list every file (also those no commit ever named, a killed write's). Under Delta's week, for
        this statement only, Delta is told that keeping less is meant (an erasure's purge)."""
        self._ensure(table)
        # Its listing runs as many tasks as this says (Spark's default: 10,000): as many as the session's shuffles
        # here, where it took 40 s a small table with the default and 3 s so.
        settings = {LISTING_PARALLELISM: self.spark.conf.get("spark.sql.shuffle.partitions", "200")}
        if retain_hours < 168:
            settings[RETENTION_CHECK] = "false"
        with self._session_settings(settings):
            for mode in ("FULL",) if full else ("LITE", "FULL"):
                try:
                    self.spark.sql(
                        f"VACUUM delta.`{self.uri(table)}` RETAIN {int(retain_hours)} HOURS {mode}"
                    ).collect()
                    return
                except Exception as error:
                    if mode == "FULL" or "VACUUM_LITE" not in str(error)[:2000]:
                        raise

    def purge_deleted_rows(self, table: Table) -> None:
        """Rewrite the files whose deletion vectors mark deleted rows without them (``REORG ... APPLY (PURGE)``): a
        commit that changes no row, after which the rows are only in files no version reads."""
        self._ensure(table)
        self.spark.sql(f"REORG TABLE delta.`{self.uri(table)}` APPLY (PURGE)")

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

    def merge(self, table: Table, source: DataFrame, merge: Merge, commit: Commit = Commit()):
        """One ``MERGE`` of ``source`` into the table, as ``merge`` describes it. Delta's SQL, so that it runs the
        same over Spark Connect; the source is a view of this session's, named for this one statement."""
        self._ensure(table)
        view = f"merge_source_{uuid.uuid4().hex}"
        source.createOrReplaceTempView(view)
        try:
            with self._session_commit(commit):
                self.spark.sql(merge.sql(f"delta.`{self.uri(table)}`", view))
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
