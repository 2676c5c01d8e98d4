"""Forgetting persons: their lines removed from the tables in the order that loses nothing, then from disk.

Each derived table reads its input's change feed from the version it absorbed, and a purge removes those files, so
an erasure (``erase``) runs in this order:

1. every derived table brought up to date by its usual step (the change feed they still need is read now);
2. the anonymous ids the persons' stored lines carry recorded in the journal first (a run killed later still
   forgets them), then their lines deleted from ``raw_events`` and ``rejected_events`` by one ``MERGE`` each, whose
   source is a view of the matching ids: a ``MERGE`` records its condition (column names), never the values, where a
   ``DELETE``'s or ``replaceWhere``'s predicate would quote them in the commit. A rejected line is matched by parsing
   its payload as an ingest does; one that is not a JSON object names no one and stays. ``partition_map`` and
   ``received_days`` are recounted for the received days that lost lines (their fingerprints are kept: a day
   delivered again is not due because of the erasure, and brings nothing back when it is);
3. ``events`` -> ``identities`` -> ``sessions`` -> ``users`` -> ``lifecycle`` -> ``daily_snapshot`` refreshed by their
   usual steps: the deletes' change feed drives them as a late correction does;
4. nothing may be behind (an ingest that committed meanwhile: the pass runs again), and only then the purge
   (``purge``): files with deletion vectors rewritten without the deleted rows (``REORG ... APPLY (PURGE)``), every
   table holding persons' rows vacuumed with no retention (their time travel and change feed before that point go
   with it), leftover staging copies removed, and, for a table whose log still holds statistics of string columns
   (written before they stopped being collected), the log checkpointed and its older commits removed, the
   derived table's note stamped again on the new commits so nothing is rebuilt whole.

Every step is idempotent and the journal records where a request stands, so a run killed anywhere is resumed by
the next: nothing already removed is found again.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sessions_assets.engine import accept, privacy
from sessions_assets.settings import Settings
from sessions_assets.warehouse import hooks, ingest, journal, ledger
from sessions_assets.warehouse.delta import DeltaLog, Warehouse, assign, on_days
from sessions_assets.warehouse.ingest import STAGING, read_lines
from sessions_assets.warehouse.journal import DONE, PENDING, REMOVED, ForgetError, Request
from sessions_assets.warehouse.refresh import steps
from sessions_assets.warehouse.tables import (
    DELETION_VECTORS,
    EVENTS,
    FILE_RECORD,
    PARTITION_MAP,
    PERSONAL,
    RAW_EVENTS,
    RECEIVED_DAYS,
    REJECTED_EVENTS,
    Table,
)

# A pass that finds the tables behind after its refresh (an ingest committed meanwhile) runs again, this often.
PASSES = 3
CHECKPOINT_INTERVAL = "delta.checkpointInterval"


@dataclass
class Erasure:
    """What a run of the erasure did, for metadata: counts, never an id."""

    taken: int = 0
    removed: Counter = field(default_factory=Counter)  # table -> rows removed or rewritten
    passes: int = 0
    requests_removed: int = 0  # requests whose rows are gone from every table
    requests_done: int = 0  # requests purged (or with nothing to remove)
    purged: list[str] = field(default_factory=list)  # the tables purged
    logs_truncated: list[str] = field(default_factory=list)
    waiting: int = 0  # requests whose purge waits (``forget_purge_hours``)


def refresh_all(wh: Warehouse, settings: Settings) -> Counter:
    """Every refresh step, in order, and the rows each changed: in the time zone the derived tables were built in,
    which an erasure keeps (it never waits for a changed zone to be applied: it has a legal deadline)."""
    built = ledger.built_in(wh.storage, EVENTS).get(ledger.TIME_ZONE, settings.time_zone)
    if built != settings.time_zone:
        settings = Settings(**{**settings.model_dump(), "time_zone": built})
    return steps.refresh_all(wh, settings)


def erase(wh: Warehouse, settings: Settings, key: bytes, now: datetime | None = None) -> Erasure:
    """Resume every request not done: remove the pending ones' rows, then purge when due."""
    now = now or datetime.now(UTC)
    done = Erasure()
    requests = journal.read(wh)
    journal.check_key(key, {r.key_id for r in requests})
    if any(r.state == PENDING for r in requests):
        ids = {r.request_id for r in requests if r.state == PENDING}
        # What a killed run recorded before its deletes; this run's finds are counted beside it (the larger of
        # the two per table: the killed run's deletes are found no more, those it did not make are found again).
        counted = Counts({r.request_id: Counter(r.removed) for r in requests if r.request_id in ids})
        derived = Counter()
        for done.passes in range(1, PASSES + 1):
            if steps.behind(wh.storage):
                refresh_all(wh, settings)
            requests = journal.read(wh)
            pending = [r for r in requests if r.request_id in ids]
            # A killed run may have deleted lines without recounting their days: all days are recounted then.
            recount_all = done.passes == 1 and any(counted.before.values())
            done.removed.update(_remove(wh, key, pending, requests, counted, recount_all))
            derived.update(refresh_all(wh, settings))
            if not steps.behind(wh.storage):
                break
        else:
            raise ForgetError(
                f"the tables kept changing during {PASSES} passes of the erasure: the next run resumes it"
            )
        marked = []
        for r in (r for r in journal.read(wh) if r.request_id in ids):
            # What it removed was recorded before the deletes, by this run or by a killed one: its files are purged.
            state = REMOVED if r.removed else DONE
            counts = Counter(r.removed) + (derived if r.removed else Counter())
            marked.append(replace(r, state=state, removed=dict(counts), purged_at=now if state == DONE else None))
        done.removed.update(derived)
        journal.update(wh, marked)
        done.requests_removed = sum(r.state == REMOVED for r in marked)
        done.requests_done = sum(r.state == DONE for r in marked)
    waiting = [r for r in journal.read(wh) if r.state == REMOVED]
    if waiting:
        oldest = min(_aware(r.updated_at or r.requested_at) for r in waiting)
        if not settings.forget_purge_hours or now - oldest >= timedelta(hours=settings.forget_purge_hours):
            purge(wh, settings, done)
            journal.update(wh, [replace(r, state=DONE, purged_at=datetime.now(UTC)) for r in waiting])
            done.requests_done += len(waiting)
        else:
            done.waiting = len(waiting)
    return done


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _tags(requests: list[Request], everyone: list[Request], devices: bool) -> list[tuple[str, str]]:
    """(hash, request id) of each pending request's users, or of every device linked to one of its users (by any
    request: a user forgotten twice has the devices of both)."""
    if not devices:
        return sorted({(h, r.request_id) for r in requests for h in r.user_hashes})
    linked: dict[str, set[str]] = {}
    for r in everyone:
        for user in r.user_hashes:
            linked.setdefault(user, set()).update(r.anonymous_hashes)
    return sorted({(d, r.request_id) for r in requests for u in r.user_hashes for d in linked.get(u, ())})


@dataclass
class Counts:
    """Each pending request's rows removed per table: as a killed run recorded them, and as this run found them."""

    before: dict[str, Counter]
    found: dict[str, Counter] = field(default_factory=dict)

    def add(self, request_id: str, table: str, rows: int) -> dict[str, int]:
        """Count ``rows`` more found; returns what the request records now."""
        found = self.found.setdefault(request_id, Counter())
        found[table] += rows
        before = self.before.get(request_id, Counter())
        return {t: max(before[t], found[t]) for t in set(before) | set(found)}


def _remove(
    wh: Warehouse, key: bytes, pending: list[Request], everyone: list[Request], counted: Counts, recount_all: bool
) -> Counter:
    """Delete the pending requests' lines from the landing tables and recount the received days they were on. What
    each request removes, and the anonymous ids its persons' lines carry, are recorded in the journal before any
    line goes: a run killed after the deletes still forgets those ids, drops their later lines and purges the
    files. Returns the rows removed per table."""
    if not any(r.user_hashes for r in pending):
        if recount_all:
            _recount(wh, None)
        return Counter()
    tag_schema = "hash string, request_id string"
    users = wh.spark.createDataFrame(_tags(pending, everyone, devices=False), tag_schema)
    # Lines stored before ids sent as JSON integers were read, without one of their ids: their payloads say whose
    # (``"userId": 42`` is the person "42"), so they are matched by payload, the others by their stored ids.
    before = [d.day for d in ledger.received(wh.storage).values() if d.time_zone is None]
    unread = f"{on_days('t.received_date', before)} AND (t.user_id IS NULL OR t.anonymous_id IS NULL)"
    stored_ids = _rows(wh, RAW_EVENTS, f"NOT ({unread})").select("user_id", "anonymous_id").distinct()
    raw = privacy.with_hashes(stored_ids, key).localCheckpoint()
    reread = _reread(_rows(wh, RAW_EVENTS, unread), key)
    rejected = _reread(wh.read(REJECTED_EVENTS).where("payload IS NOT NULL"), key)
    found: dict[str, set[str]] = {}
    for lines in (raw, rejected, reread):
        for row in privacy.links(lines, users).collect():
            found.setdefault(row.user_hash, set()).add(row.hash)
    grown = {}
    for r in pending:
        devices = set(r.anonymous_hashes).union(*(found.get(u, set()) for u in r.user_hashes))
        grown[r.request_id] = replace(r, anonymous_hashes=tuple(sorted(devices)))
    everyone = [grown.get(r.request_id, r) for r in everyone]
    devices = wh.spark.createDataFrame(_tags(list(grown.values()), everyone, devices=True), tag_schema)
    plans = []
    for table, lines, keys, rows in (
        (RAW_EVENTS, raw, ("user_id", "anonymous_id"), f"NOT ({unread})"),
        (RAW_EVENTS, reread, ("payload",), unread),
        (REJECTED_EVENTS, rejected, ("payload",), "TRUE"),
    ):
        doomed = _doomed(lines, users, devices, keys).localCheckpoint()
        stored = _rows(wh, table, rows).select("received_date", *keys)
        hit = stored.join(doomed, [stored[c].eqNullSafe(doomed[f"_{c}"]) for c in keys])
        counts = hit.groupBy("received_date", "request_id").count().collect()
        plans.append((table, doomed, keys, counts, rows))
    removed, days = Counter(), set()
    for table, _, _, counts, _ in plans:
        for row in counts:
            recorded = counted.add(row.request_id, table.name, row[2])
            grown[row.request_id] = replace(grown[row.request_id], removed=recorded)
            removed[table.name] += row[2]
            days.add(row.received_date)
    changed = [g for g in grown.values() if g != next(r for r in pending if r.request_id == g.request_id)]
    if changed:
        journal.update(wh, changed)
    for table, doomed, keys, counts, rows in plans:
        if counts:
            source = doomed.select(*[F.col(f"_{c}").alias(c) for c in keys]).distinct()
            on = " AND ".join([*(f"t.`{c}` <=> s.`{c}`" for c in keys), f"({rows})"])
            wh.merge(table, source, on, ["WHEN MATCHED THEN DELETE"])
    hooks.reached(hooks.LINES_REMOVED)
    if days or recount_all:
        _recount(wh, None if recount_all else sorted(days))
    return removed


def _reread(stored: DataFrame, key: bytes) -> DataFrame:
    """Stored lines' ids read from their payloads as an ingest reads them now, hashed."""
    payloads = stored.select("payload").distinct().withColumn("source_file", F.lit(None).cast("string"))
    parsed = accept.parse(payloads).select("payload", "user_id", "anonymous_id")
    return privacy.with_hashes(parsed, key).localCheckpoint()


def _rows(wh: Warehouse, table: Table, where: str) -> DataFrame:
    """A table's rows meeting a SQL condition on its columns as ``t.<column>`` (a ``MERGE``'s target side too: it
    names days and columns, never an id)."""
    return wh.read(table).alias("t").where(F.expr(where))


def _doomed(lines: DataFrame, users: DataFrame, devices: DataFrame, keys) -> DataFrame:
    """The keys (as ``_<key>``) of the lines the tagged users and devices forget, each with a request that forgets
    it (a line two requests forget is counted by both)."""
    columns = [*(F.col(c).alias(f"_{c}") for c in keys), "request_id"]
    by_user = lines.join(users, F.col(privacy.USER_HASH) == users["hash"]).select(*columns)
    by_device = (
        lines.where(F.col("user_id").isNull())
        .join(devices, F.col(privacy.ANONYMOUS_HASH) == devices["hash"])
        .select(*columns)
    )
    return by_user.unionByName(by_device).distinct()


# A file's counts as a recount finds them (``tables.FILE_RECORD`` without its name and fingerprint).
_FILE_COUNTS = T.StructType([f for f in FILE_RECORD.fields if f.name not in ("source_file", "fingerprint")])


def _recount(wh: Warehouse, days: list | None) -> None:
    """``partition_map`` and ``received_days`` (each day's totals and its files' counts) of the received days that
    lost lines (None: of every day), counted again from the rows left; the fingerprints, the event days and the
    versions stay, so a file delivered again is read only if it changed, and adds only what it holds."""
    on_day = F.lit(True) if days is None else F.col("received_date").isin(days)
    counts: dict = {}  # received day -> file -> [lines, accepted, rejected, {event day: events}]
    for r in wh.read(RAW_EVENTS).where(on_day).groupBy("received_date", "source_file", "event_date").count().collect():
        c = counts.setdefault(r.received_date, {}).setdefault(r.source_file, [0, 0, 0, {}])
        c[0], c[1], c[3][r.event_date] = c[0] + r["count"], c[1] + r["count"], r["count"]
    rejects = (
        wh.read(REJECTED_EVENTS)
        .where(on_day)
        .groupBy("received_date", "source_file")
        .agg(F.count(F.lit(1)).alias("rejected"), F.count("payload").alias("lines"))
    )
    for r in rejects.collect():
        c = counts.setdefault(r.received_date, {}).setdefault(r.source_file, [0, 0, 0, {}])
        c[0], c[2] = c[0] + r.lines, c[2] + r.rejected
    recorded = ledger.received(wh.storage)
    chosen = sorted(recorded if days is None else set(days) & set(recorded))
    if not chosen:
        return
    of_day = {day: counts.get(day, {}) for day in chosen}
    mapped = [
        (day, event_day, n)
        for day, files in of_day.items()
        for event_day, n in sorted(ingest.summed(c[3] for c in files.values()).items())
    ]
    wh.replace_where(
        PARTITION_MAP, wh.spark.createDataFrame(mapped, PARTITION_MAP.schema), on_days("received_date", chosen)
    )
    rows = [
        (day, *(sum(c[n] for c in files.values()) for n in range(3)), {uri: tuple(c) for uri, c in files.items()})
        for day, files in of_day.items()
    ]
    # Each file's counts are set inside the record the table holds at the commit, so that the files, and their
    # fingerprints, of an ingest that committed since ``recorded`` was read stay.
    per_file = T.MapType(T.StringType(), _FILE_COUNTS)
    fields = [
        *(RECEIVED_DAYS.schema[c] for c in ("received_date", "lines", "accepted", "rejected")),
        T.StructField("counts", per_file),
    ]
    of = "s.counts[f.source_file]"
    none = "map_from_arrays(CAST(array() AS array<date>), CAST(array() AS array<bigint>))"
    files = (
        "transform(t.files, f -> named_struct('source_file', f.source_file, 'fingerprint', f.fingerprint, "
        f"'lines', coalesce({of}.lines, 0L), 'accepted', coalesce({of}.accepted, 0L), "
        f"'rejected', coalesce({of}.rejected, 0L), 'events_per_day', coalesce({of}.events_per_day, {none})))"
    )
    wh.merge(
        RECEIVED_DAYS,
        wh.spark.createDataFrame(rows, T.StructType(fields)),
        "t.received_date = s.received_date",
        [f"WHEN MATCHED THEN UPDATE SET {assign(['lines', 'accepted', 'rejected'])}, t.files = {files}"],
    )


def purge(wh: Warehouse, settings: Settings, done: Erasure) -> None:
    """Remove from disk every file that holds rows no longer in the tables: first nothing may be behind (a derived
    table still to read its input's change feed), then deleted rows purged from files with deletion vectors, every
    table holding persons vacuumed with no retention, staging copies removed, logs with statistics of strings cut."""
    if steps.behind(wh.storage):
        refresh_all(wh, settings)
    for table in PERSONAL:
        if DELETION_VECTORS in table.properties:
            wh.purge_deleted_rows(table)
    for table in PERSONAL:
        wh.vacuum(table, 0, full=True)
        done.purged.append(table.name)
    staging = wh.storage.path_of(wh.storage.table_uri(STAGING))
    if wh.storage.fs.exists(staging):
        wh.storage.fs.rm(staging, recursive=True)
    for table in PERSONAL:
        if quotes_strings(DeltaLog(wh.storage, table), table):
            truncate_log(wh, table)
            done.logs_truncated.append(table.name)


def _add_actions(text: str):
    """The ``add`` actions of a commit file or of a checksum file's ``allFiles``."""
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "add" in action:
            yield action["add"]
        yield from action.get("allFiles") or ()


def _quotes(stats: str | None, allowed: set[str]) -> bool:
    if not stats:
        return False
    found = json.loads(stats)
    return any(set(found.get(kind) or {}) - allowed for kind in ("minValues", "maxValues"))


def quotes_strings(log: DeltaLog, table: Table) -> bool:
    """Whether any file of the log (commits, checksums, checkpoints) records statistics of a column that keeps none
    now: written before the table stopped collecting them for strings, they may quote a forgotten person's value."""
    import pyarrow.parquet as pq

    allowed, fs = set(table.stats_columns), log.storage.fs
    for path in fs.ls(log.path, detail=False):
        name = path.rsplit("/", 1)[-1]
        if name.endswith((".json", ".crc")) and name[:20].isdigit() and not name.startswith("."):
            if any(_quotes(a.get("stats"), allowed) for a in _add_actions(fs.cat_file(path).decode())):
                return True
        elif ".checkpoint" in name and name.endswith(".parquet") and not name.startswith("."):
            with fs.open(path, "rb") as f:
                adds = pq.ParquetFile(f).read(["add"], use_threads=False)[0].to_pylist()
            if any(a and _quotes(a.get("stats"), allowed) for a in adds):
                return True
    return False


def truncate_log(wh: Warehouse, table: Table) -> None:
    """Checkpoint the log at a new commit and remove every log file before it. The new commits (a property set
    and unset, which change no row) carry the table's latest note, so a derived table is not rebuilt whole, and the
    last version that changed rows before them, so the tables that follow it, which absorbed that one, skip the
    versions cut (``ledger.first_unabsorbed``)."""
    log = DeltaLog(wh.storage, table)
    changed = [v for v in log.versions() if log.commit_info(v).get("operation") not in ledger.NO_DATA_CHANGE]
    quiet = {ledger.QUIET_SINCE: changed[-1] if changed else -1}  # the tables that follow it read nothing cut
    note = next((n for _, n in log.notes(ledger.NOTE_HISTORY)), {}) | quiet
    wh.alter_properties(table, {CHECKPOINT_INTERVAL: "1"}, note)
    at = log.version()
    if log.last_checkpoint() != at:
        raise ForgetError(f"{table.name}: Delta wrote no checkpoint at version {at}; its log was left whole")
    fs = wh.storage.fs
    for path in fs.ls(log.path, detail=False):
        name = path.rsplit("/", 1)[-1].lstrip(".")
        if name[:20].isdigit() and int(name[:20]) < at:
            fs.rm(path)
    wh.unset_properties(table, [CHECKPOINT_INTERVAL], note)


@dataclass
class LandingScan:
    """The landing files holding lines of forgotten persons: how many each, and those that cannot be rewritten."""

    files: dict[str, int] = field(default_factory=dict)  # file URI -> forgotten lines
    unreadable: list[str] = field(default_factory=list)  # files not read whole: left as they are
    rewritten: list[str] = field(default_factory=list)


# Hadoop's line breaks, as Spark's text reader (and so every ingest) splits lines.
_LINE_BREAKS = re.compile(r"\r\n|\r|\n")


def scan_landing(wh: Warehouse, key: bytes, rewrite: bool = False) -> LandingScan:
    """Read every readable landing file (one Spark read of the whole landing zone), find the lines the journal
    forgets, and with ``rewrite`` write each file holding some again without them. The collector's files are
    otherwise never written: a rewritten file changes its day's fingerprint, and the day's next ingest stores what
    the tables hold already (its forgotten lines were never stored)."""
    listed = journal.suppression(wh)
    found = LandingScan()
    if not listed:
        return found
    zone = wh.storage.zone()
    days = sorted({f.day for f in zone.folders if f.day is not None and f.problem is None})
    files = [f for day in days for f in wh.storage.landing_files(day, zone) if f.skip_reason is None]
    lines, _, broken, staged = read_lines(wh, files)
    try:
        parsed = accept.parse(lines).select("payload", "source_file", "user_id", "anonymous_id")
        users, devices = listed.frames(wh)
        marked = privacy.mark(privacy.with_hashes(parsed, key), users, devices).where("forgotten")
        doomed: dict[str, set[str]] = {}
        for row in marked.select("source_file", "payload").collect():
            found.files[row.source_file] = found.files.get(row.source_file, 0) + 1
            doomed.setdefault(row.source_file, set()).add(row.payload)
    finally:
        for uri in staged:
            wh.storage.fs.rm(uri, recursive=True)
    found.unreadable = sorted({f.uri for f, _, _ in broken} & set(found.files))
    if rewrite:
        for uri in sorted(set(doomed) - set(found.unreadable)):
            if _rewrite(wh, uri, doomed[uri]):
                found.rewritten.append(uri)
            else:
                found.unreadable.append(uri)
    return found


def _rewrite(wh: Warehouse, uri: str, doomed: set[str]) -> bool:
    """Write a landing file again without the ``doomed`` lines (next to it under a hidden name, which no ingest
    reads, then moved over it); False when it is not UTF-8 text, which an ingest would not read as it is here."""
    fs, path = wh.storage.fs, wh.storage.path_of(uri)
    data = fs.cat_file(path)
    zipped = path.endswith(".gz")
    try:
        text = (gzip.decompress(data) if zipped else data).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError):
        return False
    lines = _LINE_BREAKS.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    kept = "".join(line + "\n" for line in lines if line not in doomed).encode("utf-8")
    folder, name = path.rsplit("/", 1)
    staged = f"{folder}/.{name}.forgetting"
    with fs.open(staged, "wb") as f:
        f.write(gzip.compress(kept, mtime=0) if zipped else kept)
    fs.mv(staged, path)
    return True
