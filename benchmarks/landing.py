"""From a received-day folder landing to built tables, under ``dg dev`` with the sensors on (the default tick).

    python benchmarks/landing.py [--days 1 2] [--users 100] [--modes connect classic]

For each mode and count N: a fresh data root and instance, ``dg dev`` started and warm (its code location loaded),
a first day dropped in and processed (the tables exist), then N more days dropped in at once; the figure is the
time from that drop until every derived table is current and no run is in flight (polled each second). Modes:
``connect``, every run attached to a Spark Connect server started for the measurement, as ``make dev`` runs;
``classic``, every run starting a driver of its own. Results go to ``benchmarks/results/landing.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' dg dev harness

from sessions_assets.cli.generate import generate_landing_zone  # noqa: E402
from sessions_assets.cli.server import Server  # noqa: E402
from sessions_assets.graph.partitions import bounds, calendars  # noqa: E402
from sessions_assets.settings import Settings  # noqa: E402
from sessions_assets.warehouse import pending  # noqa: E402
from sessions_assets.warehouse.spark import TOKEN_VARIABLE  # noqa: E402
from sessions_assets.warehouse.storage import Storage  # noqa: E402
from sessions_assets_tests.helpers.deployed import PROJECT, DagsterDev, free_port  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def settle(dev: DagsterDev, storage: Storage, timeout: float = 900) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        days = bounds(calendars(Settings.from_env()).received)
        if not pending.arrivals(storage, days).due and pending.backlog(storage, days) is None and dev.idle():
            return time.monotonic() - started
        time.sleep(1)
    raise TimeoutError(f"not settled in {timeout} s:\n{dev.tail()}")


@contextmanager
def stopping(server: Server) -> Iterator[None]:
    try:
        yield
    finally:
        server.stop()


def measure(mode: str, days: int, users: int) -> tuple[float, list[dict]]:
    with tempfile.TemporaryDirectory(prefix="sessions-landing-") as work:
        work = Path(work)
        staging, root, home = work / "staging", work / "data", work / "home"
        generate_landing_zone(str(staging), days=days + 1, users=users, seed=3)
        (root / "landing").mkdir(parents=True)
        home.mkdir()
        shutil.copy(PROJECT / "dagster.yaml", home / "dagster.yaml")
        venv = Path(sys.executable).parent.parent
        env = {
            **os.environ,
            "SESSIONS_DATA_ROOT": str(root),
            "TZ": "UTC",
            "VIRTUAL_ENV": str(venv),
            "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        }
        env.pop("SPARK_REMOTE", None)
        server = Server(work / "spark-server")
        if mode == "connect":
            server.start(port=free_port())
            env["SPARK_REMOTE"] = server.running()["url"]
            env[TOKEN_VARIABLE] = server.token()
        folders = sorted((staging / "landing").iterdir())
        storage = Storage(str(root))
        command = [str(venv / "bin" / "dg"), "dev", "--use-active-venv"]
        with DagsterDev(home, env, command, work / "dev.log") as dev, stopping(server):
            shutil.move(folders[0], root / "landing" / folders[0].name)
            settle(dev, storage)
            dropped = time.monotonic()
            for folder in folders[1:]:
                shutil.move(folder, root / "landing" / folder.name)
            settle(dev, storage)
            seconds = time.monotonic() - dropped
            return seconds, dev.runs()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--users", type=int, default=100, help="users of the generated days (100: ~800 events a day)")
    parser.add_argument("--modes", nargs="+", choices=("connect", "classic"), default=["connect", "classic"])
    args = parser.parse_args(argv)
    rows = []
    for mode in args.modes:
        for days in args.days:
            seconds, runs = measure(mode, days, args.users)
            jobs = [r["jobName"] for r in runs]
            print(f"{mode}, {days} day(s): {seconds:.0f} s, runs {jobs}", flush=True)
            rows.append(
                f"| {mode} | {days} | {args.users} | {seconds:.0f} | {len(runs) - 1} | {', '.join(jobs[:-1])} |"
            )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "landing.md").write_text(
        "\n".join(
            [
                "# From landing to built tables under `dg dev`",
                "",
                f"Measured {datetime.now(UTC):%Y-%m-%d} on {os.cpu_count()} cores: days dropped into the landing zone at",
                "once after a first day was processed, until every derived table is current and nothing is in flight.",
                "The sensors tick every 10 s; each run is a new process. `connect`: its runs attach to a Spark Connect",
                "server (`make dev`); `classic`: each run starts a Spark driver of its own.",
                "",
                "| runs' Spark | days dropped | users | seconds | runs | jobs |",
                "|---|---:|---:|---:|---:|---|",
                *rows,
                "",
            ]
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
