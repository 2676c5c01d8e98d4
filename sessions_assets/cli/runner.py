"""Runs the project's jobs in this process through Dagster: what ``sessions-assets run`` and the tests drive.

Each step is a real run of a real job of one instance of the graph, built from its settings as the code location
builds it (``graph.build``), recorded in the given Dagster instance (the UI shows it), planned by the same
functions as the sensors (``graph/planning.py``), with the partition range a sensor's run would have.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import dagster as dg

from sessions_assets.graph import build, names_of, planning
from sessions_assets.graph.forget import FORGET_JOB, FORGET_OP
from sessions_assets.graph.partitions import bounds, calendars
from sessions_assets.graph.sensors import local_partitions
from sessions_assets.settings import Settings
from sessions_assets.warehouse import pending
from sessions_assets.warehouse.storage import Storage

# Runs log to the instance (the UI shows them); the console hears only about problems.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


class RunFailed(Exception):
    """A run failed; the message says which step and why, in one line."""


@dataclass
class Step:
    run_id: str
    metadata: dict[str, dict]  # asset (by name, without the key prefix) -> its materialization metadata


class Runner:
    """The jobs of the instance of ``settings`` (a data root and the rules) named by ``key_prefix``, run in-process
    against ``instance``; Spark from ``SPARK_*`` with ``spark_conf`` over them, attached to ``remote`` (default
    ``SPARK_REMOTE``)."""

    def __init__(
        self,
        instance: dg.DagsterInstance,
        settings: Settings,
        key_prefix: str = "",
        remote: str | dg.EnvVar | None = None,
        spark_conf: dict[str, str] | None = None,
    ):
        self.instance, self.settings = instance, settings
        self.defs = build(settings, key_prefix, spark_remote=remote, spark_conf=spark_conf)
        self.names = names_of(settings, key_prefix)
        self.calendars = calendars(settings)
        self.storage = Storage.of(settings)

    @property
    def resources(self) -> dict:
        """The instance's resources, by key."""
        return dict(self.defs.resources or {})

    def bounds(self):
        """The first and last received days of the instance's partitions now."""
        return bounds(self.calendars.received)

    def _execute(self, job: str, partitions: dict, run_config: dict | None = None) -> Step:
        job = self.names.of(job)
        result = self.defs.resolve_job_def(job).execute_in_process(
            instance=self.instance,
            run_config={**QUIET, **(run_config or {})},
            raise_on_error=False,
            **partitions,
        )
        if not result.success:
            failures = [e for e in result.all_events if e.is_step_failure]
            reason = failures[0].event_specific_data.error.message.strip() if failures else "failed"
            raise RunFailed(f"{job} failed ({result.run_id}): {reason.splitlines()[0]}")
        metadata = {}
        for event in result.get_asset_materialization_events():
            materialization = event.step_materialization_data.materialization
            metadata[materialization.asset_key.path[-1]] = {k: v.value for k, v in materialization.metadata.items()}
        if job == self.names.of(FORGET_JOB):
            metadata["forget"] = result.output_for_node(self.names.of(FORGET_OP))
        return Step(result.run_id, metadata)

    def ingest(self, first: date, last: date | None = None) -> Step:
        """Ingest received days ``first..last`` (one run, one commit per table)."""
        return self._execute("ingest_job", _partitions(first, last))

    def ingest_and_refresh(self, first: date, last: date | None = None) -> Step:
        """Ingest received days ``first..last`` and refresh what they touched, in one run (what the landing
        sensor launches), recorded under their local days."""
        last = last or first
        local = local_partitions(self.calendars, first, last)
        tags = {**planning.ingest_tags(first, last), **local.pop("tags", {})}
        return self._execute("process_job", {**local, "tags": tags})

    def reingest(self, first: date, last: date | None = None, folders: bool = False) -> Step:
        """Ingest received days ``first..last`` again from the lines the tables hold (one run); ``folders``: from
        every file their folders hold now, replacing the days whole."""
        chosen = {"whole_days": True} if folders else {"stored_lines": True}
        config = {"ops": {self.names.of("ingest"): {"config": chosen}}}
        return self._execute("ingest_job", _partitions(first, last), config)

    def refresh(self, due: pending.Backlog) -> Step:
        """The refresh the late-data sensor would launch."""
        day = self.calendars.run_day(due.latest_day).isoformat()
        return self._execute("refresh_job", {"tags": planning.refresh_tags(due), "partition_key": day})

    def repair(self, first: date, last: date, tables: set[str]) -> Step:
        """Recompute local days ``first..last`` of some derived tables whole from their inputs."""
        config = {"ops": {self.names.op(name): {"config": {"rebuild": True}} for name in tables}}
        return self._execute("refresh_job", {"tags": planning.range_tags(first, last)}, config)

    def maintain(self, retain_hours: int | None = None) -> Step:
        """Compact every table, and vacuum it when no refresh is due (``graph/maintenance.py``)."""
        config = {} if retain_hours is None else {"retain_hours": retain_hours}
        op = self.names.of("compact_and_vacuum")
        return self._execute("table_maintenance", {}, {"ops": {op: {"config": config}}})

    def forget(self, user_hashes: list[str] | tuple = (), landing: str = "skip") -> Step:
        """Take a request to forget the users of ``user_hashes`` (keyed hashes), then resume every request not done
        (``graph/forget.py``); ``landing``: ``list`` or ``rewrite`` the landing files holding their lines."""
        config = {"user_hashes": list(user_hashes), "landing": landing}
        return self._execute(FORGET_JOB, {}, {"ops": {self.names.of(FORGET_OP): {"config": config}}})

    def process(self) -> tuple[list[Step], Step | None]:
        """What the sensors would do now: one ``process_job`` run per range of due received days, or a
        refresh alone when only that is due, then an erasure if a forget request is not done. Returns the runs,
        and the last one that refreshed."""
        due = pending.arrivals(self.storage, self.bounds()).due
        steps = [self.ingest_and_refresh(first, last) for first, last in pending.ranges(due)]
        if not steps:
            refresh = pending.backlog(self.storage, self.bounds())
            steps = [self.refresh(refresh)] if refresh is not None else []
        refreshed = steps[-1] if steps else None
        if pending.erasures(self.storage, self.settings.forget_purge_hours).due:
            steps.append(self.forget())
        return steps, refreshed


def _partitions(first: date, last: date | None) -> dict:
    """How ``execute_in_process`` is given one day, or a range (the tags a single-run backfill sets)."""
    if last is None or last == first:
        return {"partition_key": first.isoformat()}
    return {"tags": planning.range_tags(first, last)}
