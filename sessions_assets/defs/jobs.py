"""The jobs: ingest received days, refresh what they feed, check the tables."""

import dagster as dg

from sessions_assets.defs.checks import CHECKS
from sessions_assets.defs.partitions import daily
from sessions_assets.defs.planning import REFRESH_JOB

# Jobs that rewrite the derived tables queue behind each other (dagster.yaml's tag_concurrency_limits).
TAKES_TURNS = {"sessions/refresh": "true"}

ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=dg.AssetSelection.assets("raw_events").required_multi_asset_neighbors(),
    partitions_def=daily,
    description="Ingest received days: raw_events, rejected_events and partition_map.",
)
refresh_job = dg.define_asset_job(
    REFRESH_JOB,
    # The whole-table checks run on their own schedule (``checks.py``), not in every refresh.
    selection=dg.AssetSelection.assets("events", "sessions", "daily_snapshot") - dg.AssetSelection.checks(*CHECKS),
    partitions_def=daily,
    description="Bring events, sessions and the snapshot up to date with what was ingested.",
    tags=TAKES_TURNS,
)
