"""The asset checks pass on tables a full recompute gives, and each fails, through Dagster's own check
evaluations, on a table that breaks its invariant; the in-run numbering check fails on a misnumbered user."""

from __future__ import annotations

from datetime import date

import pytest
from pyspark.sql import functions as F

from sessions_assets.warehouse.refresh.sessions import numbering_check
from sessions_assets.warehouse.tables import DAILY_SNAPSHOT, SESSIONS, USERS
from sessions_assets_tests.helpers.landing import segment, write_day

pytestmark = pytest.mark.scenario

DAY = date(2024, 3, 5)
LINES = [
    segment("a1", "ann", "2024-03-05 08:00"),
    segment("a2", "ann", "2024-03-05 12:00"),
    segment("b1", "bob", "2024-03-05 09:00"),
    segment("b2", "bob", "2024-03-05 15:00"),
    segment("c1", "cat", "2024-03-05 10:00"),
]


def evaluations(runner) -> dict[str, bool]:
    job = runner.defs.resolve_job_def("checks_job")
    result = job.execute_in_process(instance=runner.instance, resources=runner.resources)
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def update(wh, table, where: str, values: dict[str, str]) -> None:
    assignments = ", ".join(f"{column} = {value}" for column, value in values.items())
    wh.spark.sql(f"UPDATE delta.`{wh.uri(table)}` SET {assignments} WHERE {where}")


def numbering(wh, written) -> tuple[int, int]:
    """What the in-run check reports for the users of ``written``: users checked, users misnumbered."""
    found = numbering_check(wh, written)
    return found["users_written"], found["users_misnumbered"]


def test_each_check_fails_on_the_table_that_breaks_it(runner, data_root):
    write_day(data_root, DAY, LINES)
    runner.process()
    assert evaluations(runner) == {
        "sessions_do_not_overlap": True,
        "sessions_within_cap": True,
        "sessions_numbered_in_order": True,
        "sessions_count_every_event": True,
        "snapshot_counts_every_user": True,
        "users_one_row_per_person": True,
    }
    wh = runner.resources["pipeline"].warehouse(runner.resources["spark"])
    written = wh.read(SESSIONS).where(F.col("user_key").isin("ann", "cat")).localCheckpoint()
    assert numbering(wh, written) == (2, 0)

    update(wh, SESSIONS, "user_key = 'ann' AND session_number = 1", {"session_number": "3"})
    overlong = {"session_end": "session_start + INTERVAL 25 HOURS"}  # past the cap and over bob's next session
    update(wh, SESSIONS, "user_key = 'bob' AND session_number = 1", overlong)
    update(wh, SESSIONS, "user_key = 'cat'", {"num_events": "num_events + 1"})
    update(wh, DAILY_SNAPSHOT, f"snapshot_date = DATE'{DAY}' AND state = 'new'", {"users_on_hand": "users_on_hand + 1"})
    wh.spark.sql(f"DELETE FROM delta.`{wh.uri(USERS)}` WHERE user_key = 'cat'")
    assert evaluations(runner) == dict.fromkeys(
        (
            "sessions_do_not_overlap",
            "sessions_within_cap",
            "sessions_numbered_in_order",
            "sessions_count_every_event",
            "snapshot_counts_every_user",
            "users_one_row_per_person",
        ),
        False,
    )
    assert numbering(wh, written) == (2, 1)  # ann
