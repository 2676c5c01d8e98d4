"""Sensor ticks evaluated against a real instance and real tables, and what the daemon checks of their requests."""

from __future__ import annotations

import dagster as dg

from sessions_assets.cli.runner import Runner
from sessions_assets.graph import planning
from sessions_assets.graph.resources import PipelineResource


def assert_the_daemon_accepts(sensor: str, requests: list[dg.RunRequest], defs: dg.Definitions) -> None:
    """What the daemon checks before it launches: each request runs the sensor's one job (it names no other job
    and no asset selection of its own, which the daemon would validate against that job), and names
    partitions that exist: one, or a range by tags, within the job's partitions."""
    [target] = defs.resolve_sensor_def(sensor).targets
    job = defs.resolve_job_def(target.job_name)
    keys = set(job.partitions_def.get_partition_keys())
    for request in requests:
        assert (request.job_name, request.asset_selection) == (None, None), request
        named = (
            [request.partition_key]
            if request.partition_key
            else [request.tags[planning.RANGE_START], request.tags[planning.RANGE_END]]
        )
        assert all(named) and set(named) <= keys, named


def days_requested(request: dg.RunRequest) -> tuple[str, str]:
    """The received days a request ingests (a ``process_job`` run names them in a tag), else its partitions."""
    if planning.INGEST_TAG in request.tags:
        first, last = planning.ingest_range(request.tags)[0], planning.ingest_range(request.tags)[-1]
        return first.isoformat(), last.isoformat()
    if request.partition_key:
        return request.partition_key, request.partition_key
    return request.tags[planning.RANGE_START], request.tags[planning.RANGE_END]


def tick(sensor: str, runner: Runner, data_root, cursor: str | None = None, pipeline: PipelineResource | None = None):
    """One evaluation of the runner's sensor ``sensor`` from ``cursor``, with the pipeline's settings for
    ``data_root`` (or ``pipeline``)."""
    pipeline = pipeline or PipelineResource(data_root=str(data_root))
    resources = {runner.names.pipeline: pipeline}
    context = dg.build_sensor_context(instance=runner.instance, resources=resources, cursor=cursor)
    return runner.defs.resolve_sensor_def(sensor)(context)
