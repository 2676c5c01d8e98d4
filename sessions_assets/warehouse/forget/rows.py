"""Removing forgotten persons' lines from the landing tables, and recounting the received days they were on."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sessions_assets.engine import accept, privacy
from sessions_assets.warehouse import hooks, ingest, journal, ledger
from sessions_assets.warehouse.delta import Merge, Warehouse, on_days
from sessions_assets.warehouse.journal import Request
from sessions_assets.warehouse.tables import (
    FILE_RECORD,
    PARTITION_MAP,
    RAW_EVENTS,
    RECEIVED_DAYS,
    REJECTED_EVENTS,
    Table,
)


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


def remove(
    wh: Warehouse, key: bytes, pending: list[Request], everyone: list[Request], counted: Counts, recount_all: bool
) -> Counter:
    """Delete the pending requests' lines from the landing tables and recount the received days they were on. What
    each request removes, and the anonymous ids its persons' lines carry, are recorded in the journal before any
    line goes: a run killed after the deletes still forgets those ids, drops their later lines and purges the
    files. Returns the rows removed per table."""
    if not any(r.user_hashes for r in pending):
        if recount_all:
            recount(wh, None)
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
            wh.merge(table, source, Merge(on).when_matched_delete())
    hooks.reached(hooks.LINES_REMOVED)
    if days or recount_all:
        recount(wh, None if recount_all else sorted(days))
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


def recount(wh: Warehouse, days: list | None) -> None:
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
    totals = Merge("t.received_date = s.received_date").when_matched_update(
        ["lines", "accepted", "rejected"], files=files
    )
    wh.merge(RECEIVED_DAYS, wh.spark.createDataFrame(rows, T.StructType(fields)), totals)
