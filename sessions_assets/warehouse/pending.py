"""What is due, read from the warehouse alone (no Dagster): the received days to ingest, the refresh, the erasures.

What the tables hold is read from the warehouse, never from the Dagster instance, so a new or wiped instance
over an existing warehouse sees the truth:

- a received day is due for ingest when its landing folder's fingerprint differs from the one its latest
  ingest recorded in ``received_days`` (``arrivals``);
- a refresh is due when a derived table has not absorbed every change of its input (``backlog``);
- an erasure is due while a forget request is not done (``erasures``).

What the runs are doing about it, and the run requests, are ``graph/planning.py``'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date, timedelta

from sessions_assets.warehouse import journal, ledger
from sessions_assets.warehouse.delta import DeltaLog
from sessions_assets.warehouse.refresh import steps
from sessions_assets.warehouse.storage import LandingFolder, Storage
from sessions_assets.warehouse.tables import RECEIVED_DAYS


@dataclass(frozen=True)
class Arrivals:
    """The landing zone against what the warehouse recorded of each received day."""

    due: dict[date, str]  # received day -> its folder's fingerprint now, oldest first
    ignored: list[LandingFolder]  # folders that are not a received day the partitions hold
    recorded: int | None = None  # the version of received_days read: part of the ingest runs' keys
    looked: tuple[date, ...] = ()  # the received days whose files were listed, oldest first
    latest: dict[str, date] = field(default_factory=dict)  # each parent folder -> its latest received day

    def describe_ignored(self) -> list[str]:
        return [f"{f.name}: {f.problem}, skipped" for f in self.ignored]


@dataclass(frozen=True)
class Glance:
    """Which received days a landing sensor tick lists the files of, between its full listings: the latest
    ``recent_days``, those with a folder new since the previous tick (past the latest day its parent folder had
    then), those due then (``pending``), and those the warehouse has no record of. Another day is taken to be as
    its last listing found it; a file added to it is found at the next full listing."""

    latest: Mapping[str, date]
    pending: frozenset[date]
    recent_days: int

    def days(self, listed: Mapping[date, list[LandingFolder]], recorded: Mapping[date, ledger.Received]) -> set[date]:
        """Of the received days ``listed`` (with their folders), those to look at."""
        recent = set(sorted(listed)[-self.recent_days :]) if self.recent_days > 0 else set()
        new = {d for d, folders in listed.items() if any(d > self.latest.get(f.parent, date.min) for f in folders)}
        return recent | new | (self.pending & listed.keys()) | (listed.keys() - recorded.keys())


def arrivals(storage: Storage, days: tuple[date, date], glance: Glance | None = None) -> Arrivals:
    """Each received day's fingerprint against the one its latest ingest recorded, for the received days the
    partitions hold (``days``: the first and last, ``partitions.bounds``). Every day's files are listed (``run``,
    ``status``, the sensor's full listing), or, given a glance, those of the days it picks: the folders themselves
    are listed either way (one listing of each parent folder)."""
    lo, hi = days
    recorded = DeltaLog(storage, RECEIVED_DAYS).version()
    seen = ledger.received(storage)
    zone = storage.zone()
    listed, ignored = _received(zone.folders, lo, hi)
    looked = sorted(listed if glance is None else glance.days(listed, seen))
    due = {}
    for day in looked:
        fingerprint = storage.fingerprint(day, zone)
        if day not in seen or seen[day].fingerprint != fingerprint:
            due[day] = fingerprint
    return Arrivals(due, ignored, recorded, tuple(looked), _latest(listed))


def _received(
    folders: list[LandingFolder], lo: date, hi: date
) -> tuple[dict[date, list[LandingFolder]], list[LandingFolder]]:
    """The folders of each received day the partitions hold (in Segment's layout, one per source), and the
    folders that are not one."""
    days: dict[date, list[LandingFolder]] = {}
    ignored: list[LandingFolder] = []
    for folder in folders:
        if folder.day in days:  # another source's folder of a day
            days[folder.day].append(folder)
        elif folder.day is None:
            ignored.append(folder)
        elif not lo <= folder.day <= hi:
            ignored.append(replace(folder, problem=f"outside the partitions {lo}..{hi} (start_date)"))
        else:
            days[folder.day] = [folder]
    return days, ignored


def _latest(listed: Mapping[date, list[LandingFolder]]) -> dict[str, date]:
    latest: dict[str, date] = {}
    for day, folders in listed.items():
        for folder in folders:
            latest[folder.parent] = max(day, latest.get(folder.parent, day))
    return latest


def ranges(days) -> list[tuple[date, date]]:
    """Consecutive days as (first, last) ranges: what one run each ingests."""
    spans: list[list[date]] = []
    for day in sorted(days):
        if spans and day == spans[-1][1] + timedelta(days=1):
            spans[-1][1] = day
        else:
            spans.append([day, day])
    return [(first, last) for first, last in spans]


@dataclass(frozen=True)
class Backlog:
    """What one run of the derived assets (``refresh.steps``) does after some received days.

    The run is recorded under the local day of the latest received day ingested (``Calendars.run_day``): the
    snapshot's horizon, the day every refresh changes.
    Each asset also records a materialization of every other day whose rows it changed: the event days the
    received days touched, their sessions' days, the snapshot days the late sessions corrected. So the UI
    shows exactly those partitions rematerialized, however far back they are, in one run.
    """

    received_days: tuple[date, ...]
    event_days: tuple[date, ...]
    latest_day: date  # the latest received day ingested: the run's partition
    inputs: str  # the input versions the derived tables are behind: part of its run key

    def describe(self) -> str:
        received = ", ".join(d.isoformat() for d in self.received_days) or "no new received day"
        days = self.event_days
        touched = (
            f"{len(days)} event days ({days[0]}..{days[-1]})"
            if len(days) > 3
            else ", ".join(d.isoformat() for d in days) or "no event day"
        )
        return f"received {received} touched {touched}; refresh after received day {self.latest_day}"


def backlog(storage: Storage, days: tuple[date, date]) -> Backlog | None:
    """The refresh the warehouse calls for: the received days whose rows ``events`` has not absorbed, the
    event days they touched, and the latest received day (else the last partition day of ``days``); None when
    every derived table is current."""
    late = steps.behind(storage)
    if not late:
        return None
    records = ledger.received(storage)
    events = next((at for at in late if at.table.name == "events"), None)
    fresh = (
        []
        if events is None
        else [r for r in records.values() if events.absorbed is None or r.raw_version > events.absorbed]
    )
    latest = max(records, default=None) or days[1]
    event_days = tuple(sorted({d for r in fresh for d in r.event_days}))
    inputs = ",".join(f"{at.source.name}@{at.latest}" for at in late)
    return Backlog(tuple(sorted(r.day for r in fresh)), event_days, latest, inputs)


@dataclass(frozen=True)
class Erasures:
    """The forget requests not done: those whose rows are still stored, and those whose files wait for a purge."""

    pending: tuple[journal.Request, ...]
    purging: tuple[journal.Request, ...]  # removed from the tables, the purge due now
    waiting: tuple[journal.Request, ...]  # removed from the tables, the purge due later (``forget_purge_hours``)
    version: int | None  # the journal's: part of its run key

    @property
    def due(self) -> bool:
        return bool(self.pending or self.purging)

    def describe(self) -> str:
        return (
            f"{len(self.pending)} forget request(s) to remove, {len(self.purging)} to purge now, "
            f"{len(self.waiting)} waiting for their purge"
        )


def erasures(storage: Storage, purge_hours: int, now: float | None = None) -> Erasures:
    """The journal's requests not done (read with delta-rs, no Spark)."""
    now = time.time() if now is None else now
    requests = journal.read_without_spark(storage)
    removed = [r for r in requests if r.state == journal.REMOVED]
    oldest = min((_epoch(r.updated_at or r.requested_at) for r in removed), default=None)
    due_now = oldest is not None and (not purge_hours or now - oldest >= purge_hours * 3600)
    return Erasures(
        tuple(r for r in requests if r.state == journal.PENDING),
        tuple(removed if due_now else ()),
        tuple(() if due_now else removed),
        journal.version(storage),
    )


def _epoch(moment) -> float:
    from datetime import UTC

    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
