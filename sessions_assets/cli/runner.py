"""Runs the project's jobs in this process through Dagster: what ``sessions-assets run`` and the tests drive.

Each step is a real run of a real job, recorded in the given instance (the UI shows it), planned by the
same functions as the sensors (``defs/planning.py``), with the partition range a sensor's run would have.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import dagster as dg

from sessions_assets import definitions
from sessions_assets.defs import planning
from sessions_assets.defs.partitions import RANGE_END, RANGE_START
from sessions_assets.warehouse.storage import Storage

REFRESHED = ("events", "sessions", "daily_snapshot")
# Runs log to the instance (the UI shows them); the console hears only about problems.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def open_instance(data_root: str) -> dg.DagsterInstance:
    """``$DAGSTER_HOME``'s instance, or one in ``<data root>/dagster_home`` for a local data root. Its
    storage is created under a file lock: two first runs at once would race in SQLite's schema set-up."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        if "://" in data_root and not data_root.startswith("file:"):
            raise SystemExit(f"{data_root} is not a local path: set DAGSTER_HOME to where Dagster keeps its runs.")
        home = str(Path(data_root.removeprefix("file:")) / "dagster_home")
    Path(home).mkdir(parents=True, exist_ok=True)
    with open(Path(home) / ".instance.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return dg.DagsterInstance.from_config(home)


class RunFailed(Exception):
    """A run failed; the message says which step and why, in one line."""


@dataclass
class Step:
    run_id: str
    metadata: dict[str, dict]  # asset -> its materialization metadata (plain values)


class Runner:
    """The project's definitions with the given resources, run in-process against ``instance``."""

    def __init__(self, instance: dg.DagsterInstance, resources: dict):
        self.instance = instance
        loaded = definitions.defs()
        self.defs = dg.Definitions(
            assets=loaded.assets, asset_checks=loaded.asset_checks, jobs=loaded.jobs, sensors=loaded.sensors,
            schedules=loaded.schedules, executor=loaded.executor, resources=resources,
        )  # fmt: skip
        self.storage = Storage(resources["pipeline"].data_root)

    def _execute(self, job: str, tags: dict, run_config: dict | None = None, **kwargs) -> Step:
        result = self.defs.resolve_job_def(job).execute_in_process(
            instance=self.instance,
            tags=tags,
            run_config={**QUIET, **(run_config or {})},
            raise_on_error=False,
            **kwargs,
        )
        if not result.success:
            failures = [e for e in result.all_events if e.is_step_failure or e.is_failure]
            reason = failures[0].message if failures else "failed"
            raise RunFailed(f"{job} failed ({result.run_id}): {reason}")
        metadata = {}
        for event in result.get_asset_materialization_events():
            materialization = event.step_materialization_data.materialization
            metadata[materialization.asset_key.to_user_string()] = {
                k: v.value for k, v in materialization.metadata.items()
            }
        return Step(result.run_id, metadata)

    def ingest(self, day: date) -> Step:
        return self._execute("ingest_job", {}, partition_key=day.isoformat())

    def refresh(
        self, due: planning.RefreshDue | None = None, rebuild: tuple[date, date, set[str]] | None = None
    ) -> Step:
        """The refresh a sensor would launch (``due``), or a repair of days ``first..last`` of some tables."""
        if rebuild is not None:
            first, last, tables = rebuild
            tags = {RANGE_START: first.isoformat(), RANGE_END: last.isoformat()}
            config = {"ops": {name: {"config": {"rebuild": True}} for name in tables}}
            return self._execute(planning.REFRESH_JOB, tags, config)
        return self._execute(planning.REFRESH_JOB, due.tags, partition_key=due.refresh.partition_key)

    def maintain(self, retain_hours: int | None = None) -> Step:
        """Compact every table, and vacuum it when no refresh is due (``defs/maintenance.py``)."""
        config = {} if retain_hours is None else {"retain_hours": retain_hours}
        return self._execute("table_maintenance", {}, {"ops": {"compact_and_vacuum": {"config": config}}})

    def process(self) -> tuple[list[tuple[date, Step]], Step | None]:
        """Ingest every received day that is new or changed, oldest first, then refresh what they touched."""
        ingested = [(day, self.ingest(day)) for day, _ in planning.landing(self.instance, self.storage).due]
        due = planning.refresh_due(self.instance)
        return ingested, (self.refresh(due) if due is not None else None)
