"""What goes wrong around ``sessions-assets run``: two at once, one killed, its Spark Connect server killed, a
landing zone with stray files.

Runs are real ``sessions-assets`` processes on a fresh data root with no ``DAGSTER_HOME``, so their Dagster
instance lives in the data root (created under a file lock); the stray files are processed in this process
against that same instance, then ``status`` is asked. Each scenario ends with every table equal to the
oracle's full recompute.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import date
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.spark import TOKEN_VARIABLE
from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import REJECTED_EVENTS, SESSIONS
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import segment, write_day
from sessions_assets_tests.slow.commands import TIMEOUT, python_traceback, run, start

pytestmark = pytest.mark.slow
# Small landing zones: two received days of five users (and the generator's two bots).
GENERATE = ("--days", "2", "--users", "5")


def generated(work: Path, seed: int) -> Path:
    root = work / "data"
    done = run("generate", "--data-root", str(root), *GENERATE, "--seed", str(seed), cwd=work)
    assert done.returncode == 0, done.stderr
    return root


def start_run(root: Path, name: str) -> tuple[subprocess.Popen, Path]:
    """``sessions-assets run`` in its own process group; its output goes to ``<name>.out`` / ``<name>.err``."""
    out = root.parent / name
    return start("run", "--data-root", str(root), cwd=root.parent, out=out), out


def finished(process: subprocess.Popen, out: Path) -> tuple[int, str, str]:
    try:
        code = process.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    return code, Path(f"{out}.out").read_text(), Path(f"{out}.err").read_text()


def sessions_counted_twice(wh: Warehouse) -> list:
    return wh.read(SESSIONS).groupBy("session_id").count().where(F.col("count") > 1).collect()


def test_two_runs_at_once_never_commit_a_session_twice(tmp_path, spark):
    root = generated(tmp_path, seed=11)

    racing = [start_run(root, "first"), start_run(root, "second")]
    outcomes = [finished(*run) for run in racing]

    for code, stdout, stderr in outcomes:
        assert not python_traceback(stderr), stderr[-3000:]
        if code == 0:
            assert stdout.splitlines()[-1].startswith(("Done in ", "Nothing to do")), stdout
        else:  # the loser says why in one line of its own, and claims nothing
            said = [line for line in stderr.splitlines() if line.startswith("sessions-assets")]
            assert len(said) == 1, stderr[-3000:]
            assert "Done in" not in stdout
    wh = Warehouse(spark, Storage(str(root)))
    if all(code == 0 for code, _, _ in outcomes):  # both claim to be done: the tables must already be right
        assert_tables_match_oracle(wh, root)
    third = run("run", "--data-root", str(root), cwd=tmp_path)
    assert third.returncode == 0, third.stdout + third.stderr[-3000:]
    assert sessions_counted_twice(wh) == []
    assert_tables_match_oracle(wh, root)


def test_a_run_killed_after_its_first_commit_is_completed_by_the_next_run(tmp_path, spark):
    root = generated(tmp_path, seed=12)
    raw_commit = root / "warehouse" / "raw_events" / "_delta_log" / f"{1:020d}.json"

    process, out = start_run(root, "killed")
    deadline = time.monotonic() + TIMEOUT
    while not raw_commit.exists():  # the first received day's accepted lines are committed
        assert process.poll() is None, f"the run ended before its first commit:\n{Path(f'{out}.err').read_text()}"
        assert time.monotonic() < deadline, "no commit to raw_events in time"
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (root / "warehouse" / "sessions").exists()

    rerun = run("run", "--data-root", str(root), cwd=tmp_path)

    assert rerun.returncode == 0, rerun.stdout + rerun.stderr[-3000:]
    assert_tables_match_oracle(Warehouse(spark, Storage(str(root))), root)


D1, D2 = date(2024, 3, 11), date(2024, 3, 12)
HIDDEN = "hidden name (starts with '.' or '_'): an upload in progress or a marker file"


def test_hidden_files_are_reported_unread_and_a_folder_that_is_no_received_day_blocks_nothing(tmp_path, spark):
    """Processed in this process against the instance ``run`` keeps in the data root, then asked with ``status``."""
    import dagster as dg

    from sessions_assets.cli.runner import Runner
    from sessions_assets.settings import Settings

    root = tmp_path / "data"
    write_day(root, D1, [segment("a1", "u1", "2024-03-11 10:00"), segment("a2", "u1", "2024-03-11 10:20"), "{oops"])
    write_day(root, D1, [segment("r1", "u1", "2024-03-11 10:40")], "_retry.jsonl")
    write_day(root, D1, [segment("l1", "u2", "2024-03-10 23:50", "2024-03-11 08:00")], ".late.jsonl")
    write_day(
        root, D2, [segment("b1", "u2", "2024-03-12 09:00"), segment("a3", "u1", "2024-03-11 10:30", "2024-03-12 01:00")]
    )
    (root / "landing" / "notes").mkdir()
    (root / "landing" / "notes" / "part-0000.jsonl").write_text(segment("n1", "u3", "2024-03-12 09:00") + "\n")
    (root / "dagster_home").mkdir()

    with dg.DagsterInstance.from_config(str(root / "dagster_home")) as instance:
        runs, refreshed = Runner(instance, Settings(data_root=str(root))).process()

    assert len(runs) == 1 and refreshed is not None  # both days in one run, which also refreshes
    files = {f.pop("file"): f for f in runs[0].metadata["raw_events"]["files"] if f.pop("received_day") == str(D1)}
    assert files == {
        ".late.jsonl": {"skipped": "skipped_file", "detail": HIDDEN},
        "_retry.jsonl": {"skipped": "skipped_file", "detail": HIDDEN},
        "part-0000.jsonl": {"lines": 3, "accepted": 2, "rejected": 1, "suppressed": 0},
    }
    wh = Warehouse(spark, Storage(str(root)))
    unread = wh.read(REJECTED_EVENTS).where(F.col("payload").isNull()).collect()
    assert sorted((r.received_date, r.source_file.rsplit("/", 1)[-1], r.reason, r.detail) for r in unread) == [
        (D1, ".late.jsonl", "skipped_file", HIDDEN),
        (D1, "_retry.jsonl", "skipped_file", HIDDEN),
    ]
    assert_tables_match_oracle(wh, root)  # the oracle reads no hidden file and no stray folder either
    status = run("status", "--data-root", str(root), cwd=tmp_path)
    assert (status.returncode, status.stdout) == (
        0,
        "received days to ingest: none\nrefresh due: no\nforget requests not done: none\n"
        "skipped landing folder notes: not named received_date=YYYY-MM-DD, skipped\n",
    )


def test_a_server_killed_during_a_refresh_fails_the_run_in_one_line_and_the_next_run_completes_it(
    tmp_path, spark, connect_server
):
    """A server of the test's own, killed once the run's refresh has begun; started again on the same port, with
    the same token."""
    root = generated(tmp_path, seed=22)
    url, token = connect_server.running()["url"], connect_server.token()
    attached = {"SPARK_REMOTE": url, TOKEN_VARIABLE: token}
    process = start("run", "--data-root", str(root), cwd=tmp_path, out=tmp_path / "killed", env=attached)
    events = root / "warehouse" / "events" / "_delta_log"
    deadline = time.monotonic() + TIMEOUT
    while not events.is_dir():  # the ingest is committed, the refresh has begun
        assert process.poll() is None, Path(f"{tmp_path / 'killed'}.err").read_text()[-3000:]
        assert time.monotonic() < deadline, "the refresh did not begin in time"
        time.sleep(0.1)
    os.killpg(connect_server.running()["pid"], signal.SIGKILL)

    code, stdout, stderr = finished(process, tmp_path / "killed")

    assert code == 1 and "Done in" not in stdout, stdout + stderr[-3000:]
    assert not python_traceback(stderr), stderr[-3000:]
    [said] = [line for line in stderr.splitlines() if line.startswith("sessions-assets")]  # below Dagster's log
    assert said.startswith("sessions-assets: process_job failed") and f"server at {url} does not answer" in said
    down = run("run", "--data-root", str(root), cwd=tmp_path, env=attached)
    assert down.returncode == 1 and f"server at {url} does not answer" in down.stderr, down.stderr[-3000:]

    connect_server.start(port=int(url.rsplit(":", 1)[1]))
    assert connect_server.token() == token
    again = run("run", "--data-root", str(root), cwd=tmp_path, env=attached)

    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    assert_tables_match_oracle(Warehouse(spark, Storage(str(root))), root)
