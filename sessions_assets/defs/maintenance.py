"""Table upkeep: daily MERGEs and replaced days leave many small files and deletion vectors behind, and the
change feed keeps every version's files. A weekly job compacts each table and removes what no recent
version reads. It queues with the refreshes (same tag), so it never rewrites files under a running one."""

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from sessions_assets.defs import planning
from sessions_assets.defs.jobs import TAKES_TURNS
from sessions_assets.defs.resources import PipelineResource
from sessions_assets.warehouse.tables import ALL

# Delta's own default: time travel and change feeds reach back a week.
RETAIN_HOURS = 168


class MaintenanceConfig(dg.Config):
    retain_hours: int = RETAIN_HOURS


@dg.op(description="OPTIMIZE every table; VACUUM them when no refresh is due (each has read its input's changes).")
def compact_and_vacuum(
    context: dg.OpExecutionContext, config: MaintenanceConfig, spark: LazyPySparkResource, pipeline: PipelineResource
) -> None:
    wh = pipeline.warehouse(spark)
    for table in ALL:
        metrics = wh.compact(table)
        context.log.info(
            f"{table.name}: {metrics.get('numRemovedFiles', 0)} files into {metrics.get('numAddedFiles', 0)}"
        )
    # A refresh that is due still has to read its input's change feed: keep those files until it has.
    if planning.backlog(pipeline.warehouse(spark).storage) is not None:
        context.log.info("a refresh is due: VACUUM waits for the next maintenance run")
        return
    for table in ALL:
        wh.vacuum(table, config.retain_hours)


@dg.job(tags=TAKES_TURNS, description="Compact the Delta tables and remove files no version reads.")
def table_maintenance():
    compact_and_vacuum()


weekly_maintenance = dg.ScheduleDefinition(
    name="weekly_maintenance", job=table_maintenance, cron_schedule="0 3 * * 0", execution_timezone="UTC"
)
