"""What a received day costs when its collector writes it in several files over the day: file by file against whole.

    python benchmarks/deliveries.py                      # 2 days of ~3,500 events, each in 6 files
    python benchmarks/deliveries.py --files 24 --connect

Generates ``--days`` received days (``incremental.generate``: late events, re-deliveries, late logins, broken lines)
and splits each day's lines, in their order, into ``--files`` files. Then, on a data root per method, delivers them as a
collector would: one file more, then what the landing sensor launches (``Runner.process``). ``by_file`` is the
pipeline as it is (a day's ingest reads its new files only); ``whole_day`` reads the day's folder whole at every
delivery (``reingest --folders`` and the refresh after it), as an ingest that re-reads a changed day would;
``at_once`` is the same day delivered in one go (all its files, then one run): what the day would cost if it came
whole. All must end with identical tables. Reported: rows written per line delivered per table
(``operationMetrics``), files rewritten in ``raw_events``, and seconds per run; with ``--connect``, the server's SQL
executions per run.
Results go to ``benchmarks/results/deliveries.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import incremental  # noqa: E402 - the benchmark beside this one: its data, Spark start and measures

from sessions_assets.warehouse import tables  # noqa: E402
from sessions_assets.warehouse.delta import Warehouse  # noqa: E402
from sessions_assets.warehouse.storage import Storage  # noqa: E402

METHODS = ("by_file", "whole_day", "at_once")


def split(source: Path, days: list[date], files: int) -> dict[date, list[list[str]]]:
    """Each generated day's lines, in order, as ``files`` parts."""
    parts = {}
    for day in days:
        lines = (source / "landing" / f"received_date={day}" / "part-0000.jsonl").read_text().splitlines()
        size = -(-len(lines) // files)
        parts[day] = [lines[n * size : (n + 1) * size] for n in range(files)]
    return parts


def deliver(spark, method: str, root: Path, parts: dict[date, list[list[str]]]) -> dict:
    """Write the parts one at a time, each followed by what the landing sensor launches; what it cost."""
    (root / "landing").mkdir(parents=True)
    wh = Warehouse(spark, Storage(str(root)))
    seconds, executions, writes, lines = [], [], Counter(), 0
    inst, runner = incremental.dagster(root)
    with inst:
        for day, day_parts in sorted(parts.items()):
            for n, part in enumerate(day_parts):
                folder = root / "landing" / f"received_date={day}"
                folder.mkdir(exist_ok=True)
                (folder / f"part-{n:04d}.jsonl").write_text("".join(line + "\n" for line in part))
                lines += len(part)
                if method == "at_once" and n < len(day_parts) - 1:
                    continue
                before = {t.name: wh.version(t) for t in tables.ALL}
                started, wall = time.time(), time.perf_counter()
                if method == "whole_day" and n:
                    runner.reingest(day, folders=True)
                runner.process()
                seconds.append(time.perf_counter() - wall)
                if incremental.UI is not None:
                    executions.append(incremental.UI.bill(started, time.time()).row()[0])
                for table, done in incremental.delta_writes(wh, before).items():
                    writes.update({f"{table} {k}": v for k, v in done.items()})
    return {
        "lines": lines,
        "deliveries": len(seconds),
        "seconds": [round(s, 1) for s in seconds],
        "executions": executions,
        "writes": dict(writes),
    }


def markdown(report: dict) -> str:
    rows = [
        "# A received day delivered in files",
        "",
        f"{report['machine']}; {report['date']}, commit {report['commit']}; "
        f"{report['days']} received day{'s' if report['days'] > 1 else ''} of ~{report['events_per_day']:,} events, "
        f"each in {report['files']} files delivered one at a time (`at_once`: all together), each delivery "
        "followed by what the landing sensor launches.",
        "",
        "| method | lines | runs | raw_events rows | rows/line | events rows/line | raw files removed | median s/run "
        "| total s | median SQL executions |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for method in METHODS:
        m = report["methods"][method]
        w = m["writes"]
        executions = f"{statistics.median(m['executions']):g}" if m["executions"] else "-"
        rows.append(
            f"| {method} | {m['lines']:,} | {m['deliveries']} | {w.get('raw_events rows', 0):,} | "
            f"{w.get('raw_events rows', 0) / m['lines']:.2f} | {w.get('events rows', 0) / m['lines']:.2f} | "
            f"{w.get('raw_events removed', 0)} | "
            f"{statistics.median(m['seconds']):.1f} | {sum(m['seconds']):.0f} | {executions} |"
        )
    first = ", ".join(f"{report['methods'][method]['seconds'][0]} s" for method in METHODS)
    rows += [
        "",
        f"Identical tables at the end: {report['identical']}. The methods run in this order on one server: the first "
        f"run of each took {first} (the first warms the server).",
        "",
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--files", type=int, default=6)
    parser.add_argument("--events-per-day", type=int, default=3_500)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--connect", action="store_true", help="runs attach to a Spark Connect server (started here)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sessions-deliveries"))
    parser.add_argument("--out", type=Path, default=incremental.RESULTS)
    args = parser.parse_args(argv)
    os.environ["TZ"] = "UTC"
    time.tzset()
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    spark = incremental.start_spark(args)
    last = datetime.now(UTC).date() - timedelta(days=1)
    days = [last - timedelta(days=args.days - 1 - n) for n in range(args.days)]
    incremental.generate(args.workdir / "generated", days, args.events_per_day, args.seed)
    parts = split(args.workdir / "generated", days, args.files)
    methods = {}
    for method in METHODS:
        methods[method] = deliver(spark, method, args.workdir / method, parts)
        print(method, json.dumps(methods[method]), flush=True)
    differences = [
        d
        for other in METHODS[1:]
        for d in incremental.differences(spark, args.workdir / METHODS[0], args.workdir / other)
    ]
    report = {
        "machine": incremental.machine(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "commit": incremental.commit(),
        "days": args.days,
        "files": args.files,
        "events_per_day": args.events_per_day,
        "methods": methods,
        "identical": not differences,
        "differences": differences,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "deliveries.json").write_text(json.dumps(report, indent=1, default=str))
    (args.out / "deliveries.md").write_text(markdown(report))
    print(markdown(report))
    return 0 if not differences else 1


if __name__ == "__main__":
    sys.exit(main())
