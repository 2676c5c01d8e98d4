"""What one more received day costs, four ways, after a history of H days (issue: benchmark).

    make bench                                   # H = 30, 90, 180 at the default volume
    .venv/bin/python benchmarks/incremental.py --history 30 90 180 --events-per-day 20000

For each H: generate H + 1 received days of Segment events (lateness: ~90 % within a minute, ~7 % within
3 days, ~3 % up to 180 days; ~1 % re-delivered), load the first H as history (bulk ingest and a full
build), copy the warehouse four times, then process the last received day on each copy:

- ``incremental``: the project's path, what the late-data sensor runs (``Runner.process``, real Dagster);
- ``full_rebuild``: ``events``, ``sessions`` and ``daily_snapshot`` from all of ``raw_events``;
- ``last_60_days``: rebuild the last 60 event/session/snapshot days (the seed's pragmatic baseline);
- ``touched_days``: every touched event day and its neighbours, whole days (the seed's own plan).

All run in one warm Spark session. Rows and bytes read are Spark's input metrics of the method's jobs (from
the status REST API), rows and files written are Delta's operation metrics of the commits it made, peak
memory is the highest RSS of the Python process plus the Spark driver JVM sampled during the method.
``sessions`` and ``daily_snapshot`` of every method are compared with the full rebuild's.
Results: ``benchmarks/results/incremental.{json,md,png}``. A loaded history is kept in ``--workdir``;
``--reuse-history`` times again on it (same H, volume and seed) instead of generating and loading anew.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import threading
import time
import urllib.request
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

os.environ.setdefault("TZ", "UTC")
time.tzset()

RESULTS = Path(__file__).parent / "results"
METHODS = ("incremental", "full_rebuild", "last_60_days", "touched_days")


# --- data -----------------------------------------------------------------------------------------------


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def generate(root: Path, first_day: date, days: int, per_day: int, seed: int) -> list[date]:
    """``days`` received days of visits (bursts of a user's events) with the issue's lateness profile."""
    rng = random.Random(seed)
    users = [f"user-{i}" for i in range(max(10, per_day // 4))]
    received_days = [first_day + timedelta(days=i) for i in range(days)]
    start = datetime.combine(first_day, datetime.min.time(), tzinfo=UTC)
    for received_day in received_days:
        day_start = datetime.combine(received_day, datetime.min.time(), tzinfo=UTC)
        lines: list[str] = []
        while len(lines) < per_day:
            roll = rng.random()
            if roll < 0.90:
                late = timedelta(seconds=rng.uniform(0, 60))
            elif roll < 0.97:
                late = timedelta(minutes=rng.uniform(1, 3 * 24 * 60))
            else:
                late = timedelta(days=rng.uniform(3, 180))
            received = day_start + timedelta(seconds=rng.uniform(0, 86_399))
            moment = max(received - late, start)
            user = rng.choice(users)
            for _ in range(1 + int(rng.expovariate(1 / 7))):
                message = {
                    "messageId": str(uuid.UUID(int=rng.getrandbits(128))), "type": "track", "event": "Page Viewed",
                    "userId": user, "anonymousId": f"anon-{user}", "timestamp": _iso(moment),
                    "receivedAt": _iso(min(received, moment + late)), "properties": {"path": f"/p/{rng.randint(1, 50)}"},
                }  # fmt: skip
                lines.append(json.dumps(message))
                if rng.random() < 0.01:  # re-delivered, up to a day later
                    lines.append(
                        json.dumps({**message, "receivedAt": _iso(received + timedelta(hours=rng.uniform(0, 24)))})
                    )
                moment += timedelta(seconds=rng.expovariate(1 / 120))
        folder = root / "landing" / f"received_date={received_day}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "part-0000.jsonl").write_text("\n".join(lines) + "\n")
    return received_days


# --- measuring ------------------------------------------------------------------------------------------


@dataclass
class Measurement:
    method: str
    history_days: int
    events_per_day: int
    wall_seconds: float = 0.0
    rows_read: int = 0
    bytes_read: int = 0
    rows_written: int = 0
    files_added: int = 0
    files_removed: int = 0
    peak_memory_mb: float = 0.0
    sessions_identical: bool | None = None
    snapshot_identical: bool | None = None


class SparkMetrics:
    """Input rows/bytes of the jobs run since ``mark()``, from Spark's status REST API."""

    def __init__(self, spark):
        self.base = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"

    def _get(self, path: str):
        with urllib.request.urlopen(f"{self.base}/{path}") as response:
            return json.load(response)

    def mark(self) -> int:
        jobs = self._get("jobs")
        return max((j["jobId"] for j in jobs), default=-1)

    def since(self, mark: int) -> tuple[int, int]:
        time.sleep(2)  # the listener bus is asynchronous
        stage_ids = {s for j in self._get("jobs") if j["jobId"] > mark for s in j["stageIds"]}
        stages = [s for s in self._get("stages?status=complete") if s["stageId"] in stage_ids]
        return sum(s["inputRecords"] for s in stages), sum(s["inputBytes"] for s in stages)


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@contextmanager
def peak_memory(spark, into: Measurement):
    """Sample RSS of this process and the driver JVM while the block runs."""
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    done = threading.Event()

    def sample():
        while not done.is_set():
            into.peak_memory_mb = max(into.peak_memory_mb, _rss_mb(os.getpid()) + _rss_mb(jvm_pid))
            done.wait(0.2)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def delta_writes(wh, versions: dict[str, int]) -> tuple[int, int, int]:
    """Rows written, files added and removed by the commits after ``versions`` (table -> version)."""
    rows = added = removed = 0
    for table, before in versions.items():
        history = wh.delta(table).history().where(f"version > {before}").select("operationMetrics").collect()
        for (metrics,) in history:
            m = {k: int(v) for k, v in (metrics or {}).items() if v.isdigit()}
            rows += m.get("numOutputRows", 0) + m.get("numTargetRowsInserted", 0) + m.get("numTargetRowsUpdated", 0)
            rows += m.get("numTargetRowsCopied", 0)
            added += m.get("numFiles", 0) + m.get("numAddedFiles", 0) + m.get("numTargetFilesAdded", 0)
            removed += m.get("numRemovedFiles", 0) + m.get("numTargetFilesRemoved", 0)
    return rows, added, removed


# --- the four methods -----------------------------------------------------------------------------------


def _ingest(wh, settings, day):
    from sessions_assets import ingest

    return ingest.load_received_day(wh, settings, day, ingest.landing_files(settings, day))


def _rebuild_events(wh, first: date, last: date) -> None:
    from sessions_assets.tables import EVENTS

    from sessions_assets import events as ev

    received = ev.contributing_received_days(wh, first, last)
    wh.replace_partitions(EVENTS, ev.dedupe(ev.raw_rows_for(wh, received, first, last)), first, last)


def _overwrite(wh, table, rows, note: str | None = None) -> None:
    """Replace the whole table, in the layout the pipeline gives it (partitioned, a file per day, sorted)."""
    wh.delta(table)  # created as the pipeline creates it: partition column and table properties
    rows = rows.select(*table.schema.fieldNames())
    if table.partition_column:
        rows = rows.repartition(table.partition_column)
    if table.sort_columns:
        rows = rows.sortWithinPartitions(*filter(None, (table.partition_column, *table.sort_columns)))
    writer = rows.write.format("delta").mode("overwrite")
    if note is not None:
        writer = writer.option("userMetadata", note)
    if table.partition_column:
        writer = writer.partitionBy(table.partition_column)
    writer.save(wh.path(table))


def full_build(wh, settings, horizon: date) -> None:
    """``events``, ``sessions``, ``daily_snapshot`` (and ``user_states``) from all of ``raw_events``."""
    from pyspark.sql import functions as F
    from sessions_assets.events import CONSUMER as events_consumer
    from sessions_assets.events import dedupe
    from sessions_assets.session_extend import mark
    from sessions_assets.session_rebuild import CONSUMER as sessions_consumer
    from sessions_assets.sessionize import sessionize
    from sessions_assets.snapshot import CONSUMER as snapshot_consumer
    from sessions_assets.snapshot import rebuild_snapshot
    from sessions_assets.tables import DAILY_SNAPSHOT, EVENTS, RAW_EVENTS, SESSIONS, USER_STATES

    from sessions_assets import ledger

    _overwrite(wh, EVENTS, dedupe(wh.read(RAW_EVENTS)))
    # Marked as having read every event day, like a sessions commit of the pipeline (``session_extend``).
    read_all = mark(wh.version(EVENTS), None, None)
    _overwrite(wh, SESSIONS, sessionize(wh.read(EVENTS), settings.session_gap, settings.max_session), read_all)
    ledger.mark_all_absorbed(wh, (events_consumer, sessions_consumer, snapshot_consumer))
    for table in (DAILY_SNAPSHOT, USER_STATES):
        _overwrite(wh, table, wh.spark.createDataFrame([], table.schema))
    first = wh.read(SESSIONS).agg(F.min("session_date")).head()[0]
    rebuild_snapshot(wh, first, horizon, settings)


def run_method(method: str, root: Path, day: date) -> None:
    import dagster as dg
    from sessions_assets.affected import neighbour_days
    from sessions_assets.partitions import contiguous_ranges, partition_bounds
    from sessions_assets.runner import Runner
    from sessions_assets.session_rebuild import rebuild_session_days
    from sessions_assets.snapshot import rebuild_snapshot

    from sessions_assets.definitions import build_resources

    resources = build_resources(data_root=str(root))
    settings = resources["settings"]
    if method == "incremental":
        with dg.DagsterInstance.ephemeral() as instance:
            Runner(instance, resources).process(day)
        return
    wh = _warehouse(root)
    touched = sorted(_ingest(wh, settings, day).events_per_day)
    if method == "full_rebuild":
        full_build(wh, settings, day)
    elif method == "last_60_days":
        first, last = day - timedelta(days=59), max(touched + [day])
        _rebuild_events(wh, first, last)
        rebuild_session_days(wh, first, last, settings)
        rebuild_snapshot(wh, first, day, settings)
    elif method == "touched_days":
        for first, last in contiguous_ranges(touched, 10_000):
            _rebuild_events(wh, first, last)
        neighbours = sorted(neighbour_days(touched, *partition_bounds()))
        for first, last in contiguous_ranges(neighbours, 10_000):
            rebuild_session_days(wh, first, last, settings)
        rebuild_snapshot(wh, min(neighbours + [day]), day, settings)


def _warehouse(root: Path):
    from sessions_assets.tables import Warehouse

    from sessions_assets.definitions import build_resources

    resources = build_resources(data_root=str(root))
    return Warehouse(resources["spark"].spark_session, resources["settings"])


def _rows(wh, table) -> set:
    from sessions_assets.tables import DAILY_SNAPSHOT

    df = wh.read(table)
    if table is DAILY_SNAPSHOT:
        df = df.drop("avg_days_in_state")  # derived from sum_days_in_state, compared exactly instead
    return set(map(tuple, df.collect()))


# --- one history ----------------------------------------------------------------------------------------


def bench_history(
    spark,
    workdir: Path,
    history: int,
    per_day: int,
    seed: int,
    methods: tuple[str, ...] = METHODS,
    reuse: bool = False,
) -> list[Measurement]:
    from pyspark.sql import functions as F
    from sessions_assets.tables import DAILY_SNAPSHOT, EVENTS, PARTITION_MAP, RAW_EVENTS, REJECTED_EVENTS, SESSIONS

    from sessions_assets import ingest

    base = workdir / f"h{history}" / "base"
    made, found = {"history": history, "events_per_day": per_day, "seed": seed}, _history_made(base)
    if reuse and {key: found.get(key) for key in made} == made:
        new_day = date.fromisoformat(found["new_day"])
        print(f"H={history}: reusing the history in {base} (next received day {new_day})", flush=True)
        return _time_methods(spark, base, history, per_day, new_day, methods)
    shutil.rmtree(base.parent, ignore_errors=True)
    new_day = date.today() - timedelta(days=1)
    days = generate(base, new_day - timedelta(days=history), history + 1, per_day, seed)
    history_days = days[:-1]
    print(f"H={history}: generated {len(days)} received days x ~{per_day} events", flush=True)

    started = time.monotonic()
    wh = _warehouse(base)
    settings = wh.settings
    files = [f for d in history_days for f in ingest.landing_files(settings, d)]
    classified = ingest.classify(ingest.parse(ingest.read_lines(spark, files)), settings).withColumn(
        "received_date", F.to_date(F.regexp_extract("source_file", r"received_date=(\d{4}-\d{2}-\d{2})", 1))
    )
    accepted = classified.where("reason IS NULL").select(*ingest.RAW_COLUMNS)
    _overwrite(wh, RAW_EVENTS, accepted)
    _overwrite(wh, REJECTED_EVENTS, classified.where("reason IS NOT NULL").select(*ingest.REJECT_COLUMNS))
    _overwrite(wh, PARTITION_MAP, ingest.partition_map_rows(wh.read(RAW_EVENTS)))
    full_build(wh, settings, history_days[-1])
    for table in (RAW_EVENTS, REJECTED_EVENTS, PARTITION_MAP, EVENTS, SESSIONS, DAILY_SNAPSHOT):
        layout = wh.delta(table).detail().head().partitionColumns
        assert layout == [table.partition_column], f"{table.name} is partitioned by {layout}"
    print(f"H={history}: history loaded in {time.monotonic() - started:.0f}s "
          f"({wh.read(EVENTS).count()} events, {wh.read(SESSIONS).count()} sessions)", flush=True)  # fmt: skip
    (base / HISTORY_MADE).write_text(json.dumps(made | {"new_day": new_day.isoformat()}))
    return _time_methods(spark, base, history, per_day, new_day, methods)


def warm_filters(root: Path) -> None:
    """Give the history's event days the message filters the runs that loaded it would have left.

    The history is bulk-loaded into ``events``, past the MERGE that keeps the filters; without this the
    timed day would build every day's filter from scratch, which only the first run after an upgrade does.
    A day gets its filter from the first run that asks it (``message_filter.worth_asking``) once it is
    past its own bulk, so the days no later received day of the history gave at most ``ASK_AT_MOST``
    messages are left without: the timed day builds those it asks, as a daily run does. Not timed; a no-op
    when they are already up to date.
    """
    from pyspark.sql import functions as F
    from sessions_assets.events import copies_per_day
    from sessions_assets.tables import PARTITION_MAP

    from sessions_assets import message_filter

    started = time.monotonic()
    wh = _warehouse(root)
    late = F.col("received_date") > F.col("event_date")
    asked = wh.read(PARTITION_MAP).where(late & F.col("events").between(1, message_filter.ASK_AT_MOST))
    days = sorted(r[0] for r in asked.select("event_date").distinct().collect())
    filters = message_filter.current(wh, days, copies_per_day(wh, days))
    message_filter.save(wh, days, filters)
    filters.unpersist()
    print(f"  message filters of {len(days)} days up to date in {time.monotonic() - started:.0f}s", flush=True)


# Written into a base once its history is loaded: what it holds, for ``--reuse-history``.
HISTORY_MADE = "history.json"


def _history_made(base: Path) -> dict:
    path = base / HISTORY_MADE
    return json.loads(path.read_text()) if path.exists() else {}


def _time_methods(
    spark, base: Path, history: int, per_day: int, new_day: date, methods: tuple[str, ...]
) -> list[Measurement]:
    """Each method on its own copy of ``base``, processing ``new_day``."""
    from sessions_assets.tables import (
        DAILY_SNAPSHOT,
        EVENTS,
        PARTITION_MAP,
        RAW_EVENTS,
        REJECTED_EVENTS,
        SESSIONS,
        USER_STATES,
    )  # fmt: skip

    tables = (RAW_EVENTS, REJECTED_EVENTS, PARTITION_MAP, EVENTS, SESSIONS, DAILY_SNAPSHOT, USER_STATES)
    warm_filters(base)
    metrics = SparkMetrics(spark)
    results, truth = [], None
    # The full rebuild runs first: it is the truth every other method is compared with.
    for method in ("full_rebuild", *(m for m in METHODS if m in methods and m != "full_rebuild")):
        copy = base.parent / method
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(base, copy)
        copy_wh = _warehouse(copy)
        versions = {t: copy_wh.version(t) for t in tables}
        spark.catalog.clearCache()
        m = Measurement(method, history, per_day)
        mark = metrics.mark()
        with peak_memory(spark, m):
            t0 = time.perf_counter()
            run_method(method, copy, new_day)
            m.wall_seconds = round(time.perf_counter() - t0, 2)
        m.rows_read, m.bytes_read = metrics.since(mark)
        m.rows_written, m.files_added, m.files_removed = delta_writes(copy_wh, versions)
        observed = (_rows(copy_wh, SESSIONS), _rows(copy_wh, DAILY_SNAPSHOT))
        truth = truth or observed
        m.sessions_identical, m.snapshot_identical = observed[0] == truth[0], observed[1] == truth[1]
        results.append(m)
        print(f"  {method:13s} {m.wall_seconds:8.1f}s  rows read {m.rows_read:>11,}  "
              f"identical {m.sessions_identical}/{m.snapshot_identical}", flush=True)  # fmt: skip
    return sorted(results, key=lambda r: METHODS.index(r.method))


# --- reporting ------------------------------------------------------------------------------------------


def markdown(results: list[Measurement], startup: dict[str, float]) -> str:
    head = ("| H | method | wall s | rows read | MB read | rows written | files +/- | peak MB | "
            "sessions = full | snapshot = full |\n|---|---|---:|---:|---:|---:|---:|---:|---|---|\n")  # fmt: skip
    body = "".join(
        f"| {r.history_days} | {r.method} | {r.wall_seconds:.1f} | {r.rows_read:,} | {r.bytes_read / 2**20:.1f} | "
        f"{r.rows_written:,} | +{r.files_added}/-{r.files_removed} | {r.peak_memory_mb:.0f} | "
        f"{r.sessions_identical} | {r.snapshot_identical} |\n"
        for r in results
    )
    start = ", ".join(f"{k} {v:.1f}s" for k, v in startup.items())
    return f"{head}{body}\nStart-up, not in the figures above: {start}.\n"


def plot(results: list[Measurement], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for method in METHODS:
        rs = sorted((r for r in results if r.method == method), key=lambda r: r.history_days)
        axes[0].plot([r.history_days for r in rs], [r.wall_seconds for r in rs], marker="o", label=method)
        axes[1].plot([r.history_days for r in rs], [r.rows_read for r in rs], marker="o", label=method)
    for ax, label in zip(axes, ("wall time (s)", "rows read")):
        ax.set_xlabel("history H (days)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("One more received day after H days of history")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, nargs="+", default=[30, 90, 180])
    parser.add_argument("--events-per-day", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sessions-bench"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=METHODS,
        default=list(METHODS),
        help="methods to time (the full rebuild always runs: it is the reference)",
    )
    parser.add_argument(
        "--reuse-history",
        action="store_true",
        help="time on the history a previous run left in --workdir if it has the same H, volume and seed",
    )
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    from dagster_pyspark import LazyPySparkResource
    from sessions_assets.resources import spark_config

    config = spark_config(ui=True) | {"spark.ui.retainedJobs": "100000", "spark.ui.retainedStages": "100000",
                                      "spark.ui.showConsoleProgress": "false"}  # fmt: skip
    spark = LazyPySparkResource(spark_config=config).spark_session
    startup = {"spark": time.perf_counter() - t0}
    t1 = time.perf_counter()
    import sessions_assets.definitions  # noqa: F401 - Dagster definitions, loaded once

    startup["dagster"] = time.perf_counter() - t1

    results = []
    args.out.mkdir(parents=True, exist_ok=True)
    for history in args.history:
        results += bench_history(
            spark, args.workdir, history, args.events_per_day, args.seed, tuple(args.methods), args.reuse_history
        )
        # Written after every H, so that a long run stopped early keeps what it measured.
        (args.out / "incremental.json").write_text(
            json.dumps({"startup_seconds": startup, "results": [asdict(r) for r in results]}, indent=2)
        )
        (args.out / "incremental.md").write_text(markdown(results, startup))
        plot(results, args.out / "incremental.png")
    print(markdown(results, startup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
