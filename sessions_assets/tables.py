"""The Delta tables under ``$ROOT/warehouse``: their schemas, partition columns and atomic writes.

Each write is one Delta transaction: ``replaceWhere`` replaces exactly a partition window, ``MERGE``
upserts and deletes in one commit. A failed run therefore leaves a table at its last committed version,
and a re-run that would write the same rows writes nothing at all (no new version).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sessions_assets.config import PipelineSettings
from sessions_assets.conflicts import is_write_conflict
from sessions_assets.resources import compiled


@dataclass(frozen=True)
class Table:
    name: str
    partition_column: str | None
    schema: T.StructType
    # Rows are clustered by these inside each partition so that Parquet statistics let readers skip.
    sort_columns: tuple[str, ...] = ()
    # Delta table properties set when the table is created.
    properties: tuple[tuple[str, str], ...] = ()


_TYPES = {
    "string": T.StringType(), "timestamp": T.TimestampType(), "date": T.DateType(),
    "long": T.LongType(), "boolean": T.BooleanType(), "double": T.DoubleType(), "int": T.IntegerType(),
    "binary": T.BinaryType(),
}  # fmt: skip


def _schema(columns: str) -> T.StructType:
    """``"name type, ..."`` -> StructType, without a Spark session (tables are declared at import)."""
    return T.StructType([T.StructField(n, _TYPES[t]) for n, t in (c.split() for c in columns.split(","))])


RAW_EVENTS = Table(
    "raw_events",
    "received_date",
    _schema(
        "message_id string, type string, event string, user_id string, anonymous_id string, user_key string, "
        "timestamp timestamp, received_at timestamp, sent_at_raw string, event_date date, source_file string, "
        "payload string, received_date date"
    ),
    ("event_date", "user_key"),
)
REJECTED_EVENTS = Table(
    "rejected_events", "received_date", _schema("payload string, reason string, source_file string, received_date date")
)
# ``content_hash`` identifies the accepted rows of one (received day, event day): a re-ingest with the same
# rows keeps it, one with other rows changes it (see ``ledger.py``).
PARTITION_MAP = Table(
    "partition_map",
    "received_date",
    _schema("received_date date, event_date date, events long, content_hash string"),
    ("event_date",),
)
EVENTS = Table(
    "events",
    "event_date",
    _schema(
        "message_id string, user_key string, user_id string, anonymous_id string, type string, event string, "
        "timestamp timestamp, received_at timestamp, received_date date, event_date date"
    ),
    ("user_key", "timestamp"),
    # The change feed tells ``sessions`` which rows a load really inserted (``session_extend.py``).
    properties=(("delta.enableChangeDataFeed", "true"),),
)
SESSIONS = Table(
    "sessions",
    "session_date",
    _schema(
        "session_id string, user_key string, session_start timestamp, session_end timestamp, num_events long, "
        "ended_by_cap boolean, session_date date"
    ),
    ("user_key", "session_start"),
    # The change feed tells the snapshot which users' session days changed (``session_feed.py``).
    properties=(("delta.enableChangeDataFeed", "true"),),
)
DAILY_SNAPSHOT = Table(
    "daily_snapshot",
    "snapshot_date",
    _schema(
        "snapshot_date date, state string, users_on_hand long, users_entered long, users_exited long, "
        "avg_days_in_state double, sum_days_in_state long"
    ),
    ("state",),
)
# Each user's lifecycle history, one row per stay in a state (valid_to null = still in it at the horizon):
# the per-user balance the snapshot carries forward. Small: rows grow with state changes, not events.
# A day's corrected users are spread over every file of it, so it is rewritten whole (``Warehouse.rewrite``).
USER_STATES = Table("user_states", None, _schema("user_key string, state string, valid_from date, valid_to date"))


# Per event day, a Bloom filter of the message ids ``events`` holds (``message_filter.py``): ``bitmap`` has
# ``bits`` bits set by ``hashes`` hash functions for every id the day held at ``events`` version ``version``.
# Small (a row per event day): a day built anew is appended beside its older row, and the table is rewritten
# whole, like ``user_states``, once its rows fall ``STORE_BEHIND`` versions behind.
MESSAGE_FILTERS = Table(
    "message_filters", None, _schema("event_date date, version long, hashes int, bits long, bitmap binary")
)


# Which (event day, received day, content) loads each derived table has absorbed (``ledger.py``), and for
# ``events`` the table version of the ``MERGE`` that absorbed it (null when a day was rebuilt whole).
APPLIED_LOADS = Table(
    "applied_loads",
    "consumer",
    _schema("consumer string, event_date date, received_date date, content_hash string, version long"),
)


USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"

# How another process's creation of the same table shows up in ours (besides a commit conflict), and how
# long to wait for its first commit before taking the error as real.
_CREATION_RACE = ("DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", "DELTA_TABLE_NOT_FOUND")
CREATION_WAIT_SECONDS = 30.0


class Warehouse:
    """The pipeline's Delta tables, created on first use so that readers never meet a missing table."""

    def __init__(self, spark: SparkSession, settings: PipelineSettings):
        self.spark = spark
        self.settings = settings
        self._created: set[str] = set()

    def path(self, table: Table) -> str:
        return self.settings.table_path(table.name)

    def delta(self, table: Table) -> DeltaTable:
        """The table at its latest version (created empty on first use)."""
        path = self.path(table)
        if table.name not in self._created:
            if not DeltaTable.isDeltaTable(self.spark, path):
                self._create(table)
            else:
                self._upgrade(table)
            self._created.add(table.name)
        return DeltaTable.forPath(self.spark, path)

    def _create(self, table: Table) -> None:
        """Create the table; if another process creates it at the same moment, wait for its version 0.

        The loser of that race sees a commit conflict, a "non-empty location" (the winner's directory
        exists, its first commit not yet) or "table not found", depending on the moment.
        ``isDeltaTable`` is no judge of the outcome: it answers from this JVM's cached, still-empty log,
        while ``forPath`` reads the log afresh.
        """
        path = self.path(table)
        builder = DeltaTable.createIfNotExists(self.spark).location(path).addColumns(table.schema)
        if table.partition_column:
            builder = builder.partitionedBy(table.partition_column)
        for key, value in table.properties:
            builder = builder.property(key, value)
        try:
            builder.execute()
        except Exception as error:  # noqa: BLE001 - re-raised below unless the table now exists
            racing = is_write_conflict(error) or any(mark in str(error)[:300] for mark in _CREATION_RACE)
            deadline = time.monotonic() + (CREATION_WAIT_SECONDS if racing else 0)
            while True:
                try:
                    DeltaTable.forPath(self.spark, path)
                    return
                except Exception:  # noqa: BLE001 - not (yet) a Delta table
                    if time.monotonic() >= deadline:
                        raise error from None
                    time.sleep(0.2)

    def _upgrade(self, table: Table) -> None:
        """Give a table made by an older version of the project the columns and properties declared now."""
        path = self.path(table)
        delta = DeltaTable.forPath(self.spark, path)
        missing = [f for f in table.schema.fields if f.name not in delta.toDF().columns]
        if missing:
            columns = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in missing)
            self.spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")
        if table.properties:
            current = delta.detail().head().properties
            wanted = {k: v for k, v in table.properties if current.get(k) != v}
            if wanted:
                settings = ", ".join(f"'{k}' = '{v}'" for k, v in wanted.items())
                self.spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({settings})")

    def read(self, table: Table, first: date | None = None, last: date | None = None) -> DataFrame:
        """The table, pruned to partitions ``first..last`` (inclusive) when given."""
        return _days(self.delta(table).toDF(), table, first, last)

    def read_at(self, table: Table, version: int, first: date | None = None, last: date | None = None) -> DataFrame:
        """The table as it was at ``version`` (Delta time travel), pruned like ``read``."""
        df = self.spark.read.format("delta").option("versionAsOf", version).load(self.path(table))
        return _days(df, table, first, last)

    def horizon(self) -> date | None:
        """The data's horizon: the latest received day ingested (from ``partition_map``)."""
        return self.read(PARTITION_MAP).agg(F.max("received_date")).head()[0]

    def version(self, table: Table) -> int:
        return self.delta(table).history(1).select("version").head()[0]

    def changes(self, table: Table, first_version: int, last_version: int) -> DataFrame:
        """The table's change feed for versions ``first_version..last_version`` (``_change_type``, ...)."""
        return (
            self.spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", first_version)
            .option("endingVersion", last_version)
            .load(self.path(table))
        )

    def apply_diff(
        self, table: Table, diff: DataFrame, key: list[str], partitions: list | None = None, note: str | None = None
    ) -> None:
        """One ``MERGE`` applying ``diff_rows`` output: inserts, updates and deletes by ``key``, in one commit.

        ``partitions`` (values of the partition column) are where a stored row can match: those of the rows
        ``diff_rows`` found stored (updates, deletes). Delta reads no other partition's files, and the
        ``insert`` rows elsewhere are appended unmatched, so they must be keys the table does not hold.
        ``note`` is kept as the commit's ``userMetadata``, atomically with the rows.
        """
        condition = " AND ".join(f"t.{k} = s.{k}" for k in key)
        if partitions is not None and table.partition_column:
            values = _sql_list(partitions)
            condition = f"t.{table.partition_column} IN ({values}) AND {condition}" if values else "FALSE"
        assignments = {c: f"s.{c}" for c in table.schema.fieldNames()}
        merge = (
            self.delta(table)
            .alias("t")
            .merge(diff.alias("s"), condition)
            .whenMatchedDelete(condition="s._op = 'delete'")
            .whenMatchedUpdate(condition="s._op != 'delete'", set=assignments)
            .whenNotMatchedInsert(condition="s._op != 'delete'", values=assignments)
        )
        if note is None:
            merge.execute()
            return
        # A MERGE takes its commit's userMetadata only from the session's configuration.
        self.spark.conf.set(USER_METADATA, note)
        try:
            merge.execute()
        finally:
            self.spark.conf.unset(USER_METADATA)

    def rewrite(self, table: Table, diff: DataFrame, key: list[str], based_on: int, note: str | None = None) -> None:
        """The whole table as of version ``based_on`` with ``diff_rows`` output applied, in one overwrite.

        For a small table whose changes reach most of its files (``user_states``, where a day with a late
        tail changes half the users): a ``MERGE`` there reads it three times (match, rewrite, deletion
        vectors) and leaves more files and deletion vectors after every run; this reads it once and leaves it
        compact. Compiled, since it always reads every row (millions at a long history). The write is
        tagged (the table's name, ``based_on``): a second write computed against the same version, a retry
        or a concurrent run, is skipped by Delta rather than applied over the first. ``note`` is kept as the
        commit's ``userMetadata``.
        """
        names = table.schema.fieldNames()
        current = self.read_at(table, based_on)
        kept = current.join(diff.select(*key), key, "left_anti")
        rows = kept.unionByName(diff.where("_op != 'delete'").select(*names))
        writer = (
            rows.write.format("delta").mode("overwrite").option("txnAppId", table.name).option("txnVersion", based_on)
        )
        if note is not None:
            writer = writer.option("userMetadata", note)
        with compiled(self.spark):
            writer.save(self.path(table))

    def replace_partitions(
        self, table: Table, rows: DataFrame, first: date, last: date, txn: tuple[str, int] | None = None,
        note: str | None = None,
    ) -> bool:
        """Atomically make partitions ``first..last`` hold exactly ``rows``; skip the commit if they already do.

        ``txn`` (application id, version) makes the write idempotent: Delta ignores it if that application
        already committed that version or a later one. ``note`` is kept as the commit's ``userMetadata``.
        Returns whether a new table version was written.
        """
        column = table.partition_column
        # One task per partition value, so each day is written as one file (not one per task holding it).
        rows = rows.select(*table.schema.fieldNames()).repartition(column)
        if table.sort_columns:
            rows = rows.sortWithinPartitions(column, *table.sort_columns)
        # Computed once for both the fingerprint and the write (a parse or a walk is not cheap to repeat).
        rows = rows.persist()
        try:
            if _same_rows(self.read(table, first, last), rows):
                return False
            writer = rows.write
            if txn is not None:
                writer = writer.option("txnAppId", txn[0]).option("txnVersion", txn[1])
            if note is not None:
                writer = writer.option("userMetadata", note)
            (
                writer.format("delta")
                .mode("overwrite")
                .option("replaceWhere", f"{column} >= '{first.isoformat()}' AND {column} <= '{last.isoformat()}'")
                .save(self.path(table))
            )
            return True
        finally:
            rows.unpersist()

    def files_per_day(self, table: Table, days: Iterable[date] | None = None) -> Counter[date]:
        """How many data files each partition day holds (of ``days``, if given), from the table's log: the
        paths a scan would open, not the data."""
        column = table.partition_column
        df = self.read(table)
        if days is not None:
            df = df.where(F.col(column).isin(sorted(set(days))))
        found = (re.search(rf"{column}=(\d{{4}}-\d{{2}}-\d{{2}})", path) for path in df.inputFiles())
        return Counter(date.fromisoformat(m.group(1)) for m in found if m)

    def compact(self, table: Table, days: Iterable[date], min_files: int, most: int) -> list[date]:
        """Compact (``OPTIMIZE``) the ``days`` partitions holding ``min_files`` files or more, the ``most``
        fullest; returns them.

        Every run adds a small file to each day it touches, and a late tail touches most days, while a
        ``MERGE`` or a read opens every file of its days: left alone, a day's file count, and the cost of
        reading it, grows with the number of runs that touched it. Delta's auto compaction does not fit:
        it rewrites every touched partition holding more than one file, on every write. This rewrites a
        day once per ``min_files`` runs, and ``most`` spreads the rewrites of days that fill up together.
        """
        days = set(days)
        if not days or min_files < 2 or most < 1:
            return []
        files = self.files_per_day(table, days)
        due = sorted(sorted((d for d, n in files.items() if n >= min_files), key=files.get, reverse=True)[:most])
        if due:
            where = f"{table.partition_column} IN ({_sql_list(due)})"
            self.delta(table).optimize().where(where).executeCompaction()
        return due


def _days(df: DataFrame, table: Table, first: date | None, last: date | None) -> DataFrame:
    """``df`` limited to partitions ``first..last`` (inclusive; either may be open)."""
    if first is not None:
        df = df.where(F.col(table.partition_column) >= F.lit(first))
    if last is not None:
        df = df.where(F.col(table.partition_column) <= F.lit(last))
    return df


def _sql_list(values: Iterable) -> str:
    """``'a', 'b'`` for a SQL ``IN`` list; dates as ISO days."""
    return ", ".join(f"'{v.isoformat() if hasattr(v, 'isoformat') else v}'" for v in values)


def diff_rows(new: DataFrame, old: DataFrame, key: list[str]) -> DataFrame:
    """Rows to insert (keys ``old`` lacks), update (changed) and delete (gone), tagged ``_op``; unchanged
    rows drop out.

    ``new`` is the truth for the scope that ``old`` covers; both have the same columns.
    """
    columns = [c for c in new.columns if c not in key]
    joined = new.withColumn("_new", F.lit(True)).alias("n").join(
        old.withColumn("_old", F.lit(True)).alias("o"), key, "full_outer"
    )
    same = F.lit(True)
    for column in columns:
        same = same & F.col(f"n.{column}").eqNullSafe(F.col(f"o.{column}"))
    gone = F.col("n._new").isNull()
    op = F.when(gone, "delete").when(F.col("o._old").isNull(), "insert").when(~same, "update")
    pick = [F.when(gone, F.col(f"o.{c}")).otherwise(F.col(f"n.{c}")).alias(c) for c in columns]
    return joined.select(*key, *pick, op.alias("_op")).where(F.col("_op").isNotNull())


def _same_rows(stored: DataFrame, rows: DataFrame) -> bool:
    """Whether both hold the same multiset of rows (barring hash collisions), compared in one query.

    Each side is reduced to (rows, order-independent sum of row hashes).
    """

    def side(df: DataFrame, name: str) -> DataFrame:
        row_hash = F.xxhash64(*[F.col(c) for c in df.columns]).cast("decimal(38,0)")
        return df.select(F.lit(name).alias("side"), row_hash.alias("row_hash"))

    sums = side(stored, "stored").unionByName(side(rows, "new")).groupBy("side").agg(
        F.count(F.lit(1)).alias("rows"), F.sum("row_hash").alias("total")
    )
    found = {r.side: (r.rows, r.total) for r in sums.collect()}
    return found.get("stored") == found.get("new")
