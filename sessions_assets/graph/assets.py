"""The derived assets, on local days: each brings its table up to date with its input, or repairs the run's days.

A run covers a local day or a range (``pending.Backlog``, a ``process_job`` run, a UI backfill); whatever it covers,
each asset applies every change its input has that it has not absorbed yet (``warehouse/refresh/``), so a re-run
changes nothing. A UI backfill of an asset, or ``rebuild: true`` in the run config, also recomputes the run's days
whole from their inputs (``users`` and ``daily_snapshot``: every row), the way to repair days whatever happened to
them. A ``process_job`` run's first step ingests the received days it names before ``events`` absorbs them.
"""

from datetime import date

import dagster as dg

from sessions_assets.graph import planning
from sessions_assets.graph.failures import run_step
from sessions_assets.graph.ingest import ingested_first
from sessions_assets.graph.metadata import table
from sessions_assets.graph.names import Names
from sessions_assets.graph.partitions import ANY_RECEIVED_DAY, SAME_DAY, SESSION_NEIGHBOURS, Calendars, bounds
from sessions_assets.graph.resources import pipeline_of, spark_of
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.refresh import Outcome
from sessions_assets.warehouse.refresh.steps import STEPS, Span, Step
from sessions_assets.warehouse.tables import EVENTS, SESSIONS

SINGLE_RUN = dg.BackfillPolicy.single_run()
NUMBERING_CHECK = "session_numbers_run_without_gaps"


# The tag Dagster gives a backfill's runs.
BACKFILL_TAG = "dagster/backfill"


class RepairConfig(dg.Config):
    rebuild: bool = False  # recompute the run's partitions whole from their inputs (a repair)


def _days(context: dg.AssetExecutionContext) -> tuple[date, date]:
    keys = context.partition_key_range
    return date.fromisoformat(keys.start), date.fromisoformat(keys.end)


def _repairs(context: dg.AssetExecutionContext, config: RepairConfig) -> bool:
    """Whether the run recomputes its days: asked in its config, or a backfill of the asset from the UI."""
    return config.rebuild or BACKFILL_TAG in context.run.tags


def _results(context: dg.AssetExecutionContext, done: Outcome, calendar: dg.DailyPartitionsDefinition, **result):
    """A materialization of each other partition whose rows changed, then the run's own result."""
    own, (lo, hi) = set(context.partition_keys), bounds(calendar)
    for day, rows in sorted(done.days.items()):
        if day.isoformat() not in own and lo <= day <= hi:
            yield dg.AssetMaterialization(context.asset_key, partition=day.isoformat(), metadata={"rows_changed": rows})
    yield dg.MaterializeResult(
        metadata={
            "refresh": done.how,
            "input_version_absorbed": done.absorbed if done.absorbed is not None else -1,
            **done.counts,
            "days_changed": len(done.days),
            **{name: table(rows) for name, rows in done.tables.items()},
        },
        **result,
    )


# Which partitions of an input a partition reads (``steps.Span``), as Dagster maps them.
MAPPINGS = {Span.ANY_RECEIVED_DAY: ANY_RECEIVED_DAY, Span.SAME_DAY: SAME_DAY, Span.NEIGHBOURS: SESSION_NEIGHBOURS}


def definitions(names: Names, calendars: Calendars) -> dg.Definitions:
    """The derived assets of an instance, one per refresh step (``refresh/steps.py``), with its dependencies."""
    key, calendar = names.key, calendars.local
    numbering = names.of(NUMBERING_CHECK)
    numbering_spec = dg.AssetCheckSpec(
        numbering, asset=key("sessions"), description="Each user written has sessions numbered 1..n in start order."
    )

    def numbered(pipeline, done: Outcome) -> list[dg.AssetCheckResult]:
        """The sessions' numbering check, from what their step counted (the channel rules it used as metadata)."""
        rules = pipeline.rules()
        done.tables["channel_rules"] = [{"file": rules.path, "sha256": rules.digest, "rules": len(rules.rules)}]
        gaps = done.counts.pop("users_misnumbered", 0)
        written = done.counts.get("users_written", 0)
        metadata = {"users_checked": written, "users_misnumbered": gaps, "expected": 0}
        return [dg.AssetCheckResult(check_name=numbering, passed=gaps == 0, metadata=metadata)]

    def derived(step: Step) -> dg.AssetsDefinition:
        @dg.asset(
            key=key(step.name),
            deps=[dg.AssetDep(key(i.table.name), partition_mapping=MAPPINGS[i.span]) for i in step.inputs],
            description=step.description,
            partitions_def=calendar,
            backfill_policy=SINGLE_RUN,
            group_name=names.of("sessions"),
            required_resource_keys={names.spark, names.pipeline},
            check_specs=[numbering_spec] if step.table is SESSIONS else None,
        )
        def refreshed(context: dg.AssetExecutionContext, config: RepairConfig):
            received = planning.ingest_range(context.run.tags) if step.table is EVENTS else None
            if received:  # a process_job run: its received days first
                yield from ingested_first(context, names, received)
            pipeline = pipeline_of(context, names)
            refused = ledger.ingested_elsewhere(pipeline.storage(), pipeline.time_zone)
            if refused:  # received days ingested in another time zone
                raise dg.Failure(description=refused)
            days = _days(context) if _repairs(context, config) else None
            # The warehouse opens inside the step: a Spark that does not start fails it in one line.
            done = run_step(context, lambda: step.refresh(pipeline.warehouse(spark_of(context, names)), pipeline, days))
            checks = numbered(pipeline, done) if step.table is SESSIONS else None
            yield from _results(context, done, calendar, check_results=checks)

        return refreshed

    return dg.Definitions(assets=[derived(step) for step in STEPS])
