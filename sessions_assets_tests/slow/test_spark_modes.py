"""Runs with a Spark driver of their own and runs attached to a Spark Connect server build the same tables; a server
that dies under a run fails that run in one line, and the next run, once the server is back, completes the work.

``sessions-assets run`` as a user runs it, in its own process: with ``SPARK_REMOTE`` unset (the run starts a local
driver) or naming a server (the run is a Spark Connect client of it).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import Storage
from sessions_assets_tests.expected import assert_tables_match_oracle
from sessions_assets_tests.slow.commands import TIMEOUT, cli, python_traceback, run, start
from sessions_assets_tests.slow.test_reliability import finished

pytestmark = pytest.mark.slow


def staged(work: Path, days: int, users: int, seed: int) -> list[Path]:
    """A generated landing zone kept aside: its received-day folders, oldest first."""
    cli("generate", "--data-root", str(work / "staging"), "--days", str(days), "--users", str(users), "--seed",
        str(seed), cwd=work)  # fmt: skip
    return sorted((work / "staging" / "landing").iterdir())


@pytest.mark.parametrize("mode", ["own_driver", "attached"])
def test_days_arriving_in_steps_build_tables_equal_to_a_full_recompute_in_either_mode(mode, tmp_path, spark):
    """Two received days, then a third whose late events reach back into theirs: with every run a driver of its
    own, and with every run attached to the tests' server."""
    folders, root = staged(tmp_path, days=3, users=8, seed=21), tmp_path / "data"
    env = {"SPARK_REMOTE": ""} if mode == "own_driver" else {}  # the tests' server, inherited, otherwise
    (root / "landing").mkdir(parents=True)
    for batch in (folders[:2], folders[2:]):
        for folder in batch:
            shutil.copytree(folder, root / "landing" / folder.name)
        assert "- refresh:" in cli("run", "--data-root", str(root), cwd=tmp_path, env=env)
    assert_tables_match_oracle(Warehouse(spark, Storage(str(root))), root)


def test_a_server_killed_during_a_refresh_fails_the_run_in_one_line_and_the_next_run_completes_it(
    tmp_path, spark, connect_server
):
    folders, root = staged(tmp_path, days=2, users=5, seed=22), tmp_path / "data"
    (root / "landing").mkdir(parents=True)
    for folder in folders:
        shutil.copytree(folder, root / "landing" / folder.name)
    url = connect_server.running()["url"]
    process = start("run", "--data-root", str(root), cwd=tmp_path, out=tmp_path / "killed", env={"SPARK_REMOTE": url})
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
    down = run("run", "--data-root", str(root), cwd=tmp_path, env={"SPARK_REMOTE": url})
    assert down.returncode == 1 and f"server at {url} does not answer" in down.stderr, down.stderr[-3000:]

    connect_server.start(port=int(url.rsplit(":", 1)[1]))
    again = run("run", "--data-root", str(root), cwd=tmp_path, env={"SPARK_REMOTE": url})

    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    assert_tables_match_oracle(Warehouse(spark, Storage(str(root))), root)
