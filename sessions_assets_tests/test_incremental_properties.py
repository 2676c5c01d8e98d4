"""Property: however events arrive, the incremental pipeline equals a full recompute.

Hypothesis draws a few users' event streams around midnights and 30-minute gaps, gives every event an
arrival delay of up to a few days (some re-delivered twice), then the real pipeline processes the
received days in a random order with random re-runs, its ``events`` MERGE skipping the days its message
filters rule out. ``sessions`` and ``daily_snapshot`` must then equal the plain-Python oracle in
``reference.py`` run over all lines at once, as multisets of rows.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

import dagster as dg
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from sessions_assets.config import PipelineSettings
from sessions_assets.definitions import build_resources
from sessions_assets.ingest import landing_days
from sessions_assets.runner import Runner
from sessions_assets.tables import DAILY_SNAPSHOT, SESSIONS
from sessions_assets_tests import reference
from sessions_assets_tests.landing import received_day_of, segment, write_day
from sessions_assets_tests.soak import property_test

BASE = datetime(2024, 3, 1, 22, 0, tzinfo=timezone.utc)  # streams straddle midnights


@st.composite
def arrivals(draw):
    """Lines of a few users' streams; steps cluster around the 30-minute rule, arrivals up to 3 days late."""
    lines = []
    for user in range(draw(st.integers(1, 3))):
        moment = BASE + timedelta(minutes=draw(st.integers(0, 600)))
        for i in range(draw(st.integers(1, 10))):
            moment += timedelta(minutes=draw(st.sampled_from([1, 10, 29, 30, 31, 45, 200, 1440])))
            delay = timedelta(days=draw(st.sampled_from([0, 0, 0, 1, 3])), seconds=5)
            message = segment(f"u{user}-{i}", f"u{user}", moment, moment + delay)
            lines.append(message)
            if draw(st.integers(0, 9)) == 0:  # re-delivered a day later
                lines.append(segment(f"u{user}-{i}", f"u{user}", moment, moment + delay + timedelta(days=1)))
    return lines


@property_test(2, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=arrivals(), order=st.randoms(use_true_random=False))
def test_sessions_equal_a_full_recompute_in_any_arrival_order(tmp_path_factory, spark, lines, order):
    root = tmp_path_factory.mktemp("prop") / "data"
    by_day: dict = {}
    for line in lines:
        by_day.setdefault(received_day_of(line).isoformat(), []).append(line)
    for day, day_lines in by_day.items():
        write_day(root, day, day_lines)
    resources = build_resources(data_root=str(root), master="local[2]", shuffle_partitions=2, ui=False)
    # The events MERGE consults its message filters from the first row (at the default, past 1 M rows).
    resources["settings"] = PipelineSettings(
        data_root=str(root), start_date=resources["settings"].start_date, message_filter_above_rows=0
    )
    days = landing_days(resources["settings"])
    order.shuffle(days)
    days.append(order.choice(days))  # a re-run of some day changes nothing
    with dg.instance_for_test() as instance:
        runner = Runner(instance, resources)
        for received_day in days:
            runner.process(received_day)
        actual = Counter(
            (r.user_key, r.session_start.replace(tzinfo=timezone.utc), r.session_end.replace(tzinfo=timezone.utc),
             r.num_events, r.ended_by_cap)
            for r in runner.warehouse.read(SESSIONS).collect()
        )  # fmt: skip
        snapshot = sorted(
            (r.snapshot_date, r.state, r.users_on_hand, r.users_entered, r.users_exited, round(r.avg_days_in_state, 3))
            for r in runner.warehouse.read(DAILY_SNAPSHOT).collect()
        )
    oracle = reference.recompute(by_day)
    expected = Counter(
        (s["user_key"], s["session_start"], s["session_end"], s["num_events"], s["ended_by_cap"])
        for s in oracle["sessions"]
    )
    assert actual == expected
    assert snapshot == sorted(
        (r["snapshot_date"], r["state"], r["users_on_hand"], r["users_entered"], r["users_exited"],
         round(r["avg_days_in_state"], 3))
        for r in oracle["snapshot"]
    )  # fmt: skip
