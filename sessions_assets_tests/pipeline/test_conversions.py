"""Channels, bots and conversions through the real pipeline: an order that arrives days after its session was
written rewrites that session and its person's ``users`` row, and nothing else."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from sessions_assets.warehouse.tables import SESSIONS, USERS
from sessions_assets_tests.engine.events import BOT
from sessions_assets_tests.helpers.arrivals import arrive_in_steps
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import DESKTOP, segment

pytestmark = pytest.mark.scenario

D1, D3 = date(2024, 3, 10), date(2024, 3, 12)
ON_TIME = [
    segment("a1", "u1", "2024-03-10 10:00", kind="page", path="/", referrer="https://www.google.com/", agent=DESKTOP),
    segment("a2", "u1", "2024-03-10 10:05", event="Product Added", agent=DESKTOP),
    segment(
        "b1", "u2", "2024-03-10 11:00", kind="page", path="/", campaign={"source": "newsletter", "medium": "email"}
    ),
    segment("c1", "crawler", "2024-03-10 12:00", kind="page", path="/docs", agent=BOT),
]
# Received two days later, inside u1's session of the 10th.
LATE_ORDER = segment(
    "a3", "u1", "2024-03-10 10:10", "2024-03-12 08:00", event="Order Completed", properties={"revenue": 42.5}
)


@pytest.fixture(scope="module")
def ordered_late(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("late_order") / "data"
    wh = arrive_in_steps(spark, root, [{D1: ON_TIME}])
    before = {t: wh.version(t) for t in (SESSIONS, USERS)}
    arrive_in_steps(spark, root, [{D3: [LATE_ORDER]}])
    return wh, root, before


def test_every_table_equals_the_oracle_with_the_new_columns(ordered_late):
    wh, root, _ = ordered_late
    assert_tables_match_oracle(wh, root)
    sessions = {r.user_key: r for r in wh.read(SESSIONS).collect()}
    assert {k: (s.default_channel_group, s.is_bot) for k, s in sessions.items()} == {
        "u1": ("Organic Search", False),
        "u2": ("Email", False),
        "crawler": ("Direct", True),
    }


def test_a_late_order_rewrites_only_its_session_and_its_persons_row(ordered_late):
    wh, _, before = ordered_late
    for table in (SESSIONS, USERS):
        log = wh.log(table)
        [version] = [v for v in log.versions() if v > before[table]]  # the late day's one commit
        metrics = log.commit_info(version)["operationMetrics"]
        written = {k: int(metrics.get(k, 0)) for k in ("numTargetRowsUpdated", "numTargetRowsInserted")}
        assert (written, int(metrics.get("numTargetRowsDeleted", 0))) == (
            {"numTargetRowsUpdated": 1, "numTargetRowsInserted": 0},
            0,
        ), table.name
    [u1] = wh.read(USERS).where(F.col("user_key") == "u1").collect()
    assert (u1.conversions, u1.revenue, u1.first_default_channel_group) == (1, Decimal("42.500000"), "Organic Search")
