"""What one more received day costs after a history of H received days: incremental against a full rebuild.

    python benchmarks/incremental.py --history 30 180 --events-per-day 5000
    python benchmarks/incremental.py --small-day        # ~800 events after 7 days, incremental timed 3 times
    python benchmarks/incremental.py --history 180 --events-per-day 100000 --baselines   # none: hours saved

For each H: generate H + 1 received days of Segment events (~90 % within a minute, ~7 % within 3 days, ~3 %
up to 180 days late; ~1 % re-delivered, some stamped across midnight; a few broken lines; ~4 % of anonymous
visitors' bursts log in, linking the visitor to a user as late as the burst arrives), load the first H
in ``--workdir`` (one ingest run of the H days, what a UI backfill runs, then one refresh: a full build), then
process the last day, warm and in-process, on copies of the warehouse and the Dagster instance:
``incremental`` (one ``process_job`` run: what the landing sensor launches) and ``full_rebuild``
(``Runner.ingest``, then a repair of every event day of every derived table: ``sessions-assets repair``).
Their ``events``, ``sessions``, ``users`` and ``daily_snapshot`` must be equal. Two baselines from the seed are timed and
compared too, each ingesting the day and then recomputing a window of days whole from ``raw_events`` with the
engine's functions (no ledger, no change feed): ``last_60_days``, and ``touched_days_pm1`` (the event days the
new day touched, and their neighbours), stitched with the links of every stored event; ``users`` and the
snapshot are then computed from every session. Where they differ from
the full rebuild, the report says how many rows. Results go to
``benchmarks/results/incremental.{md,json}``, keeping the rows of earlier invocations.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg
import pyspark
from pyspark.sql import functions as F

import sessions_assets
from sessions_assets.cli.generate import (
    AGENTS,
    APPS,
    Visitor,
    segment_broken_lines,
    segment_identify,
    segment_message,
    segment_redeliver,
)
from sessions_assets.cli.runner import Runner
from sessions_assets.cli.server import Server
from sessions_assets.engine import dedup, identity, lifecycle
from sessions_assets.engine.sessionize import sessionize
from sessions_assets.engine.users import IDENTIFIED, users
from sessions_assets.graph.names import DERIVED
from sessions_assets.graph.resources import SparkResource
from sessions_assets.settings import Settings
from sessions_assets.warehouse import pending, tables
from sessions_assets.warehouse.delta import Warehouse, on_days
from sessions_assets.warehouse.ledger import horizon
from sessions_assets.warehouse.spark import TOKEN_VARIABLE, spark_config
from sessions_assets.warehouse.storage import Storage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' reader of the Spark UI
from sessions_assets_tests.helpers.spark_ui import SparkUI, step_windows  # noqa: E402

RESULTS = Path(__file__).parent / "results"
# Share of bursts and the delay range each is received with (a burst is a visitor's events minutes apart).
LATENESS = {
    "on_time": (0.90, timedelta(0), timedelta(minutes=1)),
    "days_late": (0.07, timedelta(minutes=1), timedelta(days=3)),
    "months_late": (0.03, timedelta(days=3), timedelta(days=180)),
}
REDELIVERED = 0.01
LINKED = 0.04  # share of an anonymous visitor's bursts that log in: a link, received as late as the burst
COMPARED = (tables.EVENTS, tables.SESSIONS, tables.USERS, tables.DAILY_SNAPSHOT)
SPARK_KEYS = ("spark.master", "spark.driver.memory", "spark.sql.shuffle.partitions", "spark.driver.extraJavaOptions")


# --- data -----------------------------------------------------------------------------------------------


def generate(root: Path, days: list[date], per_day: int, seed: int) -> Counter:
    """Bursts of a visitor's events received on each day, with ``LATENESS``; copies go to the day they arrive."""
    rng = random.Random(seed)
    devices = [*AGENTS, *AGENTS, *APPS]
    visitors = [Visitor(f"user-{i:05d}", rng.random() < 0.15, rng.choice(devices)) for i in range(per_day // 4 + 10)]
    files, kinds = {}, Counter()
    for day in days:  # written as generated: a long history does not fit in memory
        folder = root / "landing" / f"received_date={day}"
        folder.mkdir(parents=True, exist_ok=True)
        files[day] = (folder / "part-0000.jsonl").open("w")

    def deliver(message: dict, received: datetime, kind: str) -> None:
        if received.date() in files:
            stamp = received.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            files[received.date()].write(json.dumps({**message, "receivedAt": stamp}) + "\n")
            kinds[kind] += 1

    for day in days:
        start, made = datetime.combine(day, datetime.min.time(), UTC), 0
        while made < per_day:
            roll = rng.random()
            kind = next((k for k, (share, _, _) in LATENESS.items() if (roll := roll - share) < 0), "months_late")
            _, low, high = LATENESS[kind]
            late, who = low + (high - low) * rng.random(), rng.choice(visitors)
            at = start + timedelta(seconds=rng.uniform(0, 86_399)) - late
            if who.anonymous and rng.random() < LINKED:
                member = Visitor(who.user, False, who.device)
                received = at + (late if kind != "on_time" else timedelta(seconds=rng.uniform(0, 60)))
                deliver(segment_identify(rng, member, at, received), received, f"{kind}_links")
            for n in range(1 + int(rng.expovariate(1 / 6))):
                received = at + (late if kind != "on_time" else timedelta(seconds=rng.uniform(0, 60)))
                message = segment_message(rng, who, at, received, landing=n == 0)
                deliver(message, received, kind)
                if rng.random() < REDELIVERED:
                    segment_redeliver(rng, message, at, received, deliver)
                at, made = at + timedelta(seconds=rng.expovariate(1 / 120)), made + 1
        for kind, line in segment_broken_lines(rng, start + timedelta(hours=12)):
            files[day].write(line + "\n")
            kinds[kind] += 1
    for file in files.values():
        file.close()
    return kinds


# --- measuring ------------------------------------------------------------------------------------------


@dataclass
class Measurement:
    wall_s: list[float] = field(default_factory=list)  # one per timed repetition
    steps_s: list[dict[str, float]] = field(default_factory=list)  # step -> seconds, per repetition
    writes: dict[str, dict[str, int]] = field(default_factory=dict)  # table -> rows, files added/removed
    peak_rss_mb: float = 0.0  # this process plus the Spark driver JVM
    load: list[tuple[float, float, float]] = field(default_factory=list)  # load averages at each start
    differences: dict[str, dict] = field(default_factory=dict)  # table -> rows only in one side
    # Per repetition, step -> what it cost the Spark server (``Bill.row``: SQL executions, jobs, stages, bytes read,
    # shuffle read, task seconds), when its UI is on (``--connect``).
    spark: list[dict[str, list]] = field(default_factory=list)


def _rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@contextmanager
def peak_rss(pids: tuple[int, ...], into: Measurement) -> Iterator[None]:
    """While the block runs, the highest summed RSS of ``pids`` (sampled every 0.1 s) into ``into``."""
    done = threading.Event()

    def sample() -> None:
        while True:
            into.peak_rss_mb = max(into.peak_rss_mb, sum(map(_rss_mb, pids)))
            if done.wait(0.1):
                return

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def dagster(root: Path) -> tuple[dg.DagsterInstance, Runner]:
    """The Dagster instance kept in the data root, and a Runner on it with the project's resources."""
    (root / "dagster_home").mkdir(exist_ok=True)
    inst = dg.DagsterInstance.from_config(str(root / "dagster_home"))
    return inst, Runner(inst, Settings.from_env(data_root=str(root)))


def delta_writes(wh: Warehouse, before: dict[str, int]) -> dict[str, dict[str, int]]:
    """Per table: rows written and files added/removed by the commits after ``before`` (its ``_delta_log``)."""
    writes = {}
    for table in tables.ALL:
        total = Counter()
        for version in range(before[table.name] + 1, wh.version(table) + 1):
            m = {k: int(v) for k, v in wh.log(table).commit_info(version).get("operationMetrics", {}).items()}
            total["rows"] += m.get("numOutputRows", 0)
            total["added"] += m.get("numFiles", m.get("numAddedFiles", 0)) + m.get("numTargetFilesAdded", 0)
            total["removed"] += m.get("numRemovedFiles", 0) + m.get("numTargetFilesRemoved", 0)
            total["commits"] += 1
        if total:
            writes[table.name] = dict(total)
    return writes


def run_method(spark, method: str, root: Path, day: date, history: int, m: Measurement) -> None:
    """Process ``day`` on the copy at ``root`` one way, adding its times, writes and memory to ``m``."""
    wh = Warehouse(spark, Storage(str(root)))
    before = {t.name: wh.version(t) for t in tables.ALL}
    m.load.append(os.getloadavg())
    pids = (os.getpid(), DRIVER_PID)
    inst, run = dagster(root)
    with inst, peak_rss(pids, m):
        started = time.perf_counter()
        naive = {}
        if method == "incremental":
            runs = [run.ingest_and_refresh(day)]
        elif method == "full_rebuild":  # every day an event can be on: the oldest lateness up to tomorrow
            first = day - timedelta(days=history + 1) - LATENESS["months_late"][2]
            runs = [run.ingest(day), run.repair(first, day + timedelta(days=1), set(DERIVED))]
        else:
            runs = [run.ingest(day)]
            naive = recompute_window(wh, Settings.from_env(data_root=str(root)), baseline_window(wh, method, day))
        wall = time.perf_counter() - started
        windows = step_windows(inst, [r.run_id for r in runs])
        steps = {step: end - start for step, (start, end) in windows.items()}
        steps |= naive
        steps["dagster"] = wall - sum(steps.values())
    m.wall_s.append(round(wall, 2))
    m.steps_s.append({k: round(v, 2) for k, v in steps.items()})
    if UI is not None and method == "incremental":
        bills = UI.bills(windows)
        m.spark.append({step: list(bill.row()) for step, bill in bills.items()})
        print(f"  Spark per step (sql, jobs, stages, bytes read, shuffle read, task s): {m.spark[-1]}", flush=True)
    m.writes = delta_writes(wh, before)


BASELINES = ("last_60_days", "touched_days_pm1")


def baseline_window(wh: Warehouse, method: str, day: date) -> list[date]:
    if method == "last_60_days":
        return [day - timedelta(days=n) for n in range(-1, 60)]
    touched = wh.read(tables.PARTITION_MAP).where(F.col("received_date") == F.lit(day)).select("event_date")
    return sorted({d + timedelta(days=k) for (d,) in touched.collect() for k in (-1, 0, 1)})


def recompute_window(wh: Warehouse, settings: Settings, days: list[date]) -> dict[str, float]:
    """Events and sessions of ``days`` recomputed whole from ``raw_events``, the snapshot from every session:
    what "rebuild the last N days" does. Returns each table's seconds."""
    seconds, started = {}, time.perf_counter()
    events_window, sessions_window = on_days("event_date", days), on_days("session_date", days)
    copies = wh.read(tables.RAW_EVENTS).where(events_window)
    kept = dedup.keep_first(copies).select(*tables.EVENTS.columns).localCheckpoint()
    if settings.stitch_identities:
        links = wh.read(tables.EVENTS).where(f"NOT ({events_window})").select(*kept.columns).unionByName(kept)
        kept = identity.stitch(kept, identity.persons(links))
    wh.replace_where(tables.EVENTS, kept, events_window)
    seconds["events"], started = time.perf_counter() - started, time.perf_counter()
    window_sessions = sessionize(wh.read(tables.EVENTS).where(events_window), settings).where(sessions_window)
    wh.replace_where(tables.SESSIONS, window_sessions, sessions_window)
    seconds["sessions"], started = time.perf_counter() - started, time.perf_counter()
    wh.overwrite(tables.USERS, users(wh.read(tables.SESSIONS), wh.read(tables.EVENTS).select(*IDENTIFIED)))
    seconds["users"], started = time.perf_counter() - started, time.perf_counter()
    every_day = wh.read(tables.SESSIONS).select("user_key", F.col("session_date").alias("day"))
    totals = lifecycle.transitions(every_day, settings).localCheckpoint()
    wh.overwrite(tables.LIFECYCLE, totals)
    wh.overwrite(tables.DAILY_SNAPSHOT, lifecycle.snapshot(totals, horizon(wh.storage)))
    seconds["daily_snapshot"] = time.perf_counter() - started
    return seconds


def differences(spark, left: Path, right: Path) -> dict[str, dict]:
    """Rows of each compared table found on one side only (as multisets), a few shown whole."""
    found = {}
    for table in COMPARED:
        a, b = (Warehouse(spark, Storage(str(root))).read(table) for root in (left, right))
        only = {"incremental_only": a.exceptAll(b).cache(), "full_only": b.exceptAll(a).cache()}  # left, right
        counts = {k: df.count() for k, df in only.items()}
        if any(counts.values()):
            shown = {
                f"{k}_rows": [r.asDict() for r in df.orderBy(*df.columns[:3]).limit(20).collect()]
                for k, df in only.items()
            }
            found[table.name] = counts | shown
        for df in only.values():
            df.unpersist()
    return found


# --- one history ----------------------------------------------------------------------------------------


def prepare(workdir: Path, history: int, per_day: int, seed: int, reuse: bool) -> tuple[Path, date, dict]:
    """The loaded history (generated and loaded unless ``reuse`` finds it), its next day, and how long it took."""
    base = workdir / f"h{history}-e{per_day}-s{seed}" / "base"
    made = base / "history.json"
    if reuse and made.exists():
        phases = json.loads(made.read_text())
        print(f"H={history}: reusing {base}", flush=True)
        inst, run = dagster(base)
        with inst:
            due = pending.backlog(Storage(str(base)), run.bounds())
            if due is not None:  # a table this code keeps and the history lacks is built once, before any timing
                run.refresh(due)
                print(f"H={history}: brought up to date with this code", flush=True)
        return base, date.fromisoformat(phases["new_day"]), phases
    shutil.rmtree(base.parent, ignore_errors=True)
    new_day = datetime.now(UTC).date() - timedelta(days=1)
    days = [new_day - timedelta(days=history - i) for i in range(history + 1)]
    started = time.perf_counter()
    kinds = generate(base, days, per_day, seed)
    phases = {"new_day": new_day.isoformat(), "generate_s": round(time.perf_counter() - started, 1)}
    phases |= {"lines": sum(kinds.values()), "kinds": dict(kinds), "load_before": os.getloadavg()}
    print(f"H={history}: {phases['lines']:,} lines generated in {phases['generate_s']}s: {dict(kinds)}", flush=True)
    started = time.perf_counter()
    inst, run = dagster(base)
    with inst:
        run.ingest(days[0], days[-2])
        phases["ingest_s"] = round(time.perf_counter() - started, 1)
        run.refresh(pending.backlog(Storage(str(base)), run.bounds()))
    phases["load_s"] = round(time.perf_counter() - started, 1)
    phases["build_s"], phases["load_after"] = round(phases["load_s"] - phases["ingest_s"], 1), os.getloadavg()
    print(
        f"H={history}: loaded in {phases['load_s']}s (ingests {phases['ingest_s']}s, build {phases['build_s']}s)",
        flush=True,
    )
    made.write_text(json.dumps(phases))
    return base, new_day, phases


def copy_of(base: Path, name: str) -> Path:
    """The warehouse and Dagster instance copied; the landing zone (read only) shared."""
    copy = base.parent / name
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir()
    for part in ("warehouse", "dagster_home"):
        shutil.copytree(base / part, copy / part)
    (copy / "landing").symlink_to(base / "landing")
    return copy


def bench(spark, args, history: int, per_day: int, repeat: int, mode: str) -> dict:
    """The case's history and what each method measured on it."""
    base, day, phases = prepare(args.workdir, history, per_day, args.seed, args.reuse_history)
    run_method(spark, "incremental", copy_of(base, "warmup"), day, history, Measurement())
    methods = {method: Measurement() for method in ("incremental", "full_rebuild", *args.baselines)}
    for method, m in methods.items():
        for _ in range(repeat if method == "incremental" else 1):
            run_method(spark, method, copy_of(base, method), day, history, m)
            print(f"  {method:16s} {m.wall_s[-1]:7.1f}s  {m.steps_s[-1]}  load {m.load[-1]}", flush=True)
    for method in ("incremental", *args.baselines):
        diff = differences(spark, base.parent / method, base.parent / "full_rebuild")
        methods[method].differences = diff
        print(
            f"  {method} = full rebuild" if not diff else f"  {method} DIFFERENT: {json.dumps(diff, default=str)[:600]}"
        )
    measured = {k: asdict(m) for k, m in methods.items()}
    spark_mode = "Spark Connect" if args.connect else "own driver"
    return dict(
        mode=mode,
        spark=spark_mode,
        history=history,
        events_per_day=per_day,
        **phases,
        methods=measured,
        commit=commit(),
    )


# --- reporting ------------------------------------------------------------------------------------------


def _stat(values: list[float]) -> str:
    """The value, or min / median of repetitions."""
    return f"{min(values):.1f}" + (f" / {statistics.median(values):.1f}" if len(values) > 1 else "")


def _row(case: dict, method: str) -> str:
    m, full = case["methods"][method], case["methods"]["full_rebuild"]
    w, load = m["writes"].values(), " ".join(f"{x:.1f}" for x in m["load"][0])
    steps = [_stat([t.get(s, 0.0) for t in m["steps_s"]]) for s in ("ingest", *DERIVED, "dagster")]
    versus = ["", ""]
    if m is not full:
        wrong = sum(d["incremental_only"] + d["full_only"] for d in m["differences"].values())
        versus = [f"{min(m['wall_s']) / min(full['wall_s']):.2f}", f"**NO**: {wrong:,} rows" if wrong else "yes"]
    return (
        f"| {case['mode']} | {case.get('spark', 'own driver')} | {case['history']} | {case['events_per_day']:,} "
        f"| {method} | {len(m['wall_s'])} "
        f"| {_stat(m['wall_s'])} | {' | '.join(steps)} | {sum(t['rows'] for t in w):,} "
        f"| +{sum(t['added'] for t in w)}/-{sum(t['removed'] for t in w)} | {m['peak_rss_mb']:,.0f} | {load} "
        f"| {' | '.join(versus)} |"
    )


def _server_bills(cases: list[dict]) -> list[str]:
    """What each step of the incremental run cost the Spark Connect server, from its UI's REST API (the first timed
    run of each case measured with ``--connect``): whether a step's work grows with the history shows here."""
    measured = [c for c in cases if c["methods"]["incremental"].get("spark")]
    if not measured:
        return []
    lines = [
        "What each step of the incremental run cost the Spark Connect server (its UI's REST API, the first timed run):",
        "SQL executions, jobs, bytes its tasks read from storage, shuffle they read, and their summed run time.",
        "",
        "| mode | H | events/day | step | SQL executions | jobs | read MB | shuffle MB | task s |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for case in measured:
        for step, (sql, jobs, _, read, shuffle, task) in case["methods"]["incremental"]["spark"][0].items():
            lines.append(
                f"| {case['mode']} | {case['history']} | {case['events_per_day']:,} | {step} | {sql} | {jobs} "
                f"| {read / 1e6:,.1f} | {shuffle / 1e6:,.1f} | {task:,.1f} |"
            )
    return [*lines, ""]


def markdown(report: dict) -> str:
    cases = sorted(
        report["cases"].values(),
        key=lambda c: (c["mode"] != "small-day", c["events_per_day"], c["history"], c.get("spark", "own driver")),
    )
    return "\n".join(
        [
            "# One more received day: incremental against a full rebuild",
            "",
            f"{report['machine']}; last measured {report['date']}, each case on the code at its commit: "
            + ", ".join(
                f"{c['mode']} ({c.get('spark', 'own driver')}) H={c['history']} {c['events_per_day']:,}/day at "
                f"{c.get('commit', report['commit'])}"
                for c in cases
            )
            + ".",
            "`load` is the 1/5/15-minute load average when the row's first timed run started. Spark: "
            + ", ".join(f"`{k}={v}`" for k, v in report["spark"].items())
            + ".",
            "Warm, in one process. Wall = the run (incremental: one run that ingests and refreshes; full rebuild: an",
            "ingest run and a repair run) (min, or min / median); steps from Dagster's step",
            "stats, `dagster` = the rest. Rows written, data files +/-: every table's commits' `operationMetrics`.",
            "Spark: the runs' own driver in this process, or a session of a Spark Connect server on this machine "
            "(warmed by the warm-up run). Peak RSS: this process + the Spark driver JVM (the server's). `÷ full`: wall / full-rebuild wall; `= full`: equal to the",
            "full rebuild, or how many rows differ. The baselines recompute a window from `raw_events` outside Dagster",
            "(their step columns: the window's events and sessions; users and the snapshot from every session).",
            "",
            "| mode | Spark | H | events/day | method | runs | wall s | ingest s | "
            + "".join(f"{step} s | " for step in DERIVED)
            + "dagster s | rows written | files +/- | peak RSS MB | load | ÷ full | = full |",
            "|---|---|---:|---:|---|---:|---:|---:|" + "---:|" * len(DERIVED) + "---:|---:|---:|---:|---|---:|---|",
            *(_row(case, method) for case in cases for method in case["methods"]),
            "",
            *_server_bills(cases),
            "Loading the history (not in the figures above): generating H + 1 days, one ingest run of the H days (a",
            "UI backfill's run), one refresh that builds every table.",
            "",
            "| mode | H | events/day | lines | generate s | ingest run s | per day s | build s | load after |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
            *(
                f"| {c['mode']} | {c['history']} | {c['events_per_day']:,} | {c['lines']:,} | {c['generate_s']} "
                f"| {c['ingest_s']} | {c['ingest_s'] / c['history']:.1f} | {c['build_s']} "
                f"| {' '.join(f'{x:.1f}' for x in c['load_after'])} |"
                for c in cases
            ),
            "",
        ]
    )


DRIVER_PID = 0  # the JVM holding the Spark driver: this process's, or the Spark Connect server
UI: SparkUI | None = None  # the Spark Connect server's UI, which the benchmark turns on


def start_spark(args):
    """A session of this process's own driver, or (``--connect``) of a Spark Connect server started for the
    benchmark, which every run then attaches to (``SPARK_REMOTE``)."""
    global DRIVER_PID
    global UI
    if args.connect:
        ui_port = free_port()
        os.environ["SPARK_UI"] = "true"
        os.environ["SPARK_CONF"] = f"{os.environ.get('SPARK_CONF', '')} spark.ui.port={ui_port}".strip()
        server = Server(args.workdir / "spark-server")
        print(server.start(port=free_port()), flush=True)
        atexit.register(server.stop)
        os.environ["SPARK_REMOTE"] = server.running()["url"]
        os.environ[TOKEN_VARIABLE] = server.token()
        DRIVER_PID = server.running()["pid"]
        UI = SparkUI(f"http://127.0.0.1:{ui_port}")
        return SparkResource(spark_config=spark_config(), remote=os.environ["SPARK_REMOTE"]).spark_session
    from pyspark import SparkContext

    spark = SparkResource(spark_config=spark_config(), remote="").spark_session
    DRIVER_PID = SparkContext._gateway.proc.pid  # the driver JVM pyspark started for this process
    return spark


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commit() -> str:
    """The commit of the measured code (the checkout ``sessions_assets`` is imported from)."""
    where = Path(sessions_assets.__file__).parent
    found = subprocess.run(["git", "-C", str(where), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return found.stdout.strip() or "unknown"


def machine() -> str:
    cpu = next(s for s in Path("/proc/cpuinfo").read_text().splitlines() if s.startswith("model name"))
    memory = int(Path("/proc/meminfo").read_text().split()[1]) / 2**20
    return (
        f"{cpu.split(':')[1].strip()}, {os.cpu_count()} cores, {memory:.0f} GiB, Python {platform.python_version()},"
        f" PySpark {pyspark.__version__}, Dagster {dg.__version__}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, nargs="+", default=[30])
    parser.add_argument("--events-per-day", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=1, help="timed runs of the incremental method")
    parser.add_argument("--small-day", action="store_true", help="--history 7 --events-per-day 800 --repeat 3")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--connect", action="store_true", help="runs attach to a Spark Connect server (started here)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sessions-bench"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--reuse-history", action="store_true", help="time again on a history in --workdir")
    parser.add_argument(
        "--baselines", nargs="*", choices=BASELINES, default=list(BASELINES), help="the baselines timed (all)"
    )
    args = parser.parse_args(argv)
    os.environ["TZ"] = "UTC"
    time.tzset()
    mode, histories, per_day, repeat = "daily", args.history, args.events_per_day, args.repeat
    if args.small_day:
        mode, histories, per_day, repeat = "small-day", [7], 800, 3
    started = time.perf_counter()
    spark = start_spark(args)
    print(f"Spark started in {time.perf_counter() - started:.1f}s", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "incremental.json"
    report = json.loads(path.read_text()) if path.exists() else {"cases": {}}
    report |= {
        "machine": machine(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "commit": commit(),
        "spark": {k: spark_config()[k] for k in SPARK_KEYS},
    }
    for history in histories:
        key = f"{mode} {'connect' if args.connect else 'classic'} {history} {per_day}"
        report["cases"][key] = bench(spark, args, history, per_day, repeat, mode)
        # Written after every H, so that a long run stopped early keeps what it measured.
        path.write_text(json.dumps(report, indent=1, default=str))
        (args.out / "incremental.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
