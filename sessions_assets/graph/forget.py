"""Forgetting persons: ``forget_job`` takes a request (keyed hashes only) and resumes every request not done;
``forget_sensor`` launches it when the journal holds one (a run killed half-way, a late link, a purge due).

The job takes turns with the instance's refreshes (its refresh tag): no refresh or maintenance runs beside an erasure, whose
purge vacuums with no retention. Ingests beside it re-read the journal before their first commit and after their
last (``warehouse/ingest.py``). Its run config, logs and metadata hold hashes and counts, never an id.
"""

import time
from typing import Literal

import dagster as dg
from pydantic import Field

from sessions_assets.graph import planning
from sessions_assets.graph.failures import run_step
from sessions_assets.graph.names import Names
from sessions_assets.graph.partitions import Calendars
from sessions_assets.graph.resources import pipeline_of, spark_of
from sessions_assets.graph.sensors import INTERVAL_SECONDS
from sessions_assets.warehouse import forget, journal, pending

# The job and its op, before an instance's prefix (``Names.of``).
FORGET_JOB, FORGET_OP = "forget_job", "forget_persons"


class ForgetConfig(dg.Config):
    user_hashes: list[str] = Field(
        default=[],
        description="The userIds to forget, each as its keyed hash (HMAC-SHA-256 under the deployment's key, 64 hex "
        "digits): `sessions-assets forget --hash-only --user-id U` prints it. Empty: resume the requests not done.",
    )
    landing: Literal["skip", "list", "rewrite"] = Field(
        default="skip",
        description="The landing files holding forgotten persons' lines (the collector's): list them, rewrite them "
        "without those lines, or neither (reading the whole landing zone costs a full read of it).",
    )


def _summary(done: forget.Erasure, found: forget.LandingScan | None) -> dict:
    summary = {
        "requests_taken": done.taken,
        "requests_removed": done.requests_removed,
        "requests_done": done.requests_done,
        "requests_waiting_for_purge": done.waiting,
        "passes": done.passes,
        "rows_removed": {table: n for table, n in sorted(done.removed.items()) if n},
        "tables_purged": done.purged,
        "logs_truncated": done.logs_truncated,
    }
    if found is not None:
        summary |= {
            "landing_files_holding_lines": sorted(found.files),
            "landing_lines": sum(found.files.values()),
            "landing_files_rewritten": found.rewritten,
            "landing_files_not_rewritten": found.unreadable,
        }
    return summary


def definitions(names: Names, calendars: Calendars) -> dg.Definitions:
    @dg.op(
        name=names.of(FORGET_OP),
        out=dg.Out(dict),
        description="Take a forget request, then remove and purge every request not done.",
        required_resource_keys={names.spark, names.pipeline},
    )
    def forget_persons(context: dg.OpExecutionContext, config: ForgetConfig):
        pipeline = pipeline_of(context, names)

        def work() -> dict:
            wh = pipeline.warehouse(spark_of(context, names))
            key = journal.key_for(wh, pipeline)
            if config.user_hashes:
                journal.take(wh, key, config.user_hashes, context.run_id)
            erased = forget.erase(wh, pipeline, key)
            erased.taken = 1 if config.user_hashes else 0
            found = None if config.landing == "skip" else forget.scan_landing(wh, key, config.landing == "rewrite")
            return _summary(erased, found)

        summary = run_step(context, work)
        context.log.info(
            f"{summary['requests_removed']} request(s) removed, {summary['requests_done']} done; rows removed: "
            + (", ".join(f"{t} {n}" for t, n in summary["rows_removed"].items()) or "none")
        )
        metadata = {k: v if isinstance(v, int) else dg.MetadataValue.json(v) for k, v in summary.items()}
        return dg.Output(summary, metadata=metadata)

    @dg.job(
        name=names.of(FORGET_JOB),
        tags=names.takes_turns,
        description="Forget persons: their rows, then their files.",
    )
    def forget_job():
        forget_persons()

    @dg.sensor(
        name=names.of("forget_sensor"),
        job=forget_job,
        minimum_interval_seconds=INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        required_resource_keys={names.pipeline},
    )
    def forget_sensor(context: dg.SensorEvaluationContext, **_called) -> dg.RunRequest | dg.SkipReason:
        """A forget request not done (pending, or its purge due) -> one ``forget_job`` run that resumes it."""
        due = pending.erasures(pipeline_of(context, names).storage(), pipeline_of(context, names).forget_purge_hours)
        if not due.due:
            return dg.SkipReason("no forget request to resume" + (f" ({due.describe()})" if due.waiting else ""))
        attempts = planning.History.read(context.instance, names).forget()
        if attempts.in_flight:
            return dg.SkipReason("an erasure is in flight")
        now = time.time()
        if attempts.waiting(now):
            return dg.SkipReason(
                f"erasure: {attempts.failures} failed run(s), next try in {attempts.waiting(now):.0f} s"
            )
        context.log.info(due.describe())
        return dg.RunRequest(run_key=planning.forget_key(due, attempts))

    return dg.Definitions(jobs=[forget_job], sensors=[forget_sensor])
