"""A realistic, deterministic sample landing zone in Segment's format (``sessions-assets generate``).

Users visit in bursts (sessions), some across midnight; two bots never pause for 30 minutes. Most events
are received within a minute, a few percent days later, a tail weeks or months later; some are
re-delivered, a few come from "the future", and some lines are malformed or incomplete. Same arguments,
same bytes.
"""

from __future__ import annotations

import gzip
import json
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path

# Lateness profile: share of events and the delay range each class is received with.
ON_TIME = (0.90, timedelta(seconds=1), timedelta(minutes=1))
DAYS_LATE = (0.07, timedelta(hours=2), timedelta(days=3))
MONTHS_LATE = (0.03, timedelta(days=7), timedelta(days=120))
DUPLICATE_RATE = 0.02
FUTURE_LINES_PER_DAY = 2
BOTS = ("bot-1", "bot-2")
EVENT_NAMES = ("Page Viewed", "Product Viewed", "Product Added", "Checkout Started", "Order Completed")


@dataclass
class GenerateSummary:
    received_days: list[str]
    files: int = 0
    lines: int = 0
    kinds: Counter = field(default_factory=Counter)

    def __str__(self) -> str:
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.kinds.items()))
        return (
            f"Generated {self.lines} lines in {self.files} files for received days "
            f"{self.received_days[0]} .. {self.received_days[-1]} ({kinds})."
        )


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _message(rng: random.Random, user: str, anonymous: bool, at: datetime, received: datetime) -> dict:
    kind = rng.choice(("track", "track", "track", "page", "identify"))
    return {
        "messageId": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "type": kind,
        "event": rng.choice(EVENT_NAMES) if kind == "track" else None,
        "userId": "" if anonymous else user,
        "anonymousId": f"anon-{user}",
        "timestamp": _iso(at),
        "sentAt": _iso(min(received, at + timedelta(seconds=rng.randint(0, 30)))),
        "receivedAt": _iso(received),
        "properties": {"path": f"/p/{rng.randint(1, 50)}"},
        "context": {"library": {"name": "analytics.js"}, "ip": f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}"},
    }


def _delay(rng: random.Random) -> tuple[str, timedelta]:
    roll = rng.random()
    for name, (share, low, high) in (("on_time", ON_TIME), ("days_late", DAYS_LATE)):
        if roll < share:
            return name, low + (high - low) * rng.random()
        roll -= share
    _, low, high = MONTHS_LATE
    return "months_late", low + (high - low) * rng.random()


def _user_events(rng: random.Random, user: str, first: date, last: date) -> list[datetime]:
    """A human: on some days, one to three bursts of events seconds to minutes apart."""
    times = []
    day = first
    while day <= last:
        if rng.random() < 0.45:
            for _ in range(rng.randint(1, 3)):
                start = datetime.combine(day, time(0), timezone.utc) + timedelta(minutes=rng.randint(0, 24 * 60 - 1))
                moment = start
                for _ in range(rng.randint(1, 12)):
                    times.append(moment)
                    moment += timedelta(seconds=rng.randint(10, 600))
        day += timedelta(days=1)
    return times


def _bot_events(rng: random.Random, first: date, hours: int) -> list[datetime]:
    """A bot: an event every 1-10 minutes, never a 30-minute pause, for ``hours`` hours."""
    moment = datetime.combine(first, time(6), timezone.utc)
    end = moment + timedelta(hours=hours)
    times = []
    while moment < end:
        times.append(moment)
        moment += timedelta(minutes=rng.randint(1, 10))
    return times


def _broken_lines(rng: random.Random, received: datetime) -> list[tuple[str, str]]:
    good = json.dumps(_message(rng, "u-broken", False, received - timedelta(minutes=5), received))
    return [
        ("malformed", good[: rng.randint(5, len(good) - 5)]),  # truncated
        ("malformed", "[1, 2, 3]"),
        ("incomplete", json.dumps({**json.loads(good), "messageId": ""})),
        ("incomplete", json.dumps({**json.loads(good), "userId": None, "anonymousId": None})),
        ("incomplete", json.dumps({**json.loads(good), "timestamp": "last tuesday"})),
        ("incomplete", json.dumps({k: v for k, v in json.loads(good).items() if k != "receivedAt"})),
    ]


def generate_landing_zone(
    data_root: str | Path, days: int = 14, users: int = 200, seed: int = 7, end_date: date | None = None
) -> GenerateSummary:
    """Write ``landing/received_date=YYYY-MM-DD/*.jsonl`` (one day ``.jsonl.gz``, one ``.json``) under ``data_root``."""
    rng = random.Random(seed)
    last = end_date or (datetime.now(timezone.utc).date() - timedelta(days=1))
    first = last - timedelta(days=days - 1)
    horizon = datetime.combine(last + timedelta(days=1), time(0), timezone.utc)
    history = first - timedelta(days=90)  # device history older than the landing zone, for the late tail
    by_day: dict[date, list[str]] = {first + timedelta(days=i): [] for i in range(days)}
    summary = GenerateSummary([d.isoformat() for d in by_day])

    def deliver(line: str, received: datetime, kind: str) -> None:
        if received < horizon and received.date() >= first:
            by_day[received.date()].append(line)
            summary.kinds[kind] += 1

    people = [(f"user-{i:04d}", rng.random() < 0.15) for i in range(users)]
    streams = [(user, anon, _user_events(rng, user, history, last)) for user, anon in people]
    streams += [(bot, False, _bot_events(rng, first + timedelta(days=i), 60)) for i, bot in enumerate(BOTS)]
    for user, anonymous, times in streams:
        for at in times:
            kind, delay = _delay(rng)
            received = at + delay
            message = _message(rng, user, anonymous, at, received)
            deliver(json.dumps(message), received, kind)
            if rng.random() < DUPLICATE_RATE:  # re-delivered later, same messageId and timestamp
                again = received + timedelta(hours=rng.randint(1, 72))
                deliver(json.dumps({**message, "receivedAt": _iso(again)}), again, "duplicates")

    for day, lines in by_day.items():
        noon = datetime.combine(day, time(12), timezone.utc)
        for i in range(FUTURE_LINES_PER_DAY):
            received = noon + timedelta(minutes=37 * i)
            future = _message(rng, f"user-{rng.randrange(users):04d}", False, received + timedelta(hours=rng.randint(2, 48)), received)
            lines.append(json.dumps(future))
            summary.kinds["future_dated"] += 1
        if day == first + timedelta(days=days // 2):
            ancient = _message(rng, "user-0000", False, noon - timedelta(days=500), noon)
            lines.append(json.dumps(ancient))
            summary.kinds["too_old"] += 1
        for kind, line in _broken_lines(rng, noon):
            lines.append(line)
            summary.kinds[kind] += 1

    root = Path(data_root) / "landing"
    for index, (day, lines) in enumerate(sorted(by_day.items())):
        rng.shuffle(lines)
        folder = root / f"received_date={day.isoformat()}"
        folder.mkdir(parents=True, exist_ok=True)
        half = len(lines) // 2
        parts = [("part-0000.jsonl", lines[:half]), ("part-0001.jsonl", lines[half:])]
        if index == 1:
            parts[1] = ("part-0001.jsonl.gz", lines[half:])
        if index == 2:
            parts[1] = ("part-0001.json", lines[half:])
        for name, part in parts:
            payload = "".join(line + "\n" for line in part).encode()
            if name.endswith(".gz"):
                payload = gzip.compress(payload, mtime=0)
            (folder / name).write_bytes(payload)
            summary.files += 1
            summary.lines += len(part)
    return summary
