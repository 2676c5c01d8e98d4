"""The code location: assembles assets, checks, sensors, schedules and resources; no logic lives here."""

from __future__ import annotations

import dagster as dg

from sessions_assets import assets, checks, sensors
from sessions_assets.config import PipelineSettings, data_root_from_env, start_date_from_env
from sessions_assets.resources import spark_resource


def build_resources(data_root: str | None = None, **spark_overrides) -> dict:
    """Resources for a deployment (from the environment) or a test (``data_root`` given)."""
    return {
        "spark": spark_resource(**spark_overrides),
        "settings": PipelineSettings(data_root=data_root or data_root_from_env(), start_date=start_date_from_env()),
    }


def build_definitions(resources: dict) -> dg.Definitions:
    return dg.Definitions(
        assets=assets.ALL_ASSETS,
        asset_checks=checks.SESSION_CHECKS,
        jobs=[sensors.ingest_job, checks.checks_job],
        sensors=[sensors.landing_sensor, sensors.late_data_sensor],
        schedules=[sensors.daily_ingest_schedule, checks.daily_checks_schedule],
        resources=resources,
    )


defs = build_definitions(build_resources())
