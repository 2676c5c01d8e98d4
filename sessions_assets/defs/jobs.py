"""The jobs: ingest received days, refresh what they feed, or both in one run; check the tables."""

import dagster as dg

from sessions_assets.defs.checks import CHECKS
from sessions_assets.defs.partitions import daily

# Jobs that rewrite the derived tables queue behind each other (dagster.yaml's tag_concurrency_limits).
TAKES_TURNS = {"sessions/refresh": "true"}
INGESTED = dg.AssetSelection.assets("raw_events").required_multi_asset_neighbors()
# The whole-table checks run on their own schedule (``checks.py``), not in every refresh.
# The derived assets, in refresh order: the one list (the CLI's --tables, the benchmark's steps read it).
DERIVED = ("events", "sessions", "users", "daily_snapshot")
REFRESHED = dg.AssetSelection.assets(*DERIVED) - dg.AssetSelection.checks(*CHECKS)

ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=INGESTED,
    partitions_def=daily,
    description="Ingest received days (a partition or a range): raw_events, rejected_events, partition_map.",
)
refresh_job = dg.define_asset_job(
    "refresh_job",
    selection=REFRESHED,
    partitions_def=daily,
    description="Bring events, sessions, users and the snapshot up to date with what was ingested.",
    tags=TAKES_TURNS,
)
process_job = dg.define_asset_job(
    "process_job",
    selection=INGESTED | REFRESHED,
    partitions_def=daily,
    description="Ingest received days, then refresh what they touched: one run, one Spark start.",
    tags=TAKES_TURNS,
)
# The erasure's job (``forget.py``): it takes turns with the refreshes too.
FORGET_JOB = "forget_job"
# Which jobs ingest, refresh and forget, for reading the run history (``planning.py``).
INGESTING, REFRESHING = {ingest_job.name, process_job.name}, {refresh_job.name, process_job.name}
FORGETTING = {FORGET_JOB}
