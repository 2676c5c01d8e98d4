"""Runs the asset graph in-process through Dagster: what ``sessions-assets run`` and the tests drive.

Each step is a real Dagster run (``materialize``) recorded in the given instance, with partition ranges
passed the way a single-run backfill passes them, so the assets cannot tell this from a UI backfill.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import date
import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from pyspark.sql import functions as F

from sessions_assets import ingest
from sessions_assets.affected import RebuildPlan, plan_rebuild
from sessions_assets.config import PipelineSettings, max_days_per_run_from_env
from sessions_assets.definitions import ALL_ASSETS
from sessions_assets.partitions import daily_partitions
from sessions_assets.tables import PARTITION_MAP, Warehouse

def landing_days(settings: PipelineSettings) -> list[date]:
    """Received days present in the landing zone, oldest first."""
    prefix = "received_date="
    return sorted(
        date.fromisoformat(p.name[len(prefix) :])
        for p in settings.landing.glob(f"{prefix}*")
        if p.is_dir()
    )


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
    return [d for d in landing_days(settings) if recorded_fingerprint(instance, d) != ingest.landing_fingerprint(settings, d)]


def touched_event_days(wh: Warehouse, received_days: list[date]) -> dict[date, set[date]]:
    """The recorded partition map of ``received_days``."""
    touched: dict[date, set[date]] = {d: set() for d in received_days}
    if received_days:
        rows = wh.read(PARTITION_MAP).where(F.col("received_date").isin(received_days))
        for row in rows.select("received_date", "event_date").collect():
            touched[row.received_date].add(row.event_date)
    return touched


def ingested_horizon(wh: Warehouse) -> date | None:
    """The latest received day ingested so far: the data's horizon, which the snapshot runs up to."""
    return wh.read(PARTITION_MAP).agg(F.max("received_date")).head()[0]


def partition_bounds() -> tuple[date, date]:
    keys = daily_partitions.get_partition_keys()
    return date.fromisoformat(keys[0]), date.fromisoformat(keys[-1])


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
            kwargs = {"partition_key": first.isoformat(), "tags": {}}
        else:
            kwargs = {
                "tags": {
                    ASSET_PARTITION_RANGE_START_TAG: first.isoformat(),
                    ASSET_PARTITION_RANGE_END_TAG: last.isoformat(),
                }
            }
        return dg.materialize(
            ALL_ASSETS,
            selection=dg.AssetSelection.assets(asset).required_multi_asset_neighbors(),
            instance=self.instance, resources=self.resources, **kwargs
        )

    @property
    def warehouse(self) -> Warehouse:
        return Warehouse(self.resources["spark"].spark_session, self.settings)

    def apply(self, plan: RebuildPlan) -> dict[str, int]:
        """Materialize the plan's partitions in dependency order; return rows reported per asset."""
        rows: dict[str, int] = {}
        for asset, ranges in (("events", plan.events), ("sessions", plan.sessions), ("daily_snapshot", plan.snapshot)):
            if asset not in {k.to_user_string() for a in ALL_ASSETS for k in a.keys}:
                continue
            for first, last in ranges:
                result = self.materialize(asset, first, last)
                for event in result.get_asset_materialization_events():
                    metadata = event.materialization.metadata
                    for name in ("rows", "sessions_written", "days_rewritten"):
                        if name in metadata:
                            rows[asset] = rows.get(asset, 0) + int(metadata[name].value)
        return rows

    def process(self, received_day: date) -> DayReport:
        """Ingest one received day and rebuild exactly the partitions it affected."""
        started = time.monotonic()
        self.materialize("raw_events", received_day)
        wh = self.warehouse
        plan = plan_rebuild(
            touched_event_days(wh, [received_day]),
            ingested_horizon(wh) or received_day,
            partition_bounds(),
            max_days_per_run_from_env(),
        )
        report = DayReport(received_day, plan)
        report.rows = self.apply(plan)
        report.seconds = time.monotonic() - started
        return report
