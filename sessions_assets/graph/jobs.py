"""The jobs of an instance: ingest received days, refresh what they feed, or both in one run.

The ingest assets are on received days and the derived ones on local days, and an asset job takes one calendar:
``ingest_job`` runs on received days, ``refresh_job`` and ``process_job`` on local days. A ``process_job`` run
ingests the received days its ``sessions/ingest`` tag names in its first step, then refreshes: the landing sensor's
one run per batch of days (one process, one Spark session), whose refresh cannot start before its ingest commits.
"""

import dagster as dg

from sessions_assets.graph.checks import check_keys
from sessions_assets.graph.names import DERIVED, INGESTED, Names
from sessions_assets.graph.partitions import Calendars


def definitions(names: Names, calendars: Calendars) -> dg.Definitions:
    ingested = dg.AssetSelection.assets(*[names.key(a) for a in INGESTED])
    # The whole-table checks run on their own schedule (``checks.py``), not in every refresh.
    refreshed = dg.AssetSelection.assets(*[names.key(a) for a in DERIVED]) - dg.AssetSelection.checks(
        *check_keys(names)
    )
    jobs = [
        dg.define_asset_job(
            names.of("ingest_job"),
            selection=ingested,
            partitions_def=calendars.received,
            description="Ingest received days (a partition or a range): raw_events, rejected_events, partition_map.",
        ),
        dg.define_asset_job(
            names.of("refresh_job"),
            selection=refreshed,
            partitions_def=calendars.local,
            description="Bring events, sessions, users and the snapshot up to date with what was ingested.",
            tags=names.takes_turns,
        ),
        dg.define_asset_job(
            names.of("process_job"),
            selection=refreshed,
            partitions_def=calendars.local,
            description="Ingest the received days a run's sessions/ingest tag names, then refresh what they touched: "
            "one run, one Spark session.",
            tags=names.takes_turns,
        ),
    ]
    return dg.Definitions(jobs=jobs)
