"""Local days: the first instant of a day, days of 23 and 25 hours, midnights skipped or repeated, the snapshot's
horizon, and the three calendars that must agree on them: Spark's (the JVM's rules), Python's (``zoneinfo``, the
oracle's) and Dagster's daily partitions in the zone."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from pyspark.sql import functions as F

from sessions_assets.engine import days
from sessions_assets.graph.partitions import calendars
from sessions_assets.settings import Settings, SettingsError
from sessions_assets_tests.helpers import reference

# (zone, a day, its first instant in UTC, its length): a spring day of 23 hours, an autumn day of 25, a spring day
# without a local midnight (Santiago: 00:00 -> 01:00) and an autumn day with two (Havana: 01:00 -> 00:00).
DAYS = [
    ("America/Los_Angeles", date(2024, 3, 10), datetime(2024, 3, 10, 8, tzinfo=UTC), 23),
    ("America/Los_Angeles", date(2024, 11, 3), datetime(2024, 11, 3, 7, tzinfo=UTC), 25),
    ("Europe/Berlin", date(2024, 3, 31), datetime(2024, 3, 30, 23, tzinfo=UTC), 23),
    ("Europe/Berlin", date(2024, 10, 27), datetime(2024, 10, 26, 22, tzinfo=UTC), 25),
    ("America/Santiago", date(2024, 9, 8), datetime(2024, 9, 8, 4, tzinfo=UTC), 23),
    ("America/Havana", date(2024, 11, 3), datetime(2024, 11, 3, 4, tzinfo=UTC), 25),
    ("Asia/Tokyo", date(2024, 3, 10), datetime(2024, 3, 9, 15, tzinfo=UTC), 24),
    ("UTC", date(2024, 3, 10), datetime(2024, 3, 10, tzinfo=UTC), 24),
]
ZONES = sorted({zone for zone, *_ in DAYS})


@pytest.mark.parametrize("zone, day, start, hours", DAYS, ids=[f"{z}-{d}" for z, d, *_ in DAYS])
def test_a_day_starts_at_the_first_instant_of_its_local_date(zone, day, start, hours):
    assert days.day_start(day, zone) == start
    assert days.day_end(day, zone) - days.day_start(day, zone) == timedelta(hours=hours)
    assert days.day_of(start, zone) == day and days.day_of(start - timedelta(microseconds=1), zone) < day
    # The oracle finds the same instant its own way.
    assert reference.first_instant(day, reference.Settings(time_zone=zone)) == start


@pytest.mark.parametrize(
    "zone, received, horizon",
    [
        ("America/Los_Angeles", date(2024, 3, 10), date(2024, 3, 9)),  # west of UTC: the day before
        ("Asia/Tokyo", date(2024, 3, 10), date(2024, 3, 10)),  # east: that day
        ("UTC", date(2024, 3, 10), date(2024, 3, 10)),
        ("Pacific/Kiritimati", date(2024, 3, 10), date(2024, 3, 10)),  # +14: the next day has begun, not ended
        ("America/Santiago", date(2024, 9, 7), date(2024, 9, 6)),  # its local 9-07 ends at 9-08 04:00 UTC
    ],
)
def test_the_snapshot_runs_to_the_last_local_day_ended_by_the_end_of_the_latest_received_day(zone, received, horizon):
    assert days.horizon(received, zone) == horizon
    assert reference.horizon(received, reference.Settings(time_zone=zone)) == horizon


def test_east_of_utc_the_received_calendar_starts_a_day_before_the_local_one():
    for zone, first in (("Asia/Tokyo", "2024-02-29"), ("UTC", "2024-03-01"), ("America/Los_Angeles", "2024-03-01")):
        pair = calendars(Settings(start_date="2024-03-01", time_zone=zone))
        assert (pair.received.get_first_partition_key(), pair.local.get_first_partition_key()) == (first, "2024-03-01")


@pytest.mark.parametrize("zone", ZONES)
def test_spark_dagster_and_python_give_every_instant_the_same_local_day(spark, zone):
    """Every half hour over each transition day and its neighbours: Spark's date (the JVM's rules), Python's
    (``zoneinfo``) and Dagster's partition whose window holds the instant all agree, and Dagster's keys are the
    consecutive dates, each once."""
    around = [d for z, d, *_ in DAYS if z == zone]
    instants = sorted(
        datetime.combine(d, datetime.min.time(), UTC) + timedelta(minutes=30 * n)
        for d in around
        for n in range(-48, 96)
    )
    frame = spark.createDataFrame([(n, days.micros(i)) for n, i in enumerate(instants)], "n int, micros long")
    spark_days = {
        r.n: r.day
        for r in frame.select("n", days.local_date(F.timestamp_micros("micros"), zone).alias("day")).collect()
    }
    assert [spark_days[n] for n in range(len(instants))] == [days.day_of(i, zone) for i in instants]
    first, last = min(around) - timedelta(days=3), max(around) + timedelta(days=3)
    local = calendars(Settings(start_date=first.isoformat(), time_zone=zone)).local
    keys = [k for k in local.get_partition_keys() if k <= last.isoformat()]
    assert keys == [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]
    for key in keys:  # compared as instants: Python never calls a time in a gap equal to one in another zone
        window, day = local.time_window_for_partition_key(key), date.fromisoformat(key)
        assert (window.start.timestamp(), window.end.timestamp()) == (
            days.day_start(day, zone).timestamp(),
            days.day_end(day, zone).timestamp(),
        ), key
    assert {d.isoformat() for d in spark_days.values()} <= set(keys)
    assert days.disagreements(spark, zone, around) == []


def test_a_zone_is_an_iana_name_both_sides_accept():
    for name in ("UTC", "Europe/Berlin", "US/Pacific", "Etc/GMT+5"):  # an alias; a fixed offset, POSIX's sign
        assert Settings(time_zone=name).time_zone == name
    with pytest.raises(SettingsError, match="time_zone: 'Mars/Olympus' is not an IANA time zone name"):
        Settings.from_env(time_zone="Mars/Olympus")
    with pytest.raises(SettingsError, match="time_zone: 'PST' is not an IANA time zone name"):
        Settings.from_env(time_zone="PST")  # the JVM takes it as America/Los_Angeles, zoneinfo has no such name
