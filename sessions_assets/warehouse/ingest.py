"""A received day's landing files -> ``raw_events``, ``rejected_events`` and ``partition_map``.

Every line of every file is accounted for: accepted, rejected with its reason, or, when its file cannot
be read, counted in a rejects row that names the file and the error (a truncated gzip keeps the lines
read before the break). Files with names Spark will not read (hidden, or another suffix) get a rejects
row too, so nothing in the landing zone disappears silently, and one bad file never stops the others.
"""

from __future__ import annotations

import re
import urllib.parse
import uuid
from dataclasses import dataclass, field
from datetime import date

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.engine import accept, devices
from sessions_assets.engine.dedup import message_hash
from sessions_assets.settings import Settings
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import LandingFile
from sessions_assets.warehouse.tables import PARTITION_MAP, RAW_EVENTS, REJECTED_EVENTS, USER_AGENTS

_GLOB = re.compile(r"([\[\]{}*?\\])")
# Hadoop cannot address a file whose name holds ':'; such files are read from a copy with a plain name.
_UNADDRESSABLE = ":"
STAGING = "_staging"


@dataclass
class IngestedDay:
    """What loading one received day did (materialization metadata and the CLI's summary)."""

    lines: int = 0
    accepted: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    events_per_day: dict[date, int] = field(default_factory=dict)
    # Event days this ingest may have changed: those it maps now and those an earlier ingest of the same
    # received day mapped (a re-ingest without an event day must still correct that day).
    event_days: list[date] = field(default_factory=list)
    files: dict[str, dict] = field(default_factory=dict)  # file name -> lines, accepted, rejected or why skipped


def ingest_day(wh: Warehouse, settings: Settings, day: date) -> IngestedDay:
    """Parse one received day's files and replace that day in the three landing tables, the map last."""
    files = wh.storage.landing_files(day)
    lines, broken, staged = _read_lines(wh, [f for f in files if f.skip_reason is None])
    try:
        classified = accept.classify(accept.parse(lines), settings)
        classified = (
            _with_device_classes(wh, classified)
            .withColumns(
                {"received_date": F.lit(day), "message_hash": message_hash(F.col("message_id")), "detail": F.lit(None)}
            )
            .localCheckpoint()
        )
        done = IngestedDay(
            files={f.uri: {"lines": 0, "accepted": 0, "rejected": 0} for f in files if not f.skip_reason}
        )
        # Every count the run reports, in one query: per file, reason and event day.
        for row in classified.groupBy("source_file", "reason", "event_date").count().collect():
            counts = done.files[row.source_file]
            counts["lines"] += row["count"]
            counts["accepted" if row.reason is None else "rejected"] += row["count"]
            if row.reason is None:
                done.events_per_day[row.event_date] = done.events_per_day.get(row.event_date, 0) + row["count"]
            else:
                done.reasons[row.reason] = done.reasons.get(row.reason, 0) + row["count"]
        skipped = [(f, f.skip_reason, f.detail) for f in files if f.skip_reason] + broken
        for f, reason, detail in skipped:
            done.files[f.uri] = {**done.files.get(f.uri, {}), "skipped": reason, "detail": detail}
            done.reasons[reason] = done.reasons.get(reason, 0) + 1
        file_rows = wh.spark.createDataFrame(
            [(None, reason, detail, f.uri, day) for f, reason, detail in skipped], REJECTED_EVENTS.schema
        )
        rejected = classified.where(F.col("reason").isNotNull()).select(*REJECTED_EVENTS.columns).unionByName(file_rows)
        mapping = wh.spark.createDataFrame([(day, d, n) for d, n in done.events_per_day.items()], PARTITION_MAP.schema)
        before = wh.read(PARTITION_MAP).where(F.col("received_date") == F.lit(day)).select("event_date").collect()
        where = f"received_date = DATE'{day.isoformat()}'"
        for table, rows in ((RAW_EVENTS, classified.where(F.col("reason").isNull())), (REJECTED_EVENTS, rejected),
                            (PARTITION_MAP, mapping)):  # fmt: skip
            wh.replace_where(table, rows, where)
        done.event_days = sorted({r.event_date for r in before} | set(done.events_per_day))
        done.accepted = sum(done.events_per_day.values())
        done.lines = sum(f.get("lines", 0) for f in done.files.values())
        return done
    finally:
        for uri in staged:
            wh.storage.fs.rm(uri, recursive=True)


def _read_lines(wh: Warehouse, files: list[LandingFile]) -> tuple[DataFrame, list, list[str]]:
    """One row per line (``payload``, ``source_file`` = the file's URI), the files that could not be read
    whole (file, reason, detail), and the staging folders to remove afterwards."""
    spark, paths, staged = wh.spark, {}, []
    if any(_UNADDRESSABLE in f.name for f in files):
        folder = f"{wh.storage.table_uri(STAGING)}/{uuid.uuid4().hex}"
        wh.storage.fs.makedirs(wh.storage.path_of(folder), exist_ok=True)
        staged.append(folder)
    for n, f in enumerate(files):
        if _UNADDRESSABLE in f.name:
            copy = f"{staged[0]}/{n}{next(s for s in ('.jsonl.gz', '.jsonl', '.json') if f.name.endswith(s))}"
            wh.storage.fs.copy(f.uri, copy)
            paths[f.uri] = copy
        else:
            paths[f.uri] = f.uri
    read = lambda uris, salvage=False: _text(spark, uris, salvage)  # noqa: E731
    # Checkpointed, not cached: Spark finds a cache by the query, and the same files read again after they
    # changed are the same query.
    broken = []
    try:
        lines = read(list(paths.values())).localCheckpoint()
    except Exception:  # noqa: BLE001 - some file is bad: find which, read the rest, salvage what can be read
        good = []
        for f in files:
            try:
                read([paths[f.uri]]).count()
                good.append(paths[f.uri])
            except Exception as error:  # noqa: BLE001
                broken.append((f, "unreadable_file", root_cause(error)))
        parts = [read(good)] + [read([paths[f.uri]], salvage=True) for f, _, _ in broken]
        lines = parts[0]
        for part in parts[1:]:
            lines = lines.unionByName(part)
        lines = lines.localCheckpoint()
    # Spark names a file by its percent-encoded path: map each back to the landing file it came from.
    by_path = {_plain(p): uri for uri, p in paths.items()}
    seen = [r.file_path for r in lines.groupBy("file_path").count().collect()]
    mapping = spark.createDataFrame([(p, by_path[_plain(p)]) for p in seen], "file_path string, source_file string")
    return lines.join(F.broadcast(mapping), "file_path").drop("file_path"), broken, staged


def _text(spark, uris: list[str], salvage: bool) -> DataFrame:
    if not uris:
        return spark.createDataFrame([], "payload string, file_path string")
    reader = spark.read.option("ignoreCorruptFiles", "true") if salvage else spark.read
    escaped = [_GLOB.sub(r"\\\1", uri) for uri in uris]
    return reader.text(escaped).select(F.col("value").alias("payload"), F.col("_metadata.file_path").alias("file_path"))


def _plain(uri: str) -> str:
    """A URI as scheme and decoded path, however many slashes follow the scheme."""
    scheme, _, rest = urllib.parse.unquote(uri).partition(":")
    return f"{scheme}:/{rest.lstrip('/')}"


def root_cause(error: BaseException) -> str:
    """The innermost Java or Python cause of a read error, in one line."""
    text = str(error)
    causes = re.findall(r"Caused by: ([\w.$]+(?:Exception|Error)[^\n]*)", text)
    line = causes[-1] if causes else next((s for s in text.splitlines() if s.strip()), type(error).__name__)
    return line.strip()[:500]


def _with_device_classes(wh: Warehouse, events: DataFrame) -> DataFrame:
    """Add ``device_class`` from ``user_agent``, classifying (and remembering) agents not seen before."""
    agents = events.where(F.col("user_agent").isNotNull()).select("user_agent").distinct()
    known = wh.read(USER_AGENTS).join(agents, "user_agent", "left_semi")
    new = [r.user_agent for r in agents.join(known, "user_agent", "left_anti").collect()]
    if new:
        wh.append(USER_AGENTS, wh.spark.createDataFrame(devices.classify(new), USER_AGENTS.schema))
        known = wh.read(USER_AGENTS).join(agents, "user_agent", "left_semi")
    return events.join(F.broadcast(known.dropDuplicates(["user_agent"])), "user_agent", "left")
