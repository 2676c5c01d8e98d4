"""Purging what an erasure removed from disk: the files, the staging copies, and log files that quote values."""

from __future__ import annotations

import json

from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import DeltaLog, Warehouse
from sessions_assets.warehouse.ingest import STAGING
from sessions_assets.warehouse.journal import ForgetError
from sessions_assets.warehouse.tables import DELETION_VECTORS, PERSONAL, Table

CHECKPOINT_INTERVAL = "delta.checkpointInterval"


def purge(wh: Warehouse) -> tuple[list[str], list[str]]:
    """Remove from disk every file that holds rows no longer in the tables (nothing may be behind by then: a derived
    table still to read its input's change feed): deleted rows purged from files with deletion vectors, every table
    holding persons vacuumed with no retention, staging copies removed, logs with statistics of strings cut.
    Returns the tables purged and those whose log was cut."""
    purged, truncated = [], []
    for table in PERSONAL:
        if DELETION_VECTORS in table.properties:
            wh.purge_deleted_rows(table)
    for table in PERSONAL:
        wh.vacuum(table, 0, full=True)
        purged.append(table.name)
    staging = wh.storage.path_of(wh.storage.table_uri(STAGING))
    if wh.storage.fs.exists(staging):
        wh.storage.fs.rm(staging, recursive=True)
    for table in PERSONAL:
        if quotes_strings(DeltaLog(wh.storage, table), table):
            truncate_log(wh, table)
            truncated.append(table.name)
    return purged, truncated


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
    for path in log.files():
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
    log.remove_before(at)
    wh.unset_properties(table, [CHECKPOINT_INTERVAL], note)
