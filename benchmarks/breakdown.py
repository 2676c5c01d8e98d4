"""Where one incremental day's time and reads go, step by step, without Dagster.

    .venv/bin/python benchmarks/breakdown.py /tmp/sessions-bench/h180/base

Takes a history warehouse that ``incremental.py`` left in its work directory (``h<H>/base``), and on a
fresh copy of it processes the next received day with the same plain functions the assets call
(ingest, ``events``, ``sessions``, ``daily_snapshot``), timing each and counting the rows Spark read for
it. The day is run twice, each time on a new copy; the second pass (warm JVM) is printed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from datetime import date, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import incremental as bench  # noqa: E402 - the benchmark's Spark metrics and conventions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, nargs="+", help="a history warehouse root (h<H>/base)")
    parser.add_argument("--day", type=date.fromisoformat, default=date.today() - timedelta(days=1))
    args = parser.parse_args(argv)

    from dagster_pyspark import LazyPySparkResource

    from sessions_assets import events, ingest, session_rebuild, snapshot
    from sessions_assets.affected import plan_rebuild
    from sessions_assets.partitions import partition_bounds
    from sessions_assets.resources import spark_config

    config = spark_config(ui=True) | {"spark.ui.retainedJobs": "100000", "spark.ui.retainedStages": "100000"}
    spark = LazyPySparkResource(spark_config=config).spark_session
    metrics = bench.SparkMetrics(spark)
    for base in args.base:
        for warm in (False, True):
            copy = base.parent / "breakdown"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(base, copy)
            wh = bench._warehouse(copy)
            settings = wh.settings
            steps: list[tuple[str, float, int]] = []

            def step(name, run):
                mark, started = metrics.mark(), time.perf_counter()
                result = run()
                seconds = time.perf_counter() - started
                steps.append((name, seconds, metrics.since(mark)[0]))
                return result

            day = step("ingest", lambda: ingest.load_received_day(wh, settings, args.day, ingest.landing_files(settings, args.day)))
            plan = plan_rebuild({args.day: set(day.affected_event_days)}, args.day, partition_bounds())
            step("events", lambda: events.update_events(wh, *plan.events[0]))
            step("sessions", lambda: session_rebuild.update_sessions(wh, *plan.sessions[0], settings))
            step("daily_snapshot", lambda: snapshot.update_snapshot(wh, *plan.snapshot[0], settings))
            if warm:
                print(f"{base}: " + " | ".join(f"{n} {s:.1f}s {r:,} rows" for n, s, r in steps)
                      + f" | total {sum(s for _, s, _ in steps):.1f}s", flush=True)  # fmt: skip
            shutil.rmtree(copy, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
