"""Any order of arrival ends in the tables a full recompute gives: random small landing zones, real pipeline.

A time zone is drawn (UTC, or one whose clocks change), and four event days around one of its transitions (a day of
23 or 25 hours, a midnight skipped or repeated). A few users' events over those days, received over three: most on
time, some days late, some
identified on a device others browse from anonymously or log in on too (the logins late or early), some
delivered twice (the same line again, or a retried request stamped seconds or minutes off, sometimes
across midnight, received before or after the original), one or two from "the future", a broken line.
The received days arrive in a random order, some together; one of them comes in two files, the second after the
first was processed (only it is read then); and one day already processed is ingested again, unchanged (nothing is
read) or whole on request. Every table must then equal the oracle's recompute from all landing lines at once, in the drawn zone.
"""

from __future__ import annotations

import itertools
import tempfile
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import Storage
from sessions_assets_tests.helpers.arrivals import running
from sessions_assets_tests.helpers.budget import examples
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import DESKTOP, PHONE, segment, write_day

pytestmark = [pytest.mark.property, pytest.mark.scenario]


@dataclass(frozen=True)
class Days:
    """A time zone and the first of four local event days; three received (UTC) days follow the first."""

    zone: str = "UTC"
    first: date = date(2024, 3, 1)

    @property
    def last(self) -> date:
        return self.first + timedelta(days=3)

    @property
    def received(self) -> tuple[date, ...]:
        return tuple(self.first + timedelta(days=n) for n in (1, 2, 3))

    @property
    def start(self) -> datetime:
        """The first events come in the local evening: streams straddle local midnights (and the transition)."""
        return datetime.combine(self.first, time(21), ZoneInfo(self.zone)).astimezone(UTC)


# Each zone's four days hold one of its transitions: Los Angeles and Berlin skip an hour in spring, Berlin repeats
# one in autumn, Santiago skips its midnight in spring and Havana repeats its midnight in autumn.
ZONES = (
    Days(),
    Days("America/Los_Angeles", date(2024, 3, 9)),
    Days("Europe/Berlin", date(2024, 10, 25)),
    Days("Europe/Berlin", date(2024, 3, 29)),
    Days("America/Santiago", date(2024, 9, 6)),
    Days("America/Havana", date(2024, 11, 1)),
)
STEPS = (1, 10, 29, 30, 31, 45, 200, 1440)  # minutes between a user's events: around the gap, and a day
# cat browses anonymously; dan and eli both log in on the device "dev" browses from, so its events go to
# whichever of them logged in on it last.
USERS = {
    "ann": {"agent": DESKTOP},
    "bob": {"device": "ios"},
    "cat": {"agent": PHONE, "userId": ""},
    "dan": {"anonymousId": "shared"},
    "dev": {"userId": None, "anonymousId": "shared"},
    "eli": {"agent": DESKTOP, "anonymousId": "shared"},
}
SHIFTS = (3, -7, 90, -90, 1200, -1200)  # seconds a retried request's timestamp is off by


def midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), UTC)


@st.composite
def landing_zones(draw, days: Days = ZONES[0]) -> dict[date, list[str]]:  # noqa: B008 (frozen)
    """Received day -> its landing lines."""
    received_days = days.received
    zone: dict[date, list[str]] = {day: [] for day in received_days}
    ids = itertools.count()

    def receive(at: datetime) -> tuple[date, datetime]:
        """A received day no earlier than the event's day, and a ``receivedAt`` on it, after the event."""
        day = draw(st.sampled_from([d for d in received_days if d >= at.date()] or [received_days[-1]]))
        return day, max(at + timedelta(seconds=5), midnight(day) + timedelta(minutes=draw(st.integers(0, 900))))

    others = st.lists(st.sampled_from(sorted(set(USERS) - {"dev"})), min_size=2, max_size=3, unique=True)
    for user in ["dev", *draw(others)]:  # always someone anonymous on the shared device
        moment = days.start + timedelta(minutes=draw(st.integers(0, 240)))
        for _ in range(draw(st.integers(3, 8))):
            moment += timedelta(minutes=draw(st.sampled_from(STEPS)), seconds=draw(st.sampled_from((0, 0, 1))))
            if moment.date() > days.last:
                break
            message_id = f"m{next(ids)}"
            kind = draw(st.sampled_from(("track", "page")))
            path = draw(st.sampled_from(("/", "/pricing"))) if kind == "page" else None
            day, received = receive(moment)
            line = segment(message_id, user, moment, received, kind=kind, path=path, **USERS[user])
            zone[day].append(line)
            copy = draw(st.sampled_from(("retried", None, None, "again", None)))
            if copy == "again":  # the same line delivered once more, on any received day
                zone[draw(st.sampled_from(received_days))].append(line)
            elif copy == "retried":  # a retry stamped a little off, received before the original or any time after
                stamped = moment + timedelta(seconds=draw(st.sampled_from(SHIFTS)))
                if draw(st.booleans()):
                    received -= timedelta(seconds=draw(st.integers(1, 20)))
                else:
                    day, received = receive(stamped)
                zone[day].append(segment(message_id, user, stamped, received, kind=kind, path=path, **USERS[user]))
    for n, day in enumerate(received_days):  # every received day, someone on time (an empty day is no received day)
        at = midnight(day) + timedelta(minutes=draw(st.integers(0, 24 * 60 - 1)))
        user = draw(st.sampled_from(sorted(USERS)))
        zone[day].append(segment(f"today-{n}", user, at, **USERS[user]))
    for n in range(draw(st.integers(1, 2))):  # a device clock hours ahead of the server's
        day = draw(st.sampled_from(received_days))
        received = midnight(day) + timedelta(hours=draw(st.integers(0, 23)))
        ahead = received + timedelta(hours=draw(st.integers(2, 30)))
        zone[day].append(segment(f"future-{n}", draw(st.sampled_from(sorted(USERS))), ahead, received))
    zone[draw(st.sampled_from(received_days))].append('{"messageId": "broken", "type": ')
    for lines in zone.values():
        lines[:] = draw(st.permutations(lines))
    return zone


@st.composite
def arrivals(draw, days: Days = ZONES[0]) -> list[tuple[str, tuple[date, ...]]]:  # noqa: B008 (frozen)
    """Steps: ('arrive', days) writes the days' folders and runs what is due (ingests, then one refresh); one
    received day comes in two files, ('more', (day,)) writing its second file after its first was processed;
    ('again', (day,)) ingests an already processed day once more (nothing changed: nothing to read), or
    ('whole', (day,)) reads it whole on request, for the next refresh to absorb."""
    order = draw(st.permutations(days.received))
    steps, batch = [], [order[0]]
    for day in order[1:]:
        if draw(st.booleans()):
            batch.append(day)
        else:
            steps.append(("arrive", tuple(batch)))
            batch = [day]
    steps.append(("arrive", tuple(batch)))
    split = draw(st.sampled_from(days.received))
    after = next(n for n, (_, arrived) in enumerate(steps) if split in arrived) + 1
    steps.insert(draw(st.integers(after, len(steps))), ("more", (split,)))
    at = draw(st.integers(1, len(steps)))
    arrived = [day for what, days in steps[:at] if what == "arrive" for day in days]
    steps.insert(at, (draw(st.sampled_from(("again", "whole"))), (draw(st.sampled_from(arrived)),)))
    return steps


@st.composite
def scenarios(draw) -> tuple[Days, dict[date, list[str] | tuple[list[str], list[str]]], list]:
    """A zone and its days, a landing zone over them (the split day's lines in two files, the second written
    later), and the order it arrives in."""
    days = draw(st.sampled_from(ZONES))
    zone, steps = draw(landing_zones(days)), draw(arrivals(days))
    split = next(days[0] for what, days in steps if what == "more")
    at = draw(st.integers(1, max(1, len(zone[split]) - 1)))  # the first file holds a line (a day is not empty)
    zone[split] = (zone[split][:at], zone[split][at:])
    return days, zone, steps


def arrive(runner, root: Path, zone: dict[date, list[str]], step: tuple[str, tuple[date, ...]]) -> None:
    """Carry out one step of ``arrivals``; ``zone`` holds the split day's lines in two files."""
    what, days = step
    if what in ("again", "whole"):
        runner.reingest(days[0], folders=True) if what == "whole" else runner.ingest(days[0])
        return
    for day in days:
        files = zone[day] if isinstance(zone[day], tuple) else (zone[day],)
        write_day(root, day, files[1], "part-0001.jsonl") if what == "more" else write_day(root, day, files[0])
    runs, refreshed = runner.process()  # one run per range of consecutive days, each ingesting and refreshing
    ingests = [run.metadata["raw_events"] for run in runs if "raw_events" in run.metadata]  # not an erasure's
    read = {r.data["received_day"]: r.data for m in ingests for r in m["per_received_day"].records}
    assert sorted(read) == [d.isoformat() for d in sorted(days)] and refreshed is not None
    if what == "more":  # a file is the unit of delivery: the day's first file is not read again
        assert (read[days[0].isoformat()]["files_read"], read[days[0].isoformat()]["files_kept"]) == (1, 1)


@settings(
    max_examples=examples(2),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    # No shrinking: each example runs the pipeline for most of a minute; the failing one is printed whole.
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)
@given(scenario=scenarios())
def test_any_arrival_order_with_a_day_ingested_twice_equals_a_full_recompute(spark, scenario):
    days, zone, steps = scenario
    root_of = lambda work: Path(work) / "data"  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="arrival-") as work, running(root_of(work), time_zone=days.zone) as runner:
        root = root_of(work)
        (root / "landing").mkdir(parents=True)
        for step in steps:
            arrive(runner, root, zone, step)
        last = steps[-1][0]
        if last in ("again", "whole"):
            due = runner.process()[1] is not None
            assert due == (last == "whole"), "a day read whole leaves a refresh due; an unchanged one, nothing"
        assert_tables_match_oracle(Warehouse(spark, Storage(str(root))), root, time_zone=days.zone)
