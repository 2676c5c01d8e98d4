"""Sensor ticks evaluated against a real instance and real tables, and what the daemon checks of their requests."""

from __future__ import annotations

import dagster as dg

from sessions_assets.cli.runner import Runner
from sessions_assets.defs import planning
from sessions_assets.defs.partitions import daily
from sessions_assets.defs.resources import PipelineResource


def assert_the_daemon_accepts(sensor: dg.SensorDefinition, requests: list[dg.RunRequest], defs: dg.Definitions) -> None:
    """What the daemon checks before it launches: each request targets the sensor's job, names partitions
    that exist (one, or a range by tags), and selects nothing outside the job."""
    [target] = sensor.targets
    job = defs.resolve_job_def(target.job_name)
    keys = set(daily.get_partition_keys())
    for request in requests:
        assert request.job_name in (None, target.job_name)
        named = [request.partition_key] if request.partition_key else [
            request.tags[planning.RANGE_START], request.tags[planning.RANGE_END]]  # fmt: skip
        assert set(named) <= keys, named
        assert set(request.asset_selection or []) <= set(job.asset_layer.executable_asset_keys)


def days_requested(request: dg.RunRequest) -> tuple[str, str]:
    if request.partition_key:
        return request.partition_key, request.partition_key
    return request.tags[planning.RANGE_START], request.tags[planning.RANGE_END]


def tick(sensor, runner: Runner, data_root, cursor: str | None = None):
    context = dg.build_sensor_context(
        instance=runner.instance, resources={"pipeline": PipelineResource(data_root=str(data_root))}, cursor=cursor
    )
    return sensor(context)
