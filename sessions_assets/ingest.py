"""Landing-zone lines -> parsed events with an acceptance verdict (the contract's "Accepting events").

Spark does the parsing (``from_json`` in ``PERMISSIVE`` mode with a corrupt-record column); fields are read
as ``VARIANT`` so that a wrong JSON type (``"userId": {}``, ``"timestamp": 12``) is seen as what it is
instead of being coerced to a string. Every line gets exactly one verdict: accepted, or one ``reason``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sessions_assets.config import PipelineSettings
from sessions_assets.tables import PARTITION_MAP, RAW_EVENTS, REJECTED_EVENTS, Warehouse

LANDING_GLOBS = ("*.jsonl", "*.json", "*.jsonl.gz")

# Top-level Segment fields the pipeline reads; everything else stays in ``payload``.
STRING_FIELDS = {
    "messageId": "message_id",
    "type": "type",
    "event": "event",
    "userId": "user_id",
    "anonymousId": "anonymous_id",
    "timestamp": "timestamp_raw",
    "receivedAt": "received_at_raw",
    "sentAt": "sent_at_raw",
}
CORRUPT = "_corrupt_record"
LINE_SCHEMA = T.StructType(
    [T.StructField(name, T.VariantType()) for name in STRING_FIELDS] + [T.StructField(CORRUPT, T.StringType())]
)

# ISO-8601 date-time: date, 'T', hh:mm[:ss[.fraction]], optional Z or +hh[:]mm (none means UTC).
ISO_8601 = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$"



def landing_files(settings: PipelineSettings, received_day: date) -> list[str]:
    folder = settings.landing / f"received_date={received_day.isoformat()}"
    return sorted(str(p.absolute()) for pattern in LANDING_GLOBS for p in folder.glob(pattern))


def landing_days(settings: PipelineSettings) -> list[date]:
    """Received days present in the landing zone, oldest first."""
    prefix = "received_date="
    return sorted(
        date.fromisoformat(p.name[len(prefix) :])
        for p in settings.landing.glob(f"{prefix}*")
        if p.is_dir()
    )



LANDING_FINGERPRINT = "landing_fingerprint"


def landing_fingerprint(settings: PipelineSettings, received_day: date) -> str:
    """Changes when a received day's folder gains, loses or rewrites a file."""
    digest = hashlib.sha256()
    for name in landing_files(settings, received_day):
        stat = Path(name).stat()
        digest.update(f"{Path(name).name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def read_lines(spark: SparkSession, files: list[str]) -> DataFrame:
    """One row per line: ``payload`` (the line) and ``source_file``; ``.gz`` is decompressed by Spark."""
    if not files:
        return spark.createDataFrame([], "payload string, source_file string")
    return spark.read.text(files).select(
        F.col("value").alias("payload"), F.col("_metadata.file_path").alias("source_file")
    )


def _json_string(field: Column) -> Column:
    """The field's value if it is a JSON string, else null (numbers, objects, arrays count as missing)."""
    return F.when(F.schema_of_variant(field) == "STRING", F.variant_get(field, "$", "string"))


def _iso_timestamp(raw: Column) -> Column:
    """Parse an ISO-8601 string as a UTC timestamp; null when it is not one."""
    iso = F.trim(raw)
    # Spark keeps microseconds: cut longer fractions instead of rejecting them.
    iso = F.regexp_replace(iso, r"(\.\d{6})\d+", "$1")
    return F.when(iso.rlike(ISO_8601), iso.try_cast("timestamp"))


def parse(lines: DataFrame) -> DataFrame:
    """Parse lines into typed columns (nulls where absent or of the wrong type), keeping the payload."""
    parsed = lines.withColumn(
        "j", F.from_json("payload", LINE_SCHEMA, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    )
    fields = [_json_string(F.col(f"j.{src}")).alias(dst) for src, dst in STRING_FIELDS.items()]
    malformed = F.col(f"j.{CORRUPT}").isNotNull() | ~F.ltrim("payload").startswith("{")
    return parsed.select("payload", "source_file", malformed.alias("malformed"), *fields)


def classify(parsed: DataFrame, settings: PipelineSettings) -> DataFrame:
    """Add ``timestamp``, ``received_at``, ``user_key``, ``event_date`` and the reject ``reason`` (null = accepted)."""
    nonempty = lambda c: F.when(c.rlike(r"\S"), c)  # noqa: E731 - blank counts as missing
    df = (
        parsed.withColumn("message_id", nonempty(F.col("message_id")))
        .withColumn("user_id", nonempty(F.col("user_id")))
        .withColumn("anonymous_id", nonempty(F.col("anonymous_id")))
        .withColumn("user_key", F.coalesce("user_id", "anonymous_id"))
        .withColumn("timestamp", _iso_timestamp(F.col("timestamp_raw")))
        .withColumn("received_at", _iso_timestamp(F.col("received_at_raw")))
    )
    skew = F.make_dt_interval(F.lit(0), F.lit(0), F.lit(settings.max_future_skew_minutes))
    lateness = F.make_dt_interval(F.lit(settings.max_lateness_days))
    # The contract's reasons in its order: a line gets the first one that applies.
    reason = (
        F.when(F.col("malformed"), "malformed_json")
        .when(F.col("message_id").isNull(), "missing_message_id")
        .when(F.col("user_key").isNull(), "missing_user")
        .when(F.col("timestamp").isNull() | F.col("received_at").isNull(), "bad_timestamp")
        .when(F.col("timestamp") > F.col("received_at") + skew, "future_timestamp")
        .when(
            (F.col("timestamp") < F.col("received_at") - lateness)
            | (F.to_date("timestamp") < F.lit(settings.first_day)),
            "too_late",
        )
    )
    return df.withColumn("reason", reason).withColumn("event_date", F.to_date("timestamp"))


RAW_COLUMNS = [
    "message_id", "type", "event", "user_id", "anonymous_id", "user_key", "timestamp", "received_at",
    "sent_at_raw", "event_date", "source_file", "payload", "received_date",
]  # fmt: skip
REJECT_COLUMNS = ["payload", "reason", "source_file", "received_date"]


def split(classified: DataFrame, received_day: date) -> tuple[DataFrame, DataFrame]:
    """Accepted rows for ``raw_events`` and rejected rows for ``rejected_events`` of one received day."""
    df = classified.withColumn("received_date", F.lit(received_day))
    accepted = df.where(F.col("reason").isNull()).select(*RAW_COLUMNS)
    rejected = df.where(F.col("reason").isNotNull()).select(*REJECT_COLUMNS)
    return accepted, rejected


def partition_map_rows(accepted: DataFrame) -> DataFrame:
    """Which event days one received day's accepted rows touch, with counts (the recorded mapping).

    ``content_hash`` is an order-independent hash of those rows, so consumers can tell a re-ingest that
    changed nothing from one that changed the rows of an event day.
    """
    row_hash = F.xxhash64(*[F.col(c) for c in accepted.columns if c != "source_file"]).cast("decimal(38,0)")
    return accepted.groupBy("received_date", "event_date").agg(
        F.count(F.lit(1)).alias("events"),
        F.concat_ws(":", F.count(F.lit(1)), F.sum(row_hash)).alias("content_hash"),
    )


@dataclass
class IngestedDay:
    """What loading one received day did, for materialization metadata."""

    lines: int = 0
    accepted: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    events_per_day: dict[date, int] = field(default_factory=dict)  # the recorded partition map
    # Event days this ingest may have changed: those it maps now and those a previous ingest of the same
    # received day mapped (a re-ingest without an event day must still correct that day).
    affected_event_days: list[date] = field(default_factory=list)
    written: dict[str, bool] = field(default_factory=dict)  # table -> whether a new version was committed


def load_received_day(wh: Warehouse, settings: PipelineSettings, received_day: date, files: list[str]) -> IngestedDay:
    """Parse ``files`` of one received day into ``raw_events``, ``rejected_events`` and ``partition_map``.

    Each table's partition is replaced in one commit, the map last: it is what the late-data sensor acts on.
    """
    classified = classify(parse(read_lines(wh.spark, files)), settings).persist()
    try:
        accepted, rejected = split(classified, received_day)
        mapping = partition_map_rows(accepted).persist()
        result = IngestedDay()
        before = {r.event_date for r in wh.read(PARTITION_MAP, received_day, received_day).select("event_date").collect()}
        for table, rows in ((RAW_EVENTS, accepted), (REJECTED_EVENTS, rejected), (PARTITION_MAP, mapping)):
            result.written[table.name] = wh.replace_partitions(table, rows, received_day, received_day)
        result.events_per_day = {r.event_date: r.events for r in sorted(mapping.collect())}
        result.affected_event_days = sorted(before | set(result.events_per_day))
        result.reasons = {r.reason: r["count"] for r in rejected.groupBy("reason").count().collect()}
        result.accepted = sum(result.events_per_day.values())
        result.lines = classified.count()
        mapping.unpersist()
        return result
    finally:
        classified.unpersist()
