"""``sessions-assets`` as a user runs it: separate processes, no ``DAGSTER_HOME``, a fresh data root.

One generated landing zone is run once for the module, as ``make demo`` runs it: one run with a Spark driver of
its own (no ``SPARK_REMOTE``), a minute of work on two cores. The scenarios then ask what a user would: are the
tables right, does a second run leave them alone, what does ``status`` say, does a repair of a damaged day put it
right (the later runs attach to the tests' server). Mistakes a user can make end with exit code 2 and one line on
stderr, before anything starts.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import Storage
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.slow.commands import python_traceback, run

pytestmark = pytest.mark.slow

NOTHING_DUE = "received days to ingest: none\nrefresh due: no\nforget requests not done: none\n"


def table_versions(root: Path) -> dict[str, int]:
    """Each table under the warehouse -> its latest Delta version, read from the commit files."""
    return {
        table.name: max(int(commit.stem) for commit in (table / "_delta_log").glob("*.json"))
        for table in sorted((root / "warehouse").iterdir())
        if (table / "_delta_log").is_dir()
    }


@pytest.fixture(scope="module")
def processed(tmp_path_factory):
    """A generated landing zone (three received days, twenty users) after one ``run`` with a driver of its own: its
    root and the run."""
    work = tmp_path_factory.mktemp("cli")
    root = work / "data"
    generated = run("generate", "--data-root", str(root), "--days", "3", "--users", "20", cwd=work)
    assert generated.returncode == 0, generated.stderr
    assert generated.stdout.startswith("Generated ") and "for received days" in generated.stdout
    first = run("run", "--data-root", str(root), cwd=work, env={"SPARK_REMOTE": ""})
    assert first.returncode == 0, first.stdout + first.stderr[-3000:]
    return root, first


def received_days(root: Path) -> list[str]:
    return sorted(folder.name.split("=")[1] for folder in (root / "landing").iterdir())


def test_run_processes_every_received_day_into_tables_equal_to_a_full_recompute(processed, spark):
    root, run = processed
    days = received_days(root)
    assert len(days) == 3
    said = run.stdout.splitlines()
    assert said[0] == "3 received day(s) to ingest and refresh in 1 run(s)"
    assert [line.split(":")[0] for line in said[1:4]] == [f"- {day}" for day in days]
    assert said[4].startswith("  rejected: ") and said[5].startswith("- refresh: events rebuilt whole")
    assert said[-1].startswith("Done in ") and said[-1].endswith(f"Tables under file:{root}/warehouse.")
    assert not python_traceback(run.stderr)
    assert (root / "dagster_home").is_dir()  # no DAGSTER_HOME: the runs are recorded beside the data
    assert_tables_match_oracle(Warehouse(spark, Storage(str(root))), root)


def test_a_second_run_has_nothing_to_do_and_changes_no_table(processed):
    root, _ = processed
    before = table_versions(root)
    again = run("run", "--data-root", str(root), cwd=root.parent)
    assert (again.returncode, again.stdout) == (
        0,
        f"Nothing to do: every received day under file:{root}/landing is processed.\n",
    )
    assert table_versions(root) == before
    assert {"events", "sessions", "daily_snapshot", "raw_events"} <= set(before)


def test_status_says_nothing_is_due_after_a_run(processed):
    root, _ = processed
    status = run("status", "--data-root", str(root), cwd=root.parent)
    assert (status.returncode, status.stdout) == (0, NOTHING_DUE)


def test_over_a_wiped_instance_status_and_run_find_nothing_due_and_change_no_table(processed, tmp_path):
    """The warehouse records what was ingested, so a new instance (a wiped home, or another ``DAGSTER_HOME``)
    re-ingests nothing."""
    root, _ = processed
    before = table_versions(root)
    shutil.copytree(root / "dagster_home", tmp_path / "kept")  # the later tests read this run's history
    try:
        shutil.rmtree(root / "dagster_home")
        status = run("status", "--data-root", str(root), cwd=root.parent)
        assert (status.returncode, status.stdout) == (0, NOTHING_DUE)
        again = run("run", "--data-root", str(root), cwd=root.parent)
        assert again.returncode == 0 and again.stdout.startswith("Nothing to do"), again.stdout + again.stderr
        assert table_versions(root) == before
    finally:
        shutil.rmtree(root / "dagster_home", ignore_errors=True)
        shutil.copytree(tmp_path / "kept", root / "dagster_home")


def test_repair_of_a_day_whose_sessions_were_lost_leaves_every_table_equal_to_the_oracle(processed, spark):
    """The lost sessions include the bots' capped ones, which run into the next day."""
    root, _ = processed
    day = received_days(root)[1]
    sessions = f"file:{root}/warehouse/sessions"
    assert spark.read.format("delta").load(sessions).where(f"session_date = DATE'{day}' AND ended_by_cap").count() > 0
    spark.sql(f"DELETE FROM delta.`{sessions}` WHERE session_date = DATE'{day}'")

    repair = run("repair", "--data-root", str(root), "--from", day, "--to", day, cwd=root.parent)

    assert repair.returncode == 0, repair.stdout + repair.stderr[-3000:]
    [line] = repair.stdout.splitlines()
    steps = [part.split(" (")[0] for part in line.removeprefix("- refresh: ").split("; ")]
    assert steps == ["events repaired", "sessions repaired", "users repaired", "daily_snapshot repaired"], line
    assert_tables_match_oracle(Warehouse(spark, Storage(str(root))), root)


@pytest.mark.parametrize(
    "args, complaint",
    [
        (["run", "--data-root", "{missing}"], "no data root at file:{missing}"),
        (["repair", "--data-root", "{root}", "--from", "not-a-day"], "'not-a-day' is not a day (YYYY-MM-DD)"),
        (
            ["repair", "--data-root", "{root}", "--from", "2024-03-01", "--tables", "bogus"],
            "--tables takes events, sessions, users, daily_snapshot",
        ),
    ],
    ids=["run_without_a_data_root", "repair_from_not_a_day", "repair_bogus_tables"],
)
def test_a_users_mistake_exits_2_with_one_line_on_stderr_and_no_traceback(tmp_path, args, complaint):
    root, missing = tmp_path / "data", tmp_path / "missing"
    (root / "landing").mkdir(parents=True)
    paths = {"root": str(root), "missing": str(missing)}

    done = run(*(a.format(**paths) for a in args), cwd=tmp_path, timeout=120)

    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("sessions-assets") and complaint.format(**paths) in done.stderr
    assert not missing.exists() and not (root / "dagster_home").exists() and not (root / "warehouse").exists()
