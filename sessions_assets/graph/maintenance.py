"""Table upkeep: daily MERGEs and replaced days leave many small files and deletion vectors behind, and the
change feed keeps every version's files. A weekly job compacts each table and removes what no recent
version reads. It queues with the instance's refreshes (same tag), so it never rewrites files under a running one."""

import dagster as dg

from sessions_assets.graph.names import Names
from sessions_assets.graph.partitions import Calendars, bounds
from sessions_assets.graph.resources import pipeline_of, spark_of
from sessions_assets.warehouse import pending
from sessions_assets.warehouse.tables import ALL

# Delta's own default: time travel and change feeds reach back a week.
RETAIN_HOURS = 168


class MaintenanceConfig(dg.Config):
    retain_hours: int = RETAIN_HOURS


def definitions(names: Names, calendars: Calendars) -> dg.Definitions:
    @dg.op(
        name=names.of("compact_and_vacuum"),
        description="OPTIMIZE every table; VACUUM them when no refresh is due (each has read its input's changes).",
        required_resource_keys={names.spark, names.pipeline},
    )
    def compact_and_vacuum(context: dg.OpExecutionContext, config: MaintenanceConfig) -> None:
        wh = pipeline_of(context, names).warehouse(spark_of(context, names))
        for table in ALL:
            metrics = wh.compact(table)
            context.log.info(
                f"{table.name}: {metrics.get('numRemovedFiles', 0)} files into {metrics.get('numAddedFiles', 0)}"
            )
        # A refresh that is due still has to read its input's change feed: keep those files until it has.
        if pending.backlog(wh.storage, bounds(calendars.received)) is not None:
            context.log.info("a refresh is due: VACUUM waits for the next maintenance run")
            return
        for table in ALL:
            wh.vacuum(table, config.retain_hours)

    @dg.job(
        name=names.of("table_maintenance"),
        tags=names.takes_turns,
        description="Compact the Delta tables and remove files no version reads.",
    )
    def table_maintenance():
        compact_and_vacuum()

    weekly = dg.ScheduleDefinition(
        name=names.of("weekly_maintenance"), job=table_maintenance, cron_schedule="0 3 * * 0", execution_timezone="UTC"
    )
    return dg.Definitions(jobs=[table_maintenance], schedules=[weekly])
