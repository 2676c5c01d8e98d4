"""Runs the asset graph in-process through Dagster: what ``sessions-assets run`` and the tests drive.

Each step is a real Dagster run (``materialize``) recorded in the given instance, with partition ranges
passed the way a single-run backfill passes them, so the assets cannot tell this from a UI backfill.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from datetime import date

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from sessions_assets import ingest
from sessions_assets.affected import RebuildPlan
from sessions_assets.assets import ALL_ASSETS
from sessions_assets.config import PipelineSettings
from sessions_assets.sensors import partition_map_records, plan_for
from sessions_assets.tables import Warehouse

ASSET_NAMES = {key.to_user_string() for assets_def in ALL_ASSETS for key in assets_def.keys}
# Runs log to the instance (visible in the UI); the console only hears about problems.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
# Who launched a run, so that a later ``run`` can tell a crashed run from one still going.
LAUNCHER_TAG, HOST_TAG, PID_TAG = "sessions/launcher", "sessions/host", "sessions/pid"
LAUNCHER_TAGS = {LAUNCHER_TAG: "sessions-assets", HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_crashed_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark runs of this host whose process died (killed, power loss) as failed and free their pool slots.

    An in-process run that dies cannot report its own end: it would stay "started" in the UI and keep its
    concurrency slot, blocking every later run of the pool. Returns the run ids recovered.
    """
    in_flight = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED]
    runs = instance.get_runs(
        filters=dg.RunsFilter(statuses=in_flight, tags={LAUNCHER_TAG: "sessions-assets", HOST_TAG: socket.gethostname()})
    )
    recovered = []
    for run in runs:
        if not _alive(int(run.tags.get(PID_TAG, "0"))):
            instance.report_run_failed(run, message=f"its process ({run.tags.get(PID_TAG)}) is gone")
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
            recovered.append(run.run_id)
    return recovered


def recorded_fingerprint(instance: dg.DagsterInstance, received_day: date) -> str | None:
    """The fingerprint of the landing files that the last ``raw_events`` materialization read."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("raw_events"), asset_partitions=[received_day.isoformat()]),
        limit=1,
    ).records
    if not records:
        return None
    value = records[0].asset_materialization.metadata.get(ingest.LANDING_FINGERPRINT)
    return value.value if value is not None else None


def pending_received_days(instance: dg.DagsterInstance, settings: PipelineSettings) -> list[date]:
    """Received days that are new or whose files changed since they were last ingested."""
    return [
        day
        for day in ingest.landing_days(settings)
        if recorded_fingerprint(instance, day) != ingest.landing_fingerprint(settings, day)
    ]


@dataclass
class DayReport:
    received_day: date
    plan: RebuildPlan
    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def __str__(self) -> str:
        rows = ", ".join(f"{k} {v}" for k, v in self.rows.items())
        return f"{self.plan.describe()} | rows: {rows} | {self.seconds:.1f}s"


class Runner:
    """Materializes partitions in-process with the project's assets and the given resources."""

    def __init__(self, instance: dg.DagsterInstance, resources: dict):
        self.instance = instance
        self.resources = resources
        self.settings: PipelineSettings = resources["settings"]

    def materialize(self, asset: str, first: date, last: date | None = None) -> dg.ExecuteInProcessResult:
        last = last or first
        if first == last:
            kwargs = {"partition_key": first.isoformat(), "tags": dict(LAUNCHER_TAGS)}
        else:
            kwargs = {
                "tags": {
                    **LAUNCHER_TAGS,
                    ASSET_PARTITION_RANGE_START_TAG: first.isoformat(),
                    ASSET_PARTITION_RANGE_END_TAG: last.isoformat(),
                }
            }
        return dg.materialize(
            ALL_ASSETS,
            run_config=QUIET,
            selection=dg.AssetSelection.assets(asset).required_multi_asset_neighbors(),
            instance=self.instance,
            resources=self.resources,
            **kwargs,
        )

    @property
    def warehouse(self) -> Warehouse:
        return Warehouse(self.resources["spark"].spark_session, self.settings)

    def apply(self, plan: RebuildPlan) -> dict[str, int]:
        """Materialize the plan's partitions in dependency order; return rows reported per asset."""
        rows: dict[str, int] = {}
        for asset, ranges in (("events", plan.events), ("sessions", plan.sessions), ("daily_snapshot", plan.snapshot)):
            for first, last in ranges if asset in ASSET_NAMES else ():
                result = self.materialize(asset, first, last)
                # A range run reports one materialization per partition, all with the run's metadata.
                metadata = result.get_asset_materialization_events()[0].materialization.metadata
                for name in ("rows", "sessions_written", "days_rewritten"):
                    if name in metadata:
                        rows[asset] = rows.get(asset, 0) + int(metadata[name].value)
        return rows

    def process(self, received_day: date) -> DayReport:
        """Ingest one received day and rebuild exactly the partitions it affected."""
        started = time.monotonic()
        self.materialize("raw_events", received_day)
        records = partition_map_records(self.instance, partition=received_day.isoformat())
        plan = plan_for(self.instance, records, with_snapshot="daily_snapshot" in ASSET_NAMES)
        report = DayReport(received_day, plan)
        report.rows = self.apply(plan)
        report.seconds = time.monotonic() - started
        return report
