"""What is due: one plan shared by the sensors, ``run`` and ``status``.

What the tables hold is read from the warehouse, never from the Dagster instance, so a new or wiped instance
over an existing warehouse sees the truth:

- a received day is due for ingest when its landing folder's fingerprint differs from the one its latest
  ingest recorded in ``received_days``;
- a refresh is due when a derived table has not absorbed every change of its input (``ledger.behind``).

The instance says only what is happening to that work: which runs are in flight, and which failed. A day
or a refresh whose latest runs failed waits before it is requested again, longer after each failure
(``BACKOFF_SECONDS`` doubling, at most ``MAX_BACKOFF_SECONDS``), so a bad store does not loop hot.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date, timedelta

import dagster as dg

from sessions_assets.graph.names import Names
from sessions_assets.graph.partitions import RANGE_END, RANGE_START
from sessions_assets.warehouse import journal, ledger
from sessions_assets.warehouse.delta import DeltaLog
from sessions_assets.warehouse.refresh import steps
from sessions_assets.warehouse.storage import LandingFolder, Storage
from sessions_assets.warehouse.tables import RECEIVED_DAYS

PARTITION = "dagster/partition"
RECEIVED_DAYS_TAG = "sessions/received_days"  # a refresh run's tag: the received days it absorbs
# A process_job run's tag: the received days (``first..last``) it ingests before it refreshes. Its partitions are
# local days (those it is recorded under), so the received days it covers are read from here.
INGEST_TAG = "sessions/ingest"
IN_FLIGHT = (
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
)
FAILED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
BACKOFF_SECONDS, MAX_BACKOFF_SECONDS = 60, 3600
RECENT_RUNS = 200
# A run still "in flight" after this long is taken for dead (a killed ``sessions-assets`` process leaves its
# in-process run started forever; run monitoring cannot see it) and no longer holds its work.
STALE_SECONDS = 6 * 3600


@dataclass(frozen=True)
class Attempts:
    """What the latest runs did to one piece of work (a received day, or the refresh)."""

    in_flight: bool = False
    failures: int = 0  # failed runs since the last success (the daemon's retries included)
    last_failure: float | None = None  # when the latest of them ended (epoch seconds)
    error: str | None = None  # its first failure, in one line
    failed_run: str | None = None  # the latest failed run's id: part of the next request's run key

    def waiting(self, now: float) -> float:
        """Seconds left before the work may be requested again (0: now)."""
        if not self.failures or self.last_failure is None:
            return 0.0
        backoff = min(BACKOFF_SECONDS * 2 ** (self.failures - 1), MAX_BACKOFF_SECONDS)
        return max(0.0, self.last_failure + backoff - now)


def _run_days(run: dg.DagsterRun) -> list[date]:
    """The received days a run ingests: those its ``INGEST_TAG`` names (a ``process_job`` run), else its partitions
    (one, or a range: an ``ingest_job`` run, a backfill of the landing assets)."""
    if INGEST_TAG in run.tags:
        return ingest_range(run.tags)
    if PARTITION in run.tags:
        return [date.fromisoformat(run.tags[PARTITION])]
    if RANGE_START in run.tags and RANGE_END in run.tags:
        return days_between(date.fromisoformat(run.tags[RANGE_START]), date.fromisoformat(run.tags[RANGE_END]))
    return []


def days_between(first: date, last: date) -> list[date]:
    """Every day from ``first`` to ``last``."""
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def ingest_tags(first: date, last: date) -> dict[str, str]:
    """The tag that makes a ``process_job`` run ingest received days ``first..last`` first."""
    return {INGEST_TAG: f"{first.isoformat()}..{last.isoformat()}"}


def ingest_range(tags: Mapping[str, str]) -> list[date]:
    """The received days a run's tags ask it to ingest first (none: a refresh alone)."""
    if INGEST_TAG not in tags:
        return []
    first, _, last = tags[INGEST_TAG].partition("..")
    return days_between(date.fromisoformat(first), date.fromisoformat(last or first))


def _failure(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str:
    """The first step failure's message (the assets raise one line), else the run's."""
    records = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE, limit=1).records
    for record in records:
        error = record.event_log_entry.dagster_event.event_specific_data.error
        if error is not None:
            return error.message.strip().splitlines()[0]
    return f"run {run.run_id} failed"


@dataclass
class History:
    """The recent runs of one instance of the graph (``names``) that ingest received days or refresh the derived
    tables, newest first."""

    instance: dg.DagsterInstance
    names: Names
    runs: list[tuple[dg.DagsterRun, float | None]] = field(default_factory=list)  # with its end time

    @classmethod
    def read(cls, instance: dg.DagsterInstance, names: Names, now: float | None = None) -> History:
        """The recent runs, less those in flight for longer than ``STALE_SECONDS`` (dead)."""
        now = time.time() if now is None else now
        runs = []
        for r in instance.get_run_records(limit=RECENT_RUNS):
            began = r.start_time or r.create_timestamp.timestamp()
            if r.dagster_run.status in IN_FLIGHT and now - began > STALE_SECONDS:
                continue
            runs.append((r.dagster_run, r.end_time))
        return cls(instance, names, runs)

    def _attempts(self, covers) -> Attempts:
        in_flight, failures, last, error, failed_run = False, 0, None, None, None
        for run, ended in self.runs:
            if not covers(run):
                continue
            if run.status in IN_FLIGHT:
                in_flight = True
            elif run.status == dg.DagsterRunStatus.SUCCESS:
                break
            elif run.status in FAILED:
                failures += 1
                if last is None:
                    last, error, failed_run = ended, _failure(self.instance, run), run.run_id
        return Attempts(in_flight, failures, last, error, failed_run)

    def ingest(self, day: date) -> Attempts:
        return self._attempts(lambda run: self._ingests(run) and day in _run_days(run))

    def refresh(self) -> Attempts:
        return self._attempts(self._refreshes)

    def forget(self) -> Attempts:
        return self._attempts(lambda run: run.job_name in self.names.forgetting)

    def ingesting(self) -> bool:
        return any(run.status in IN_FLIGHT and self._ingests(run) for run, _ in self.runs)

    def _ingests(self, run: dg.DagsterRun) -> bool:
        """A run of a job that ingests, or a UI backfill of the landing assets."""
        return (
            run.job_name == self.names.of("ingest_job")
            or INGEST_TAG in run.tags
            or self.names.key("raw_events") in (run.asset_selection or ())
        )

    def _refreshes(self, run: dg.DagsterRun) -> bool:
        return run.job_name in self.names.refreshing or self.names.key("events") in (run.asset_selection or ())


@dataclass(frozen=True)
class Landing:
    """The landing zone against what the warehouse recorded of each received day."""

    due: dict[date, str]  # received day -> its folder's fingerprint now, oldest first
    ignored: list[LandingFolder]  # folders that are not a received day the partitions hold
    recorded: int | None = None  # the version of received_days read: part of the run keys
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


def landing(storage: Storage, days: tuple[date, date], glance: Glance | None = None) -> Landing:
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
    return Landing(due, ignored, recorded, tuple(looked), _latest(listed))


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


def range_tags(first: date, last: date) -> dict[str, str]:
    """The tags that make a run cover ``first..last`` (what a single-run backfill sets)."""
    return {RANGE_START: first.isoformat(), RANGE_END: last.isoformat()}


@dataclass(frozen=True)
class Ready:
    """The received days a tick may request now, and those that wait (in flight, or backing off)."""

    days: dict[date, str]  # received day -> fingerprint
    attempts: dict[date, Attempts]  # every due day's recent runs
    recorded: int | None = None  # the version of received_days the plan read

    @property
    def waiting(self) -> dict[date, Attempts]:
        return {day: a for day, a in self.attempts.items() if day not in self.days}

    def requests(self) -> list[tuple[date, date, str]]:
        """(first, last, run key) of one run per range of consecutive ready days. The key names the days'
        fingerprints, the record it was planned against (a folder whose fingerprint returns to an earlier value is
        due again after another ingest) and the latest failed run: a failed range is requested again, with a new
        key, after its backoff."""
        found = []
        for first, last in ranges(self.days):
            days = {str(d): f for d, f in self.days.items() if first <= d <= last}
            digest = hashlib.sha256(json.dumps(days, sort_keys=True).encode()).hexdigest()[:16]
            failed = sorted(a.failed_run for d, a in self.attempts.items() if first <= d <= last and a.failed_run)
            found.append((first, last, f"ingest:{first}..{last}:{digest}:{self.recorded}:{','.join(failed) or '-'}"))
        return found


def ready(landing: Landing, history: History, now: float | None = None) -> Ready:
    now = time.time() if now is None else now
    days, attempts = {}, {}
    for day, fingerprint in landing.due.items():
        attempts[day] = history.ingest(day)
        if not (attempts[day].in_flight or attempts[day].waiting(now)):
            days[day] = fingerprint
    return Ready(days, attempts, landing.recorded)


@dataclass(frozen=True)
class Backlog:
    """What one run of the derived assets (``names.DERIVED``) does after some received days.

    The run is recorded under the local day of the latest received day ingested (``Calendars.run_day``): the
    snapshot's horizon, the day every refresh changes.
    Each asset also records a materialization of every other day whose rows it changed: the event days the
    received days touched, their sessions' days, the snapshot days the late sessions corrected. So the UI
    shows exactly those partitions rematerialized, however far back they are, in one run.
    """

    received_days: tuple[date, ...]
    event_days: tuple[date, ...]
    latest_day: date  # the latest received day ingested: the run's partition
    inputs: str  # the input versions the derived tables are behind: part of the run key

    @property
    def tags(self) -> dict[str, str]:
        return {RECEIVED_DAYS_TAG: ",".join(d.isoformat() for d in self.received_days)}

    def run_key(self, attempts: Attempts) -> str:
        return f"refresh:{self.inputs}:{attempts.failed_run or '-'}"

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
    version: int | None  # the journal's: part of the run key

    @property
    def due(self) -> bool:
        return bool(self.pending or self.purging)

    def run_key(self, attempts: Attempts) -> str:
        return f"forget:{self.version}:{attempts.failed_run or '-'}"

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
