"""Received days' landing files -> ``raw_events``, ``rejected_events``, ``partition_map`` and ``received_days``.

Every line of every file is accounted for: accepted, rejected with its reason, suppressed (a forgotten person's:
counted, never stored), or, when its file cannot be read, counted in a rejects row that names the file and the error (a truncated gzip keeps the lines
read before the break). Files with names Spark will not read (hidden, or another suffix) get a rejects
row too, so nothing in the landing zone disappears silently, and one bad file never stops the others.
"""

from __future__ import annotations

import re
import urllib.parse
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.engine import accept, devices, privacy
from sessions_assets.engine.dedup import message_hash
from sessions_assets.settings import Settings
from sessions_assets.warehouse import hooks, journal, ledger
from sessions_assets.warehouse.delta import DeltaLog, Warehouse, on_days
from sessions_assets.warehouse.spark import one_line
from sessions_assets.warehouse.storage import LandingFile
from sessions_assets.warehouse.tables import (
    PARTITION_MAP,
    RAW_EVENTS,
    RECEIVED_DAYS,
    REJECTED_EVENTS,
    USER_AGENTS,
    Table,
)

_GLOB = re.compile(r"([\[\]{}*?\\])")
# Hadoop cannot address a file whose name holds ':'; such files are read from a copy with a plain name.
_UNADDRESSABLE = ":"
STAGING = "_staging"


@dataclass
class IngestedDay:
    """What loading one received day did (materialization metadata and the CLI's summary): the counts are of the
    files this ingest read."""

    fingerprint: str = ""
    lines: int = 0
    accepted: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    events_per_day: dict[date, int] = field(default_factory=dict)
    # Event days this ingest may have changed: those it maps now and those an earlier ingest of the same
    # received day mapped (a re-ingest without an event day must still correct that day).
    event_days: list[date] = field(default_factory=list)
    # file URI -> its source (in Segment's layout only), lines, accepted, rejected, suppressed, or why it was not read
    files: dict[str, dict] = field(default_factory=dict)
    suppressed: int = 0  # lines of forgotten persons, dropped: neither accepted nor rejected, never stored
    kept: int = 0  # files of the day an earlier ingest read and this one did not (unchanged, or gone from the folder)

    @property
    def rejected(self) -> int:
        return sum(self.reasons.values())


@dataclass(frozen=True)
class Delivery:
    """What an ingest reads of one received day: the files new or changed since the day's last ingest, and the
    records it keeps of the others; ``kept`` None: the day is read whole, its rows replaced."""

    files: list[LandingFile]
    kept: tuple[ledger.FileRecord, ...] | None = None
    # Files gone from the folder that hold no line in the tables (a hidden upload in progress, an empty file): their
    # records, and a skipped file's rejects row, go.
    dropped: tuple[str, ...] = ()

    @property
    def whole(self) -> bool:
        return self.kept is None


def delivery(files: list[LandingFile], record: ledger.Received | None, zone: str) -> Delivery:
    """A file is the unit of delivery: the day's files whose fingerprint its record does not hold are read, the
    rows of the others stay (a file gone from the folder withdraws nothing, unless it holds no line). A day
    recorded without its files, or in another time zone, is read whole."""
    if record is None or record.files is None or record.zone != zone:
        return Delivery(files)
    recorded = {f.source_file: f.fingerprint for f in record.files}
    read = [f for f in files if recorded.get(f.uri) != f.fingerprint]
    names, present = {f.uri for f in read}, {f.uri for f in files}
    gone = tuple(r.source_file for r in record.files if r.source_file not in present and not r.lines)
    kept = tuple(r for r in record.files if r.source_file not in names and r.source_file not in gone)
    return Delivery(read, kept, gone)


def _current(plans: dict[date, Delivery], recorded: dict[date, ledger.Received]) -> dict[date, Delivery]:
    """The plans with their kept files' counts as ``received_days`` holds them now: an erasure may have recounted
    them since the days were planned."""
    current = {}
    for day, plan in plans.items():
        now = {} if plan.whole or day not in recorded else {f.source_file: f for f in recorded[day].files or ()}
        current[day] = replace(plan, kept=tuple(now.get(r.source_file, r) for r in plan.kept)) if now else plan
    return current


def ingest_days(
    wh: Warehouse, settings: Settings, fingerprints: dict[date, str], stored: bool = False, whole: bool = False
) -> dict[date, IngestedDay]:
    """Parse the new and changed files of the received days (fingerprint taken before the read) in one read, and
    replace their rows in each landing table in one commit: the map after the rows, the record of what was
    ingested last. ``whole``: read every file of the days and replace the days whole (what their folders hold
    now). ``stored``: judge the lines the tables hold of those days again instead (their folders may be gone),
    after the time zone or the acceptance rules changed; each day keeps the fingerprints its latest ingest
    recorded."""
    recorded = ledger.received(wh.storage)
    if stored:
        fingerprints = {day: recorded[day].fingerprint for day in fingerprints if day in recorded}
        lines, count, files, broken = stored_lines(wh, sorted(fingerprints), recorded)
        with wh.compiled(count):
            return _replace_days(wh, settings, fingerprints, {d: Delivery(f) for d, f in files.items()}, lines, broken)
    days = sorted(fingerprints)
    plans = {
        day: delivery(wh.storage.landing_files(day), None if whole else recorded.get(day), settings.time_zone)
        for day in days
    }
    if not any(plan.files or plan.whole or plan.dropped for plan in plans.values()):
        return _record_only(wh, settings, fingerprints, plans, recorded)
    lines, count, broken, staged = read_lines(wh, [f for p in plans.values() for f in p.files if f.skip_reason is None])
    try:
        with wh.compiled(count):
            return _replace_days(wh, settings, fingerprints, plans, lines, broken)
    finally:
        for uri in staged:
            wh.storage.fs.rm(uri, recursive=True)


def _record_only(
    wh: Warehouse,
    settings: Settings,
    fingerprints: dict[date, str],
    plans: dict[date, Delivery],
    recorded: dict[date, ledger.Received],
) -> dict[date, IngestedDay]:
    """Days with no file to read (their folders lost files, or nothing changed): no row moves; the record of a day
    whose fingerprint moved is written again with it, and nothing is written when none did."""
    done = {day: IngestedDay(fingerprints[day], kept=len(plan.kept or ())) for day, plan in plans.items()}
    moved = [day for day in plans if recorded[day].fingerprint != fingerprints[day]]
    if moved:
        rows = [replace(recorded[day], fingerprint=fingerprints[day]) for day in moved]
        _write_records(wh, rows, on_days("received_date", moved))
    for day, ingested in done.items():
        ingested.event_days = list(recorded[day].event_days)
    return done


def _replace_days(
    wh: Warehouse,
    settings: Settings,
    fingerprints: dict[date, str],
    plans: dict[date, Delivery],
    lines: DataFrame,
    broken: list,
) -> dict[date, IngestedDay]:
    """The lines judged, the forgotten persons' dropped, counted per received day and file, and written: one
    commit per landing table that changes.

    The suppression list is the journal of forget requests as read before judging; it is read again right before
    the first commit and after the last. A request that came in between (its erasure may not have seen these rows)
    has the days judged and written again, and another purge requested for the files the first writes superseded.
    Days whose commit names files an erasure's purge removed before the commit (they were not yet committed when it
    vacuumed) are written again too."""
    days = sorted(fingerprints)
    day_of = {f.uri: day for day in days for f in plans[day].files}
    source_of = {f.uri: f.source_id for day in days for f in plans[day].files}
    received = wh.spark.createDataFrame(
        [(uri, day, source_of[uri]) for uri, day in day_of.items()],
        "source_file string, received_date date, source_id string",
    )
    classified = (
        _with_device_classes(wh, accept.classify(accept.parse(lines), settings))
        .join(F.broadcast(received), "source_file")
        .withColumns({"message_hash": message_hash(F.col("message_id")), "detail": F.lit(None)})
        .localCheckpoint()
    )
    hashed: dict[str, object] = {}  # the key and the lines with their ids hashed, once a request is stored
    while True:
        listed = journal.suppression(wh)
        judged, listed = _judged(wh, settings, classified, listed, hashed)
        done = _counted(judged, fingerprints, plans)
        hooks.reached(hooks.LINES_JUDGED)
        if journal.version(wh.storage) != listed.version:  # a request came while the lines were judged
            continue
        plans = _current(plans, ledger.received(wh.storage))
        committed = _write(wh, settings, judged, done, plans, broken, day_of)
        now = journal.suppression(wh)
        if (now.users, now.devices) != (listed.users, listed.devices):
            journal.add(wh, hashed.get("key") or journal.load_key(settings), journal.PURGE)
        elif not any(DeltaLog(wh.storage, table).lost_files(version) for table, version in committed):
            return done


def _judged(
    wh: Warehouse, settings: Settings, classified: DataFrame, listed: journal.Suppression, hashed: dict
) -> tuple[DataFrame, journal.Suppression]:
    """The lines with ``suppressed``: those of the persons the journal forgets. A forgotten user's line carrying
    an anonymous id not yet forgotten links it: it is stored as a ``link`` request (whose erasure removes that
    device's lines already stored) before this ingest drops its lines too."""
    if not listed:
        return classified.withColumn("suppressed", F.lit(False)), listed
    if "lines" not in hashed:
        key = journal.load_key(settings)
        journal.check_key(key, listed.key_ids)
        hashed.update(key=key, lines=privacy.with_hashes(classified, key).localCheckpoint())
    lines = hashed["lines"]
    users, devices = listed.frames(wh)
    new: dict[str, set[str]] = {}
    for row in privacy.links(lines, users).collect():
        if row.hash not in listed.devices:
            new.setdefault(row.user_hash, set()).add(row.hash)
    if new:
        journal.add(wh, hashed["key"], journal.LINK, new)
        listed = journal.suppression(wh)
        users, devices = listed.frames(wh)
    return privacy.mark(lines, users, devices, "suppressed"), listed


def _counted(judged: DataFrame, fingerprints: dict[date, str], plans: dict[date, Delivery]) -> dict[date, IngestedDay]:
    """Every count the run reports, in one query: per received day, file, reason and event day."""
    done = {
        day: IngestedDay(
            fingerprints[day],
            files={
                f.uri: {**_source(f), "lines": 0, "accepted": 0, "rejected": 0, "suppressed": 0, "events_per_day": {}}
                for f in plans[day].files
                if not f.skip_reason
            },
            kept=len(plans[day].kept or ()),
        )
        for day in sorted(fingerprints)
    }
    for row in judged.groupBy("received_date", "source_file", "reason", "event_date", "suppressed").count().collect():
        ingested = done[row.received_date]
        counts = ingested.files[row.source_file]
        counts["lines"] += row["count"]
        if row.suppressed:  # neither accepted nor rejected: never stored
            counts["suppressed"] += row["count"]
            ingested.suppressed += row["count"]
            continue
        counts["accepted" if row.reason is None else "rejected"] += row["count"]
        if row.reason is None:
            ingested.events_per_day[row.event_date] = ingested.events_per_day.get(row.event_date, 0) + row["count"]
            per_day = counts["events_per_day"]
            per_day[row.event_date] = per_day.get(row.event_date, 0) + row["count"]
        else:
            ingested.reasons[row.reason] = ingested.reasons.get(row.reason, 0) + row["count"]
    return done


def _read_where(plans: dict[date, Delivery]) -> str:
    """The rows an ingest replaces: those of the days read whole, and of the others every row but the kept files'
    (the files read, and any row a failed ingest committed before its record: the day then holds exactly what its
    record says)."""
    whole = [day for day, plan in plans.items() if plan.whole]
    parts = [on_days("received_date", whole)] if whole else []
    for day, plan in sorted(plans.items()):
        if not plan.whole and (plan.files or plan.dropped):
            kept = ", ".join(_quoted(r.source_file) for r in plan.kept)
            on_day = f"received_date = DATE'{day.isoformat()}'"
            parts.append(f"({on_day} AND source_file NOT IN ({kept}))" if kept else f"({on_day})")
    return " OR ".join(parts) or "FALSE"


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _write(
    wh: Warehouse,
    settings: Settings,
    judged: DataFrame,
    done: dict[date, IngestedDay],
    plans: dict[date, Delivery],
    broken: list,
    day_of: dict[str, date],
) -> list[tuple[Table, int]]:
    """Replace the files' rows in each landing table: the rows, the map, then the record of what was ingested.
    Returns each table and the version its commit made."""
    days = sorted(done)
    skipped = [(f, f.skip_reason, f.detail) for day in days for f in plans[day].files if f.skip_reason] + broken
    for f, reason, detail in skipped:
        ingested = done[day_of[f.uri]]
        ingested.files[f.uri] = {
            **_source(f),
            **ingested.files.get(f.uri, {}),
            "skipped": reason,
            "detail": detail,
        }
        ingested.reasons[reason] = ingested.reasons.get(reason, 0) + 1
    file_rows = wh.spark.createDataFrame(
        [(None, reason, detail, f.source_id, f.uri, day_of[f.uri]) for f, reason, detail in skipped],
        REJECTED_EVENTS.schema,
    )
    kept = judged.where(~F.col("suppressed"))
    rejected = kept.where(F.col("reason").isNotNull()).select(*REJECTED_EVENTS.columns).unionByName(file_rows)
    fingerprint_of = {f.uri: f.fingerprint for day in days for f in plans[day].files}
    records = {
        day: [
            *(plans[day].kept or ()),
            *(
                ledger.FileRecord(
                    uri,
                    fingerprint_of[uri],
                    c.get("lines", 0) - c.get("suppressed", 0),
                    c.get("accepted", 0),
                    c.get("rejected", 0) + (1 if c.get("skipped") else 0),
                    c.get("events_per_day", {}),
                )
                for uri, c in done[day].files.items()
            ),
        ]
        for day in days
    }
    mapped_now = {day: summed(r.events_per_day for r in records[day]) for day in days}
    mapping = wh.spark.createDataFrame(
        [(day, d, n) for day in days for d, n in sorted(mapped_now[day].items())], PARTITION_MAP.schema
    )
    where = _read_where(plans)
    # The event days the days' earlier ingests mapped: a small table, read without Spark.
    before = [r for r in ledger.small_table(wh.storage, PARTITION_MAP) if r["received_date"] in done]
    committed = []  # (table, the version its write made, as far as this ingest knows)
    no_rejects = not any(d.reasons for d in done.values())
    for table, rows, condition in (
        (RAW_EVENTS, kept.where(F.col("reason").isNull()), where),
        (REJECTED_EVENTS, rejected, where),
        (PARTITION_MAP, mapping, on_days("received_date", days)),
    ):
        # Days with no reject, whose rejects partitions hold no file (looked up as late as can be), leave that table
        # as it is: its write would change nothing and cost the server six queries.
        if table is REJECTED_EVENTS and no_rejects and not ledger.holds_days(wh.storage, table, days):
            continue
        wh.replace_where(table, rows, condition)
        committed.append((table, wh.version(table)))
        hooks.reached(hooks.TABLE_WRITTEN, table=table)
    raw_version = committed[0][1]
    for day, ingested in done.items():
        mapped = {r["event_date"] for r in before if r["received_date"] == day}
        ingested.event_days = sorted(mapped | set(ingested.events_per_day))
        ingested.accepted = sum(ingested.events_per_day.values())
        ingested.lines = sum(f.get("lines", 0) for f in ingested.files.values())
    rows = [
        ledger.Received(
            day,
            d.fingerprint,
            sum(r.lines for r in records[day]),
            sum(r.accepted for r in records[day]),
            sum(r.rejected for r in records[day]),
            tuple(d.event_days),
            raw_version,
            settings.time_zone,
            tuple(records[day]),
        )
        for day, d in done.items()
    ]
    _write_records(wh, rows, on_days("received_date", days))
    return [*committed, (RECEIVED_DAYS, wh.version(RECEIVED_DAYS))]


def summed(counts) -> dict[date, int]:
    """Events per event day, summed over files."""
    total: dict[date, int] = {}
    for per_day in counts:
        for day, n in per_day.items():
            total[day] = total.get(day, 0) + n
    return total


def _write_records(wh: Warehouse, rows: list[ledger.Received], where: str) -> None:
    """Replace the records of received days (``received_days``), stamped with the time of this write."""
    now = datetime.now(UTC)
    record = wh.spark.createDataFrame(
        [
            (
                r.day,
                r.fingerprint,
                r.lines,
                r.accepted,
                r.rejected,
                list(r.event_days),
                r.raw_version,
                now,
                r.time_zone,
                None if r.files is None else [f.row() for f in r.files],
            )
            for r in rows
        ],
        RECEIVED_DAYS.schema,
    )
    wh.replace_where(RECEIVED_DAYS, record, where)


def stored_lines(
    wh: Warehouse, days: list[date], recorded: dict[date, ledger.Received] | None = None
) -> tuple[DataFrame, int, dict[date, list[LandingFile]], list]:
    """The lines the tables hold of received days, as ``read_lines`` gives a folder's: one row per line
    (``payload``, ``source_file``), how many, each day's files (those the rows name, with the fingerprints
    ``recorded`` holds of them), and the files that were not read whole when they were ingested (file, reason,
    detail), whose rejects rows carry no line."""
    fingerprints = {
        f.source_file: f.fingerprint for r in (recorded or {}).values() if r.day in days for f in r.files or ()
    }
    on_days = F.col("received_date").isin(days)
    named = ("received_date", "source_file", "source_id")
    raw = wh.read(RAW_EVENTS).where(on_days).select(*named, "payload")
    rejects = wh.read(REJECTED_EVENTS).where(on_days)
    lines = raw.unionByName(rejects.where("payload IS NOT NULL").select(*named, "payload")).localCheckpoint()
    found = lines.groupBy(*named).count().collect()
    unread = rejects.where("payload IS NULL").select(*named, "reason", "detail").collect()
    files: dict[date, dict[str, LandingFile]] = {day: {} for day in days}
    for row in [*found, *unread]:
        name = row.source_file.rsplit("/", 1)[-1]
        files[row.received_date][row.source_file] = LandingFile(
            row.source_file,
            f"{row.source_id}/{name}" if row.source_id else name,
            fingerprints.get(row.source_file, ""),
            source_id=row.source_id,
        )
    broken = [(files[r.received_date][r.source_file], r.reason, r.detail) for r in unread]
    listed = {day: sorted(by_uri.values(), key=lambda f: f.name) for day, by_uri in files.items()}
    return lines.select("payload", "source_file"), sum(r["count"] for r in found), listed, broken


def _source(file: LandingFile) -> dict[str, str]:
    """A file's source, for its counts: Segment's layout has one, ours none."""
    return {"source": file.source_id} if file.source_id else {}


def read_lines(wh: Warehouse, files: list[LandingFile]) -> tuple[DataFrame, int, list, list[str]]:
    """One row per line (``payload``, ``source_file`` = the file's URI), how many, the files that could not be
    read whole (file, reason, detail), and the staging folders to remove afterwards."""
    spark, paths, staged = wh.spark, {}, []
    if any(_UNADDRESSABLE in f.name for f in files):
        folder = f"{wh.storage.table_uri(STAGING)}/{uuid.uuid4().hex}"
        wh.storage.fs.makedirs(wh.storage.path_of(folder), exist_ok=True)
        staged.append(folder)
    for n, f in enumerate(files):
        if _UNADDRESSABLE in f.name:
            copy = f"{staged[0]}/{n}{next(s for s in ('.jsonl.gz', '.gz', '.jsonl', '.json') if f.name.endswith(s))}"
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
    except Exception:  # some file is bad: find which, read the rest, salvage what can be read
        good = []
        for f in files:
            try:
                read([paths[f.uri]]).count()
                good.append(paths[f.uri])
            except Exception as error:
                broken.append((f, "unreadable_file", one_line(error)))
        parts = [read(good)] + [read([paths[f.uri]], salvage=True) for f, _, _ in broken]
        lines = parts[0]
        for part in parts[1:]:
            lines = lines.unionByName(part)
        lines = lines.localCheckpoint()
    # Spark names a file by its percent-encoded path: map each back to the landing file it came from.
    by_path = {_plain(p): uri for uri, p in paths.items()}
    seen = {r.file_path: r["count"] for r in lines.groupBy("file_path").count().collect()}
    mapping = spark.createDataFrame([(p, by_path[_plain(p)]) for p in seen], "file_path string, source_file string")
    return lines.join(F.broadcast(mapping), "file_path").drop("file_path"), sum(seen.values()), broken, staged


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


def _with_device_classes(wh: Warehouse, events: DataFrame) -> DataFrame:
    """Add ``device_class`` and ``is_bot`` from ``user_agent``, classifying (and remembering) agents not seen
    before. An agent stored before ``is_bot`` was kept is classified again, once."""
    agents = events.where(F.col("user_agent").isNotNull()).select("user_agent").distinct()
    classified = lambda: wh.read(USER_AGENTS).where("is_bot IS NOT NULL").join(agents, "user_agent", "left_semi")  # noqa: E731
    known = classified()
    new = [r.user_agent for r in agents.join(known, "user_agent", "left_anti").collect()]
    if new:
        wh.append(USER_AGENTS, wh.spark.createDataFrame(devices.device_classes(new), USER_AGENTS.schema))
        known = classified()
    return events.join(F.broadcast(known.dropDuplicates(["user_agent"])), "user_agent", "left")
