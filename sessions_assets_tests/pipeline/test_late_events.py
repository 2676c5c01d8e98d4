"""The seed's late-data cases through the real pipeline, in both arrival orders, against the oracle.

Four received days. The first three bring each user's visits on time; the fourth brings what arrived late:
an event between two sessions, one that bridges a gap, one before a landing page, and a retried request
whose copy is stamped across midnight. In one order the late day comes last, in the other first. Either
way every table must equal the oracle's recompute, and the named effects must show.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from sessions_assets.warehouse.tables import DAILY_SNAPSHOT, EVENTS, SESSIONS
from sessions_assets_tests.helpers.arrivals import arrive_in_steps
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.late_days import D1, D2, D3, D4, LATE, ON_TIME

pytestmark = pytest.mark.scenario


@pytest.fixture(scope="module", params=["late_day_last", "late_day_first"])
def arrived(request, spark, tmp_path_factory):
    """The warehouse after all four days, the late one last or first, and its data root."""
    root = tmp_path_factory.mktemp(request.param) / "data"
    steps = [ON_TIME, {D4: LATE}] if request.param == "late_day_last" else [{D4: LATE}, ON_TIME]
    return arrive_in_steps(spark, root, steps), root


def sessions_of(wh, user: str) -> list[tuple]:
    rows = wh.read(SESSIONS).where(F.col("user_key") == user).orderBy("session_start").collect()
    return [(r.session_number, r.session_start.strftime("%m-%d %H:%M"), r.num_events, r.session_date) for r in rows]


def test_every_table_equals_a_full_recompute(arrived):
    assert_tables_match_oracle(*arrived)


def test_late_session_between_two_others_bumps_the_later_number(arrived):
    wh, _ = arrived
    assert sessions_of(wh, "renumbered") == [
        (1, "03-01 10:00", 1, D1),
        (2, "03-02 12:00", 1, D2),  # the late one
        (3, "03-03 10:00", 1, D3),  # was 2 before it arrived, on another day
    ]


def test_late_event_merges_two_sessions_and_closes_the_numbering_gap(arrived):
    wh, _ = arrived
    assert sessions_of(wh, "merged") == [(1, "03-01 09:00", 5, D1), (2, "03-02 15:00", 1, D2)]


def test_late_first_event_changes_the_landing_page_referrer_and_campaign(arrived):
    wh, _ = arrived
    [row] = wh.read(SESSIONS).where(F.col("user_key") == "landed").collect()
    assert (
        row.landing_path,
        row.exit_path,
        row.referrer,
        row.utm_source,
        row.utm_medium,
        row.utm_campaign,
        row.page_views,
    ) == ("/blog", "/checkout", "https://b.example/", "news", "email", "spring", 3)


def test_a_copy_stamped_across_midnight_counts_once_on_the_first_received_copys_day(arrived):
    wh, _ = arrived
    events = {r.message_id: r.event_date for r in wh.read(EVENTS).where(F.col("message_id").isin("c1", "e1")).collect()}
    # c1: the original, received first, stays on its day; e1: the retry was received first and wins.
    assert events == {"c1": D3, "e1": D2}
    assert sessions_of(wh, "copied")[0][2:] == (1, D3)


def test_the_snapshot_runs_from_the_first_session_day_to_the_latest_received_day(arrived):
    wh, _ = arrived
    assert tuple(wh.read(DAILY_SNAPSHOT).agg(F.min("snapshot_date"), F.max("snapshot_date")).head()) == (D1, D4)
