"""Days in the business's time zone through the real pipeline, against the oracle's own local days: a late event
that moves a session across local midnight, a received day east of UTC that touches two local days (and the
received day before the local start), the snapshot's horizon on either side of UTC, and a changed zone refused
until the received days are ingested again."""

from __future__ import annotations

from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest
from pyspark.sql import functions as F

from sessions_assets.cli.runner import RunFailed
from sessions_assets.warehouse import ledger, pending
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import DAILY_SNAPSHOT, PARTITION_MAP, SESSIONS
from sessions_assets_tests.helpers.arrivals import running
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import segment, write_day

pytestmark = pytest.mark.scenario
LA, TOKYO = "America/Los_Angeles", "Asia/Tokyo"


def wall(text: str, zone: str) -> datetime:
    """A local wall-clock time as a UTC instant."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).astimezone(UTC)


def session_days(wh: Warehouse, user: str) -> list[tuple[date, int]]:
    rows = wh.read(SESSIONS).where(F.col("user_key") == user).orderBy("session_start").collect()
    return [(r.session_date, r.num_events) for r in rows]


def test_a_late_event_moves_a_session_across_local_midnight(spark, tmp_path):
    root = tmp_path / "data"
    # ann's visit from 00:10 on 6 March (Los Angeles), received on the UTC day it happens
    write_day(
        root, "2024-03-06", [segment(f"on-{n}", "ann", wall(f"2024-03-06 00:{m}", LA)) for n, m in enumerate((10, 30))]
    )
    with running(root, time_zone=LA) as runner:
        runner.process()
        wh = Warehouse(spark, Storage(str(root)))
        assert session_days(wh, "ann") == [(date(2024, 3, 6), 2)]
        # a day later arrives what her phone sent at 23:50 the evening before: 20 minutes before, the same visit
        late = wall("2024-03-05 23:50", LA)
        write_day(root, "2024-03-07", [segment("late", "ann", late, wall("2024-03-07 09:00", LA))])
        runner.process()
    assert session_days(wh, "ann") == [(date(2024, 3, 5), 3)]
    assert_tables_match_oracle(wh, root, time_zone=LA)


def test_east_of_utc_one_received_day_touches_two_local_days_and_the_day_before_the_start(spark, tmp_path):
    root = tmp_path / "data"
    # Tokyo's 1 March begins at 15:00 UTC on 29 February: that received day holds its first hour
    write_day(root, "2024-02-29", [segment("first", "kim", wall("2024-03-01 00:30", TOKYO))])
    evening, after_midnight = wall("2024-03-10 19:00", TOKYO), wall("2024-03-11 01:00", TOKYO)  # both on UTC 10 March
    write_day(root, "2024-03-10", [segment("evening", "kim", evening), segment("night", "lee", after_midnight)])
    with running(root, time_zone=TOKYO, start_date="2024-03-01") as runner:
        assert runner.bounds()[0] == date(2024, 2, 29)
        runner.process()
    wh = Warehouse(spark, Storage(str(root)))
    mapped = {(r.received_date, r.event_date) for r in wh.read(PARTITION_MAP).collect()}
    assert mapped == {
        (date(2024, 2, 29), date(2024, 3, 1)),
        (date(2024, 3, 10), date(2024, 3, 10)),
        (date(2024, 3, 10), date(2024, 3, 11)),
    }
    # received 10 March ends at 09:00 on 11 March in Tokyo: the snapshot runs to 10 March
    assert wh.read(DAILY_SNAPSHOT).agg(F.max("snapshot_date")).head()[0] == date(2024, 3, 10)
    assert_tables_match_oracle(wh, root, time_zone=TOKYO)


def test_west_of_utc_the_snapshot_stops_at_the_last_local_day_that_has_ended(spark, tmp_path):
    root = tmp_path / "data"
    write_day(root, "2024-03-10", [segment("a", "ann", wall("2024-03-09 20:00", LA))])
    with running(root, time_zone=LA) as runner:
        [step], _ = runner.process()
    wh = Warehouse(spark, Storage(str(root)))
    # received 10 March (UTC) ends at 17:00 on 10 March in Los Angeles: 9 March is the last day that has ended
    assert wh.read(DAILY_SNAPSHOT).agg(F.max("snapshot_date")).head()[0] == date(2024, 3, 9)
    assert {k for k in step.metadata} >= {"raw_events", "events", "daily_snapshot"}
    assert_tables_match_oracle(wh, root, time_zone=LA)


def test_a_changed_zone_is_refused_until_the_received_days_are_ingested_again(spark, tmp_path):
    root = tmp_path / "data"
    write_day(root, "2024-03-06", [segment("a", "ann", "2024-03-06 03:00"), segment("b", "bob", "2024-03-06 09:00")])
    with running(root) as runner:  # built in UTC
        runner.process()
    write_day(root, "2024-03-07", [segment("c", "ann", "2024-03-07 03:00")])
    storage = Storage(str(root))
    said = ledger.ingested_elsewhere(storage, LA)
    assert said.startswith(
        f"the time zone is {LA}, but 1 received day(s) (2024-03-06..2024-03-06) were ingested in UTC"
    )
    with running(root, time_zone=LA) as runner:
        with pytest.raises(RunFailed, match="run `sessions-assets reingest`"):
            runner.process()  # the new day is ingested in the new zone; its refresh is refused
        assert ledger.to_reingest(storage, LA) == [date(2024, 3, 6)]
        runner.reingest(date(2024, 3, 6))
        runner.refresh(pending.backlog(storage, runner.bounds()))
    assert ledger.ingested_elsewhere(storage, LA) is None
    assert_tables_match_oracle(Warehouse(spark, storage), root, time_zone=LA)
