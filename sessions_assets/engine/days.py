"""Local days: the one place an instant becomes a day of the settings' ``time_zone`` (the contract's *Days*).

Instants stay instants: Spark's session is in UTC and timestamps are stored as UTC. A day column (``event_date``,
``session_date``, the snapshot's days) is the local date of an instant, computed in Spark with the JVM's zone rules
(``local_date``). Python code that needs a day's bounds, or the day of an instant, takes them from the same rules
through ``zoneinfo`` (``day_start``, ``day_of``), and measures durations in UTC: two aware datetimes in one
``ZoneInfo`` subtract as wall-clock time, so nothing here adds 24 hours to a local midnight.

A local day starts at the first instant of its local date: it may last 23 or 25 hours, start at 01:00 when a
transition skips midnight (America/Santiago in spring) or hold two midnights (America/Havana in autumn). The JVM
and Python each bring their own time zone database; ``disagreements`` compares them where it matters, the zone's
transitions, so that a run fails in one line rather than writing days the oracle and the partitions disagree with.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

# The widest a zone's offset from UTC gets (Pacific/Kiritimati is +14, Etc/GMT+12 is -12): a local date's first
# instant lies within this of its UTC midnight.
_WIDEST_OFFSET = timedelta(hours=26)
_MICROSECOND = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def local_date(instant: Column, zone: str) -> Column:
    """The local date of a UTC timestamp in ``zone`` (Spark, with the JVM's zone rules)."""
    return F.to_date(F.from_utc_timestamp(instant, zone))


def micros(moment: datetime) -> int:
    """An aware instant as microseconds since the epoch: how an instant reaches Spark without a client's zone."""
    return (moment - _EPOCH) // _MICROSECOND


def instant(moment: datetime) -> Column:
    """An aware instant as a Spark timestamp literal."""
    return F.timestamp_micros(F.lit(micros(moment)))


def day_of(moment: datetime, zone: str) -> date:
    """The local date of an instant in ``zone`` (a naive datetime is taken as UTC, as Spark returns them)."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(ZoneInfo(zone)).date()


@functools.lru_cache(maxsize=4096)
def day_start(day: date, zone: str) -> datetime:
    """The first instant (aware, UTC) whose local date in ``zone`` is ``day``: the earliest instant at or after
    which the local date is no longer before it, found by bisection over the instants around its UTC midnight."""
    midnight = datetime.combine(day, time(0), UTC)
    lo, hi = midnight - _WIDEST_OFFSET, midnight + _WIDEST_OFFSET  # local date before ``day`` at lo, not at hi
    while hi - lo > _MICROSECOND:
        middle = lo + (hi - lo) // 2
        if day_of(middle, zone) < day:
            lo = middle
        else:
            hi = middle
    return hi


def day_end(day: date, zone: str) -> datetime:
    """The first instant after ``day`` (aware, UTC): its local day is ``[day_start, day_end)``."""
    return day_start(day + timedelta(days=1), zone)


def horizon(received_day: date, zone: str) -> date:
    """The last local day that has ended by the end of the received (UTC) day: the snapshot's horizon. West of UTC
    the day before it, east of UTC (and in UTC) the day itself."""
    end = datetime.combine(received_day + timedelta(days=1), time(0), UTC)
    return day_of(end, zone) - timedelta(days=1)


def first_received_day(start: date, zone: str) -> date:
    """The (UTC) received day that holds the first instant of the local ``start`` day: east of UTC the day before
    it, where the first local hours of ``start`` are received."""
    return day_start(start, zone).date()


def transitions(zone: str, first: date, last: date) -> list[datetime]:
    """The instants (aware, UTC) between ``first`` and ``last`` at which ``zone``'s offset from UTC changes."""
    tz, found = ZoneInfo(zone), []
    step = datetime.combine(first, time(0), UTC)
    end = datetime.combine(last, time(0), UTC)
    while step < end:
        following = step + timedelta(hours=6)
        if step.astimezone(tz).utcoffset() != following.astimezone(tz).utcoffset():
            lo, hi = step, following
            while hi - lo > _MICROSECOND:
                middle = lo + (hi - lo) // 2
                if middle.astimezone(tz).utcoffset() == lo.astimezone(tz).utcoffset():
                    lo = middle
                else:
                    hi = middle
            found.append(hi)
        step = following
    return found


def probes(zone: str, around: Iterable[date]) -> list[datetime]:
    """Instants that tell two time zone databases apart for ``zone``: each transition in the years around the given
    days, a second before it and at it, and the first instant of the days it falls on."""
    instants: set[datetime] = set()
    for day in around:
        for moment in transitions(zone, day - timedelta(days=366), day + timedelta(days=366)):
            local = day_of(moment, zone)
            instants |= {moment - timedelta(seconds=1), moment, day_start(local, zone), day_end(local, zone)}
    return sorted(instants)


def disagreements(spark: SparkSession, zone: str, around: Iterable[date]) -> list[tuple[datetime, date, date]]:
    """The probe instants whose local date Spark (the JVM's rules) gives otherwise than ``zoneinfo``: (instant,
    Spark's date, Python's date). One small query."""
    instants = probes(zone, around)
    if not instants:  # a zone without transitions near those days: nothing to tell apart
        return []
    frame = spark.createDataFrame([(n, micros(i)) for n, i in enumerate(instants)], "n int, micros long")
    found = {
        r.n: r.day for r in frame.select("n", local_date(F.timestamp_micros("micros"), zone).alias("day")).collect()
    }
    return [(i, found[n], day_of(i, zone)) for n, i in enumerate(instants) if found[n] != day_of(i, zone)]


class ZoneRulesDiffer(RuntimeError):
    """Spark's JVM and this process disagree on a zone's local dates (their time zone databases differ)."""


_AGREED: set[tuple[int, str]] = set()  # (session, zone) pairs already probed in this process


def check_rules(spark: SparkSession, zone: str, around: Iterable[date]) -> None:
    """Fail in one line when Spark's zone rules give other local dates than Python's near ``around`` (once per
    session and zone): the server's or cluster's JVM brings its own time zone database, which no client can pin."""
    if (id(spark), zone) in _AGREED:
        return
    try:
        wrong = disagreements(spark, zone, around)
    except Exception as error:
        if "INVALID_TIMEZONE" not in str(error)[:2000]:
            raise
        raise ZoneRulesDiffer(
            f"Spark's JVM does not know the time zone {zone}, which Python's zoneinfo does: update the JVM's tzdata "
            "(or choose the zone's canonical name)"
        ) from None
    if wrong:
        at, theirs, ours = wrong[0]
        raise ZoneRulesDiffer(
            f"Spark and this process disagree on {zone}: {at:%Y-%m-%dT%H:%M:%S}Z is {theirs} in Spark's JVM and "
            f"{ours} in Python's zoneinfo ({len(wrong)} such instants): update the older time zone database "
            "(the JVM's tzdata, or Python's tzdata package) so both hold the same rules"
        )
    _AGREED.add((id(spark), zone))
