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
   delivered again is not due because of the erasure, and brings nothing back when it is) (``rows.py``);
3. ``events`` -> ``identities`` -> ``sessions`` -> ``users`` -> ``lifecycle`` -> ``daily_snapshot`` refreshed by their
   usual steps, in the registry's order (``refresh/steps.py``): the deletes' change feed drives them as a late
   correction does;
4. nothing may be behind (an ingest that committed meanwhile: the pass runs again), and only then the purge
   (``purge.py``): files with deletion vectors rewritten without the deleted rows (``REORG ... APPLY (PURGE)``), every
   table holding persons' rows vacuumed with no retention (their time travel and change feed before that point go
   with it), leftover staging copies removed, and, for a table whose log still holds statistics of string columns
   (written before they stopped being collected), the log checkpointed and its older commits removed, the
   derived table's note stamped again on the new commits so nothing is rebuilt whole.

The landing files holding the persons' lines are found, and written again without them on request, apart
(``landing_files.py``). Every step is idempotent and the journal records where a request stands, so a run killed anywhere is resumed by
the next: nothing already removed is found again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from sessions_assets.settings import Settings
from sessions_assets.warehouse import journal, ledger
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.forget.landing_files import LandingScan, scan_landing
from sessions_assets.warehouse.forget.purge import purge
from sessions_assets.warehouse.forget.rows import Counts, remove
from sessions_assets.warehouse.journal import DONE, PENDING, REMOVED, ForgetError
from sessions_assets.warehouse.refresh import steps
from sessions_assets.warehouse.tables import EVENTS

__all__ = ["Erasure", "LandingScan", "erase", "refresh_all", "scan_landing"]

# A pass that finds the tables behind after its refresh (an ingest committed meanwhile) runs again, this often.
PASSES = 3


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
            done.removed.update(remove(wh, key, pending, requests, counted, recount_all))
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
            if steps.behind(wh.storage):  # a derived table still to read its input's change feed
                refresh_all(wh, settings)
            done.purged, done.logs_truncated = purge(wh)
            journal.update(wh, [replace(r, state=DONE, purged_at=datetime.now(UTC)) for r in waiting])
            done.requests_done += len(waiting)
        else:
            done.waiting = len(waiting)
    return done


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
