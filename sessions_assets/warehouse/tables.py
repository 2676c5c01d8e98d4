"""The Delta tables under ``$ROOT/warehouse``: their columns and how each is laid out on disk.

The Dagster partitions are days; the files are not. A received day is written once as a whole, so the
landing tables keep a partition per received day. ``events`` and ``sessions`` are partitioned by month,
through a column Delta generates from the date, so a reader's filter on ``event_date`` or
``session_date`` prunes months by itself and file statistics skip the rest; a run that touches a hundred
days of a late tail writes a file per month, not per day. ``events`` and ``sessions`` have deletion vectors:
a late link moving a device's events to a person, or renumbering a late user's sessions, marks a few rows
instead of rewriting every file that holds one. The small tables
are one file each, rewritten whole.

File statistics (the smallest and largest value of each column in each file, kept in the Delta log) are collected
for dates, times and numbers only (``delta.dataSkippingStatsColumns``): what the readers' filters and the steps'
day conditions skip by. A string column is an id, a payload or what a line said: the log would quote the values
of a person after the person's rows are gone (``warehouse/forget.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import types as T

from sessions_assets.engine.identity import TALLY_SCHEMA
from sessions_assets.engine.schema import schema
from sessions_assets.engine.sessionize import SESSION_SCHEMA
from sessions_assets.engine.users import USER_SCHEMA

CHANGE_FEED = ("delta.enableChangeDataFeed", "true")
DELETION_VECTORS = ("delta.enableDeletionVectors", "true")
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
# Delta keeps statistics of these types (not of booleans, which it refuses, nor of arrays and maps).
_WITH_STATS = (T.DateType, T.TimestampType, T.LongType, T.IntegerType, T.DoubleType, T.DecimalType)


@dataclass(frozen=True)
class Table:
    name: str
    schema: T.StructType
    # The physical partition column: a column of the schema, or (name, SQL expression) that Delta generates.
    partition: str | tuple[str, str] | None = None
    # Rows are sorted by these inside each written file, so file statistics skip what a filter excludes.
    sort_by: tuple[str, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def columns(self) -> list[str]:
        return self.schema.fieldNames()

    @property
    def partition_column(self) -> str | None:
        return self.partition[0] if isinstance(self.partition, tuple) else self.partition

    @property
    def stats_columns(self) -> tuple[str, ...]:
        """The columns whose smallest and largest values each file's entry in the log records: dates, times and
        numbers, never a string (partition columns have values of their own)."""
        return tuple(
            f.name for f in self.schema if isinstance(f.dataType, _WITH_STATS) and f.name != self.partition_column
        )

    @property
    def table_properties(self) -> dict[str, str]:
        """The properties the table is created with, and that an existing one is given when opened."""
        return {**dict(self.properties), STATS_COLUMNS: ",".join(self.stats_columns)}

    @property
    def personal(self) -> bool:
        """Whether the table holds a person's ids or lines (the tables an erasure purges)."""
        return bool({"user_id", "anonymous_id", "user_key", "payload"} & set(self.columns))


def _monthly(column: str) -> tuple[str, str]:
    return f"{column[: -len('_date')]}_month", f"date_format({column}, 'yyyy-MM')"


# What a session is drawn from, as parsed from each line.
_ATTRIBUTES = (
    "page_path string, referrer string, utm_source string, utm_medium string, utm_campaign string, "
    "user_agent string, device_class string, device_type string, is_bot boolean, revenue decimal(38,6)"
)

RAW_EVENTS = Table(
    "raw_events",
    schema(
        "message_id string, message_hash long, type string, event string, user_id string, anonymous_id string, "
        "user_key string, "
        f"timestamp timestamp, received_at timestamp, event_date date, {_ATTRIBUTES}, source_id string, "
        "source_file string, payload string, received_date date"
    ),
    partition="received_date",
    properties=(CHANGE_FEED,),
)
REJECTED_EVENTS = Table(
    "rejected_events",
    schema("payload string, reason string, detail string, source_id string, source_file string, received_date date"),
    partition="received_date",
)
PARTITION_MAP = Table(
    "partition_map",
    schema("received_date date, event_date date, events long"),
    sort_by=("received_date", "event_date"),
)
# What each received day's latest ingest read and wrote, written after its rows: the landing folder's
# fingerprint (so a new Dagster instance over this warehouse re-ingests nothing unchanged), its counts, the
# event days it touched (with those an earlier ingest of the day mapped), the ``raw_events`` version its commit
# made (the received days a refresh has not absorbed are those past ``events``' note), and the time zone its event
# days are local days of (null: UTC, a day ingested before days were local).
# What an ingest recorded of one landing file of a received day: the file is the unit of delivery, so the next
# ingest of the day reads only the files whose fingerprint differs (``warehouse/ingest.py``).
FILE_RECORD = T.StructType(
    [
        T.StructField("source_file", T.StringType()),
        T.StructField("fingerprint", T.StringType()),
        T.StructField("lines", T.LongType()),
        T.StructField("accepted", T.LongType()),
        T.StructField("rejected", T.LongType()),
        T.StructField("events_per_day", T.MapType(T.DateType(), T.LongType())),
    ]
)
RECEIVED_DAYS = Table(
    "received_days",
    T.StructType(
        [
            *schema(
                "received_date date, fingerprint string, lines long, accepted long, rejected long, "
                "event_days array<date>, raw_version long, ingested_at timestamp, time_zone string"
            ).fields,
            T.StructField("files", T.ArrayType(FILE_RECORD)),
        ]
    ),
    sort_by=("received_date",),
)
EVENTS = Table(
    "events",
    schema(
        "message_id string, message_hash long, user_key string, user_id string, anonymous_id string, type string, "
        f"event string, timestamp timestamp, received_at timestamp, received_date date, source_id string, "
        f"{_ATTRIBUTES}, event_date date"
    ),
    partition=_monthly("event_date"),
    sort_by=("event_date", "user_key", "timestamp"),
    properties=(CHANGE_FEED, DELETION_VECTORS),
)
SESSIONS = Table(
    "sessions",
    SESSION_SCHEMA,
    partition=_monthly("session_date"),
    sort_by=("session_date", "user_key", "session_start"),
    properties=(CHANGE_FEED, DELETION_VECTORS),
)
# Internal: the ids each person's events carry (``engine/identity.py`` ``tallies``), kept by the events step, so
# that finding a day's persons, a device's events and a person's ids reads this, not every event. Sorted by
# anonymous id, the key most lookups name.
IDENTITIES = Table("identities", TALLY_SCHEMA, sort_by=("anonymous_id", "user_key"), properties=(DELETION_VECTORS,))
# One row per person, rewritten in place where persons change (deletion vectors mark the old rows).
USERS = Table("users", USER_SCHEMA, sort_by=("user_key",), properties=(DELETION_VECTORS,))
# Transition totals per (day, state), future days included: what the snapshot is summed from.
LIFECYCLE = Table(
    "lifecycle",
    schema("day date, state string, entered long, exited long, began_exited long"),
    sort_by=("day", "state"),
)
DAILY_SNAPSHOT = Table(
    "daily_snapshot",
    schema(
        "snapshot_date date, state string, users_on_hand long, users_entered long, users_exited long, "
        "avg_days_in_state double, sum_days_in_state long"
    ),
    sort_by=("snapshot_date", "state"),
)
# Each user agent seen, classified once (``engine/devices.py`` is slow per agent).
USER_AGENTS = Table(
    "user_agents", schema("user_agent string, device_class string, is_bot boolean"), sort_by=("user_agent",)
)

# Internal: every request to forget a person, with the keyed hashes of its ids (``warehouse/journal.py``).
FORGET_REQUESTS = Table(
    "forget_requests",
    schema(
        "request_id string, reason string, user_hashes array<string>, anonymous_hashes array<string>, "
        "key_id string, requested_at timestamp, state string, updated_at timestamp, removed map<string,long>, "
        "purged_at timestamp"
    ),
    sort_by=("requested_at", "request_id"),
)

ALL = (
    RAW_EVENTS,
    REJECTED_EVENTS,
    PARTITION_MAP,
    RECEIVED_DAYS,
    EVENTS,
    IDENTITIES,
    SESSIONS,
    USERS,
    LIFECYCLE,
    DAILY_SNAPSHOT,
    USER_AGENTS,
    FORGET_REQUESTS,
)
PERSONAL = tuple(t for t in ALL if t.personal)
