"""The jobs of an instance: ingest received days, refresh what they feed, or both in one run."""

import dagster as dg

from sessions_assets.graph.checks import check_keys
from sessions_assets.graph.names import DERIVED, LANDING, Names


def definitions(names: Names, calendar: dg.DailyPartitionsDefinition) -> dg.Definitions:
    ingested = dg.AssetSelection.assets(*[names.key(a) for a in LANDING])
    # The whole-table checks run on their own schedule (``checks.py``), not in every refresh.
    refreshed = dg.AssetSelection.assets(*[names.key(a) for a in DERIVED]) - dg.AssetSelection.checks(
        *check_keys(names)
    )
    jobs = [
        dg.define_asset_job(
            names.of("ingest_job"),
            selection=ingested,
            partitions_def=calendar,
            description="Ingest received days (a partition or a range): raw_events, rejected_events, partition_map.",
        ),
        dg.define_asset_job(
            names.of("refresh_job"),
            selection=refreshed,
            partitions_def=calendar,
            description="Bring events, sessions, users and the snapshot up to date with what was ingested.",
            tags=names.takes_turns,
        ),
        dg.define_asset_job(
            names.of("process_job"),
            selection=ingested | refreshed,
            partitions_def=calendar,
            description="Ingest received days, then refresh what they touched: one run, one Spark start.",
            tags=names.takes_turns,
        ),
    ]
    return dg.Definitions(jobs=jobs)
