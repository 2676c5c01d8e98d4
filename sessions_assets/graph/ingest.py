"""The ingest assets, partitioned by received day: parse the landing files, keep every line, map the event days.

A run covers one received day or a range: the days are read in one Spark read and each table is written
in one commit, so a UI backfill of a year of days is one run (one Spark start). A ``process_job`` run ingests its
received days the same way inside its first step (``ingested_first``) and records the same materializations. The parsed rows are held
until the commits, in memory and then on the driver's local disk (``localCheckpoint``): a run needs about
the landing files' size in local disk.
"""

from datetime import date

import dagster as dg

from sessions_assets.graph.failures import run_step
from sessions_assets.graph.metadata import table
from sessions_assets.graph.names import Names
from sessions_assets.graph.partitions import Calendars
from sessions_assets.graph.resources import pipeline_of, spark_of
from sessions_assets.warehouse.ingest import ingest_days


def _file_name(uri: str, source: str | None) -> str:
    return f"{source}/{uri.rsplit('/', 1)[-1]}" if source else uri.rsplit("/", 1)[-1]


def _per_day(done) -> dg.MetadataValue:
    """A row per received day."""
    return table(
        [
            {
                "received_day": day.isoformat(),
                "lines": d.lines,
                "accepted": d.accepted,
                "rejected": d.rejected,
                "suppressed": d.suppressed,
                "event_days": len(d.event_days),
                "files_read": len(d.files),
                "files_kept": d.kept,
                "fingerprint": d.fingerprint,
            }
            for day, d in sorted(done.items())
        ]
    )


def _per_source(files: list[dict]) -> dict[str, dg.MetadataValue]:
    """A row per Segment source of the run's days (none in the received_date layout)."""
    sources: dict[str, dict] = {}
    for f in files:
        if f.get("source") is not None:
            row = sources.setdefault(
                f["source"],
                {
                    "source_id": f["source"],
                    "files": 0,
                    "files_not_read": 0,
                    "lines": 0,
                    "accepted": 0,
                    "rejected": 0,
                    "suppressed": 0,
                },
            )
            row["files"] += 1
            row["files_not_read"] += 1 if f.get("skipped") else 0
            for key in ("lines", "accepted", "rejected", "suppressed"):
                row[key] += f.get(key, 0)
    return {"per_source": table([sources[s] for s in sorted(sources)])} if sources else {}


class IngestConfig(dg.Config):
    # Judge the lines the tables hold of the run's days again, not their folders: after the time zone or the
    # acceptance rules changed (``sessions-assets reingest``); a day's folder may be gone.
    stored_lines: bool = False
    # Read every file of the run's days and replace the days whole: what their folders hold now (a file removed
    # from a folder withdraws its lines only so). Otherwise a run reads the files new or changed since the day's
    # last ingest, and keeps the rows of the others.
    whole_days: bool = False


def definitions(names: Names, calendars: Calendars) -> dg.Definitions:
    """The ingest multi-asset of an instance, on its received days."""

    @dg.multi_asset(
        name=names.of("ingest"),
        specs=[
            dg.AssetSpec(names.key("raw_events"), description="Every accepted line, as parsed, with its payload."),
            dg.AssetSpec(
                names.key("rejected_events"), description="Every rejected line, or unread file, with its reason."
            ),
            dg.AssetSpec(
                names.key("partition_map"), description="Which event days each received day touched, with counts."
            ),
        ],
        partitions_def=calendars.received,
        group_name=names.of("landing"),
        backfill_policy=dg.BackfillPolicy.single_run(),
        required_resource_keys={names.spark, names.pipeline},
    )
    def ingest(context: dg.AssetExecutionContext, config: IngestConfig):
        """The run's received days' new and changed files, replacing their rows in each table (the map, then the
        record of what was read, last)."""
        days = [date.fromisoformat(key) for key in context.partition_keys]
        for asset, metadata in ingested(context, names, days, config.stored_lines, config.whole_days).items():
            yield dg.MaterializeResult(asset_key=names.key(asset), metadata=metadata)

    return dg.Definitions(assets=[ingest])


def ingested_first(context: dg.OpExecutionContext, names: Names, days: list[date]):
    """Ingest received days inside another step (a ``process_job`` run, which refreshes on local days after it):
    a materialization of each ingest asset for each of the days, as the ingest assets' own run records."""
    for asset, metadata in ingested(context, names, days).items():
        for day in days:
            yield dg.AssetMaterialization(names.key(asset), partition=day.isoformat(), metadata=metadata)


def ingested(
    context: dg.OpExecutionContext, names: Names, days: list[date], stored: bool = False, whole: bool = False
) -> dict[str, dict]:
    """Ingest the received days (``stored``: from the lines the tables hold; ``whole``: every file of their
    folders), and what each ingest asset's materialization says of it."""
    pipeline = pipeline_of(context, names)
    # Taken before the files are read: a file that changes during the read makes its day due again.
    storage = pipeline.storage()
    fingerprints = {day: "" if stored else storage.fingerprint(day) for day in days}
    wh = lambda: pipeline.warehouse(spark_of(context, names))  # noqa: E731 - Spark starts inside the step
    done = run_step(context, lambda: ingest_days(wh(), pipeline, fingerprints, stored, whole))
    reasons: dict[str, int] = {}
    for d in done.values():
        for reason, n in d.reasons.items():
            reasons[reason] = reasons.get(reason, 0) + n
    files = [
        {
            "received_day": day.isoformat(),
            "file": _file_name(uri, counts.get("source")),
            **{k: v for k, v in counts.items() if k != "events_per_day"},
        }
        for day, d in sorted(done.items())
        for uri, counts in sorted(d.files.items())
    ]
    event_days = sorted({e for d in done.values() for e in d.event_days})
    per_day = {"received_days": len(done), "per_received_day": _per_day(done)}
    events_per_day: dict[str, int] = {}
    for d in done.values():
        for day, n in d.events_per_day.items():
            events_per_day[day.isoformat()] = events_per_day.get(day.isoformat(), 0) + n
    return {
        "raw_events": {
            "lines": sum(d.lines for d in done.values()),
            "accepted": sum(d.accepted for d in done.values()),
            # Lines of forgotten persons, dropped: counted here, never stored (their payloads neither).
            "suppressed": sum(d.suppressed for d in done.values()),
            "files": dg.MetadataValue.json(files),
            **_per_source(files),
            **per_day,
        },
        "rejected_events": {"rejected": sum(reasons.values()), "reasons": dg.MetadataValue.json(reasons), **per_day},
        "partition_map": {
            "event_days": dg.MetadataValue.json([e.isoformat() for e in event_days]),
            "event_days_touched": len(event_days),
            "events_per_day": dg.MetadataValue.json(dict(sorted(events_per_day.items()))),
            **per_day,
        },
    }
