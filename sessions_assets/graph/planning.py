"""What the runs are doing about what is due, and the runs to request: shared by the sensors, ``run`` and ``status``.

What is due is read from the warehouse (``warehouse/pending.py``). The instance says only what is happening to
that work: which runs are in flight, and which failed. A day or a refresh whose latest runs failed waits before it
is requested again, longer after each failure (``BACKOFF_SECONDS`` doubling, at most ``MAX_BACKOFF_SECONDS``), so a
bad store does not loop hot.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta

import dagster as dg

from sessions_assets.graph.names import Names
from sessions_assets.graph.partitions import RANGE_END, RANGE_START
from sessions_assets.warehouse import pending

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
    (one, or a range: an ``ingest_job`` run, a backfill of the ingest assets)."""
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
        """A run of a job that ingests, or a UI backfill of the ingest assets."""
        return (
            run.job_name == self.names.of("ingest_job")
            or INGEST_TAG in run.tags
            or self.names.key("raw_events") in (run.asset_selection or ())
        )

    def _refreshes(self, run: dg.DagsterRun) -> bool:
        return run.job_name in self.names.refreshing or self.names.key("events") in (run.asset_selection or ())


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
        for first, last in pending.ranges(self.days):
            days = {str(d): f for d, f in self.days.items() if first <= d <= last}
            digest = hashlib.sha256(json.dumps(days, sort_keys=True).encode()).hexdigest()[:16]
            failed = sorted(a.failed_run for d, a in self.attempts.items() if first <= d <= last and a.failed_run)
            found.append((first, last, f"ingest:{first}..{last}:{digest}:{self.recorded}:{','.join(failed) or '-'}"))
        return found


def ready(arrivals: pending.Arrivals, history: History, now: float | None = None) -> Ready:
    now = time.time() if now is None else now
    days, attempts = {}, {}
    for day, fingerprint in arrivals.due.items():
        attempts[day] = history.ingest(day)
        if not (attempts[day].in_flight or attempts[day].waiting(now)):
            days[day] = fingerprint
    return Ready(days, attempts, arrivals.recorded)


def refresh_tags(backlog: pending.Backlog) -> dict[str, str]:
    """A refresh run's tags: the received days it absorbs."""
    return {RECEIVED_DAYS_TAG: ",".join(d.isoformat() for d in backlog.received_days)}


def refresh_key(backlog: pending.Backlog, attempts: Attempts) -> str:
    return f"refresh:{backlog.inputs}:{attempts.failed_run or '-'}"


def forget_key(erasures: pending.Erasures, attempts: Attempts) -> str:
    return f"forget:{erasures.version}:{attempts.failed_run or '-'}"
