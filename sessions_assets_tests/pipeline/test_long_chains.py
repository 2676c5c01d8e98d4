"""A late event reads only the sessions near it, even in a chain that goes on for days (a bot's): where a session
starts depends only on the events before it, so a chain sessionized from the first session read is cut as if
from its beginning."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from pyspark.sql import functions as F

from sessions_assets.warehouse.tables import SESSIONS
from sessions_assets_tests.helpers.arrivals import arrive_in_steps
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import received_day_of, segment, ts

pytestmark = pytest.mark.scenario

START = ts("2024-03-01 00:05")


def every_20_minutes(hours: int) -> list[str]:
    """A crawler's calls, 20 minutes apart: one chain, cut by the 24-hour cap."""
    return [segment(f"bot-{n}", "crawler", START + timedelta(minutes=20 * n)) for n in range(hours * 3)]


def test_a_late_event_in_a_chain_of_days_recuts_the_whole_chain(spark, tmp_path):
    calls = every_20_minutes(80)
    by_day: dict[date, list[str]] = {}
    for line in calls:
        by_day.setdefault(received_day_of(line), []).append(line)
    # Received a day late: a call in the chain's fourth day, three days after the chain began.
    late = segment("bot-late", "crawler", START + timedelta(hours=75, minutes=10), "2024-03-05 12:00")
    root = tmp_path / "data"
    wh = arrive_in_steps(spark, root, [by_day, {date(2024, 3, 5): [late]}])
    assert_tables_match_oracle(wh, root)
    capped = wh.read(SESSIONS).where(F.col("user_key") == "crawler").orderBy("session_start").collect()
    assert [s.ended_by_cap for s in capped] == [True, True, True, False]
