"""What a received day costs the Spark server, counted: the SQL executions (as its UI's REST API lists them), jobs and
Delta commits of one ``sessions-assets run``, which ingests the day and refreshes every table, against a budget.

On a server of the test's own, with its UI on, that nothing else uses while the run goes: the queries submitted in
the run's window are the run's, and those in a step's window (its start and end in Dagster's log) the step's. Two
days after a short history: a small day (new visits, no login, no copy of a message stored already), and a day with a
late login linking a device's past browsing and a re-delivered copy stamped differently. A count past its budget
fails the test, so a step's queries cannot creep back.
"""

from __future__ import annotations

import os
import time

import dagster as dg
import pytest

from sessions_assets.cli.server import Server
from sessions_assets.warehouse.delta import DeltaLog
from sessions_assets.warehouse.spark import TOKEN_VARIABLE
from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import ALL
from sessions_assets_tests.helpers.deployed import free_port
from sessions_assets_tests.helpers.landing import segment, write_day
from sessions_assets_tests.helpers.spark_ui import SparkUI, step_windows
from sessions_assets_tests.slow.commands import cli

pytestmark = pytest.mark.slow

# SQL executions of a whole run (ingest and every refresh) and of each of its steps, as measured with a little room
# for the order the server plans them in. Most are Delta's own: each table read or written plans its files on the
# table's state, and each query that refers to a change feed plans it anew. The ``events`` step keeps
# ``identities``, ``daily_snapshot`` the lifecycle.
BUDGET = {
    "small_day": {"run": 161, "ingest": 26, "events": 38, "sessions": 33, "daily_snapshot": 31, "users": 37},
    "links_and_corrections": {
        "run": 225,
        "ingest": 28,
        "events": 78,
        "sessions": 52,
        "daily_snapshot": 33,
        "users": 40,
    },
}

HISTORY = {
    "2024-03-04": [segment(f"h4-{n}", f"u{n}", f"2024-03-04 {9 + n:02d}:00") for n in range(4)],
    "2024-03-05": [
        *(segment(f"h5-{n}", f"u{n}", f"2024-03-05 {9 + n:02d}:10") for n in range(4)),
        segment("browse", None, "2024-03-05 20:00", anonymousId="dev"),
        segment("copied", "u1", "2024-03-05 21:00"),
    ],
}
SMALL_DAY = {"2024-03-06": [segment(f"s-{n}", f"u{n}", f"2024-03-06 {9 + n:02d}:20") for n in range(6)]}
LINKS_AND_CORRECTIONS = {
    "2024-03-07": [
        segment("login", "u9", "2024-03-05 20:10", "2024-03-07 08:00", anonymousId="dev"),  # a late link
        segment("copied", "u1", "2024-03-05 20:58", "2024-03-05 21:00:02"),  # a retried copy, received first
        segment("s-new", "u2", "2024-03-07 10:00"),
    ]
}


@pytest.fixture
def counted_server(tmp_path):
    """A Spark Connect server of the test's own with its UI on (its REST API counts the queries), and the UI."""
    ui_port = free_port()
    saved = {k: os.environ.get(k) for k in ("SPARK_UI", "SPARK_CONF")}
    os.environ["SPARK_UI"] = "true"
    os.environ["SPARK_CONF"] = f"{saved['SPARK_CONF'] or ''} spark.ui.port={ui_port}".strip()
    server = Server(tmp_path / "spark-server")
    try:
        server.start(port=free_port())
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key)
            else:
                os.environ[key] = value
    try:
        yield server, SparkUI(f"http://127.0.0.1:{ui_port}")
    finally:
        server.stop()


def test_a_day_costs_the_server_no_more_queries_than_its_budget(tmp_path, counted_server):
    server, ui = counted_server
    root = tmp_path / "data"
    env = {"SPARK_REMOTE": server.running()["url"], TOKEN_VARIABLE: server.token()}
    storage = Storage(str(root))

    def arrive(days: dict[str, list[str]]) -> dict[str, int]:
        """The run's SQL executions, whole and by step; its commits."""
        for day, lines in days.items():
            write_day(root, day, lines)
        commits = {t.name: len(DeltaLog(storage, t).versions()) for t in ALL}
        since = time.time()
        cli("run", "--data-root", str(root), cwd=tmp_path, env=env)
        until = time.time()
        with dg.DagsterInstance.from_config(str(root / "dagster_home")) as instance:
            runs = [r.dagster_run.run_id for r in instance.get_run_records() if r.create_timestamp.timestamp() >= since]
            windows = step_windows(instance, runs)
        counted = {name: bill.sql for name, bill in ui.bills({"run": (since, until), **windows}).items()}
        counted["commits"] = sum(len(DeltaLog(storage, t).versions()) - commits[t.name] for t in ALL)
        return counted

    arrive(HISTORY)  # the tables built: the days below are incremental (a count needs no warm server)
    counted = {
        name: arrive(days)
        for name, days in (("small_day", SMALL_DAY), ("links_and_corrections", LINKS_AND_CORRECTIONS))
    }
    print(f"SQL executions and commits: {counted}")
    for name, budget in BUDGET.items():
        assert set(budget) <= set(counted[name]), f"{name}: no step {set(budget) - set(counted[name])} was counted"
    over = {
        name: {k: f"{counted[name][k]} > {limit}" for k, limit in budget.items() if counted[name][k] > limit}
        for name, budget in BUDGET.items()
    }
    assert not any(over.values()), over
