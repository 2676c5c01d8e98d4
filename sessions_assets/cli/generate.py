"""A realistic, deterministic sample landing zone in Segment's format (``sessions-assets generate``).

People visit in bursts, some across midnight, on the web (pages with paths, referrers, campaigns on some
landings, a browser's user agent) or in a mobile app (``context.device.type``, no user agent); two bots
never pause for 30 minutes. Most people browse anonymously before they log in (an ``identify`` call, now and
then delivered days late), come back logged out, use a second device, or have a server send calls with
only their ``userId``; a few share a device with someone else; some are never identified. Most events arrive within a minute, some days later, a tail weeks or months
later. Some are delivered twice: the same line again, or a retried request whose copy carries a shifted
``timestamp`` (sometimes across midnight, sometimes received before the original). A few come from "the
future", and some lines are broken. Same arguments, same bytes.

The oldest event delivered is up to ~90 days older than the first received day: its local day (in the ``time_zone``
the demo runs in; the lines themselves are the same in every zone) is the sample's start
(``GenerateSummary.start_date``), written to ``<data root>/sample_start_date`` for ``SESSIONS_START_DATE`` (the
Makefile's demo passes it on), so the demo's partitions begin there instead of at the default's 2020.
"""

from __future__ import annotations

import gzip
import json
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from sessions_assets.engine import days as local_days
from sessions_assets.warehouse.storage import Storage

# Lateness profile: share of events and the delay range each class is received with.
ON_TIME = (0.90, timedelta(seconds=1), timedelta(minutes=1))
# Where generate leaves the sample's first event day; nothing reads it implicitly.
START_DATE_FILE = "sample_start_date"
DAYS_LATE = (0.07, timedelta(hours=2), timedelta(days=3))
MONTHS_LATE = (0.03, timedelta(days=7), timedelta(days=120))
DUPLICATE_RATE = 0.03
FUTURE_LINES_PER_DAY = 2
BOTS = ("bot-1", "bot-2")
TRACKS = ("Product Viewed", "Product Added", "Checkout Started", "Order Completed", "Signed Up")
PATHS = ("/", "/pricing", "/docs", "/blog/late-data", "/products/a", "/products/b", "/cart", "/checkout")
# Landing referrers: search, social and video sites, a forum, the shop's own pages (internal: SESSIONS_OWN_DOMAINS
# =shop.example in `make demo`), and none.
REFERRERS = (
    "https://www.google.com/",
    "https://www.bing.com/search",
    "https://news.ycombinator.com/",
    "https://twitter.com/",
    "https://m.facebook.com/",
    "https://www.youtube.com/watch",
    "https://shop.example/products/a",
    None,
    None,
)
# Campaigns that reach every default channel group.
CAMPAIGNS = (
    {"source": "newsletter", "medium": "email", "name": "autumn"},
    {"source": "google", "medium": "cpc", "name": "brand"},
    {"source": "partner", "medium": "referral"},
    {"source": "facebook", "medium": "paid-social", "name": "retarget"},
    {"source": "youtube", "medium": "cpv", "name": "launch"},
    {"source": "dsp", "medium": "display"},
    {"source": "ads", "medium": "cpc", "name": "cross-network-autumn"},
    {"source": "partner", "medium": "paid"},
    {"source": "google", "medium": "organic"},
    {"source": "instagram", "medium": "social"},
    {"source": "partner", "medium": "affiliate"},
    {"source": "sms", "medium": "sms"},
    {"source": "app", "medium": "push"},
    {"source": "podcast", "medium": "audio"},
)
BOT_AGENT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
CONVERSION = "Order Completed"
AGENTS = {
    "desktop": "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
    "mac": "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
    "phone": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
    "android": "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36",
    "tablet": "Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
}
APPS = ("ios", "android")
# Segment sources, as ``--layout segment`` lays them out: the website, the mobile app, the backend.
SOURCES = ("web", "app", "server")
SECOND_DEVICE = 0.2  # people who also use a second device
SHARED_DEVICE_EVERY = 25  # every this-many people, two share a device
LOGGED_OUT = 0.15  # bursts after the login that come logged out
BACKEND = 0.08  # calls after the login sent by a server: userId only
LATE_IDENTIFY = 0.3  # identify calls received one to four days late


@dataclass
class GenerateSummary:
    received_days: list[str]
    files: int = 0
    lines: int = 0
    kinds: Counter = field(default_factory=Counter)
    start_date: str = ""  # the day of the oldest event delivered: where the sample's partitions start

    def __str__(self) -> str:
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.kinds.items()))
        return (
            f"Generated {self.lines} lines in {self.files} files for received days "
            f"{self.received_days[0]} .. {self.received_days[-1]} ({kinds}).\n"
            f"Events from {self.start_date} on: SESSIONS_START_DATE={self.start_date} starts the partitions there "
            f"(also written to {START_DATE_FILE} in the data root)."
        )


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Visitor:
    user: str
    anonymous: bool  # sends only anonymousId
    device: str  # a key of AGENTS (web) or of APPS (mobile app)
    device_id: str = ""  # the device's anonymousId (default: one of the visitor's own)

    @property
    def anonymous_id(self) -> str:
        return self.device_id or f"anon-{self.user}"


def segment_identify(rng: random.Random, who: Visitor, at: datetime, received: datetime) -> dict:
    """A login: the call that links the device's anonymousId to the user."""
    message = segment_message(rng, who, at, received, landing=False)
    message.pop("event", None)
    message.pop("name", None)
    return {**message, "type": "identify", "userId": who.user, "traits": {"plan": rng.choice(("free", "pro"))}}


def segment_message(rng: random.Random, who: Visitor, at: datetime, received: datetime, landing: bool) -> dict:
    """One Segment call: a page view or a track event, with the context its library sends."""
    kind = "page" if landing or rng.random() < 0.5 else rng.choice(("track", "track", "track", "identify"))
    message = {
        "messageId": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "type": kind,
        "userId": "" if who.anonymous else who.user,
        "anonymousId": who.anonymous_id,
        "timestamp": _iso(at),
        "sentAt": _iso(min(received, at + timedelta(seconds=rng.randint(0, 30)))),
        "receivedAt": _iso(received),
        "properties": {},
        "context": {"ip": f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}"},
    }
    if kind == "track":
        message["event"] = rng.choice(TRACKS)
        if message["event"] == CONVERSION and rng.random() < 0.9:  # most orders carry revenue, some as text
            amount = round(rng.uniform(5, 300), 2)
            message["properties"]["revenue"] = amount if rng.random() < 0.9 else f"{amount:.2f}"
    if who.device in APPS:
        message["context"] |= {"library": {"name": f"analytics-{who.device}"}, "device": {"type": who.device}}
        if kind == "page":
            message["type"], message["name"] = "screen", rng.choice(("Home", "Cart", "Product"))
        return message
    agent = BOT_AGENT if who.user in BOTS else AGENTS[who.device]
    message["context"] |= {"library": {"name": "analytics.js"}, "userAgent": agent}
    if kind == "page":
        path = "/" if landing and rng.random() < 0.5 else rng.choice(PATHS)
        page = {"path": path, "url": f"https://shop.example{path}", "title": path.strip("/") or "Home"}
        referrer = rng.choice(REFERRERS) if landing else None
        if referrer:
            page["referrer"] = referrer
        message["context"]["page"] = page
        if landing and rng.random() < 0.3:
            message["context"]["campaign"] = dict(rng.choice(CAMPAIGNS))
    return message


def _identities(rng: random.Random, visitor: Visitor, bursts: int) -> list[tuple[Visitor, bool]]:
    """Who each of a visitor's bursts comes from, and whether it logs in: anonymous until the burst that logs
    in, then logged in on one device or the other, or logged out."""
    if visitor.anonymous or visitor.user in BOTS or not bursts:
        return [(visitor, False)] * bursts
    login = bursts - 1 - rng.randrange(max(1, bursts // 6))  # lately: within the landing zone, often
    second = (
        Visitor(visitor.user, False, rng.choice([*AGENTS, *APPS]), f"anon-{visitor.user}-2")
        if rng.random() < SECOND_DEVICE
        else None
    )
    out = []
    for n in range(bursts):
        on = second if second is not None and n > login and rng.random() < 0.3 else visitor
        logged_out = n < login or (n > login and rng.random() < LOGGED_OUT)
        out.append(
            (Visitor(visitor.user, True, on.device, on.anonymous_id) if n <= login or logged_out else on, n == login)
        )
    return out


def _delay(rng: random.Random) -> tuple[str, timedelta]:
    roll = rng.random()
    for name, (share, low, high) in (("on_time", ON_TIME), ("days_late", DAYS_LATE)):
        if roll < share:
            return name, low + (high - low) * rng.random()
        roll -= share
    _, low, high = MONTHS_LATE
    return "months_late", low + (high - low) * rng.random()


def _bursts(rng: random.Random, first: date, last: date) -> list[list[datetime]]:
    """A person: on some days, one to three bursts of events seconds to minutes apart."""
    bursts, day = [], first
    while day <= last:
        if rng.random() < 0.45:
            for _ in range(rng.randint(1, 3)):
                moment = datetime.combine(day, time(0), UTC) + timedelta(minutes=rng.randint(0, 24 * 60 - 1))
                burst = []
                for _ in range(rng.randint(1, 12)):
                    burst.append(moment)
                    moment += timedelta(seconds=rng.randint(10, 600))
                bursts.append(burst)
        day += timedelta(days=1)
    return bursts


def _bot(rng: random.Random, first: date, hours: int) -> list[list[datetime]]:
    """A bot: an event every 1-10 minutes, never a 30-minute pause, for ``hours`` hours."""
    moment = datetime.combine(first, time(6), UTC)
    end, times = moment + timedelta(hours=hours), []
    while moment < end:
        times.append(moment)
        moment += timedelta(minutes=rng.randint(1, 10))
    return [times]


def segment_broken_lines(rng: random.Random, received: datetime) -> list[tuple[str, str]]:
    good = json.dumps(
        segment_message(rng, Visitor("u-broken", False, "desktop"), received - timedelta(minutes=5), received, True)
    )
    return [
        ("malformed", good[: rng.randint(5, len(good) - 5)]),  # truncated
        ("malformed", "[1, 2, 3]"),
        ("incomplete", json.dumps({**json.loads(good), "messageId": ""})),
        ("incomplete", json.dumps({**json.loads(good), "userId": None, "anonymousId": None})),
        ("incomplete", json.dumps({**json.loads(good), "timestamp": "last tuesday"})),
        ("incomplete", json.dumps({k: v for k, v in json.loads(good).items() if k != "receivedAt"})),
    ]


def generate_landing_zone(
    data_root: str,
    days: int = 14,
    users: int = 200,
    seed: int = 7,
    end_date: date | None = None,
    layout: str = "received_date",
    time_zone: str = "UTC",
) -> GenerateSummary:
    """Write the received days under ``data_root`` (a path or a URI). ``received_date``:
    ``landing/received_date=YYYY-MM-DD/``, two files a day, one day's second file gzipped, another's named
    ``.json``. ``segment``: Segment's S3 destination, ``landing/segment-logs/<source>/<day in ms>/*.gz``, a folder
    a day for each of three sources (``SOURCES``). The same lines either way, and in every ``time_zone``: it only
    says which local day the oldest event falls on (the sample's start)."""
    rng = random.Random(seed)
    last = end_date or (datetime.now(UTC).date() - timedelta(days=1))
    first = last - timedelta(days=days - 1)
    horizon = datetime.combine(last + timedelta(days=1), time(0), UTC)
    history = first - timedelta(days=90)  # device history older than the landing zone, for the late tail
    by_day: dict[date, list[str]] = {first + timedelta(days=i): [] for i in range(days)}
    summary = GenerateSummary([d.isoformat() for d in by_day])
    oldest: list[datetime] = []  # the oldest event delivered so far

    def deliver(message: dict, received: datetime, kind: str) -> None:
        if received < horizon and received.date() >= first:
            by_day[received.date()].append(json.dumps({**message, "receivedAt": _iso(received)}))
            summary.kinds[kind] += 1
            moment = datetime.fromisoformat(message["timestamp"].replace("Z", "+00:00"))
            oldest[:] = [min([*oldest, moment])]

    devices = [*AGENTS, *AGENTS, *APPS]
    visitors = [Visitor(f"user-{i:04d}", rng.random() < 0.15, rng.choice(devices)) for i in range(users)]
    streams = [(v, _bursts(rng, history, last)) for v in visitors]
    streams += [
        (Visitor(bot, False, "desktop"), _bot(rng, first + timedelta(days=i), 60)) for i, bot in enumerate(BOTS)
    ]
    shared = {v.user: visitors[i - 1].anonymous_id for i, v in enumerate(visitors) if i % SHARED_DEVICE_EVERY == 1}
    for visitor, bursts in streams:
        if visitor.user in shared:
            visitor = Visitor(visitor.user, visitor.anonymous, visitor.device, shared[visitor.user])
        for burst, (who, logs_in) in zip(bursts, _identities(rng, visitor, len(bursts)), strict=True):
            for n, at in enumerate(burst):
                kind, delay = _delay(rng)
                received = at + delay
                message = segment_message(rng, who, at, received, landing=n == 0)
                if logs_in and n == 0:  # the login, right after the landing
                    who = Visitor(visitor.user, False, who.device, who.anonymous_id)
                    login, late = at + timedelta(seconds=2), rng.random() < LATE_IDENTIFY
                    at_desk = received + timedelta(days=rng.randint(1, 4)) if late else received + timedelta(seconds=2)
                    deliver(
                        segment_identify(rng, who, login, at_desk), at_desk, "identify_late" if late else "identify"
                    )
                elif not who.anonymous and rng.random() < BACKEND:
                    message["anonymousId"] = None
                deliver(message, received, kind)
                if rng.random() < DUPLICATE_RATE:
                    segment_redeliver(rng, message, at, received, deliver)

    for day, lines in by_day.items():
        noon = datetime.combine(day, time(12), UTC)
        for i in range(FUTURE_LINES_PER_DAY):
            received = noon + timedelta(minutes=37 * i)
            who = Visitor(f"user-{rng.randrange(users):04d}", False, "desktop")
            lines.append(
                json.dumps(segment_message(rng, who, received + timedelta(hours=rng.randint(2, 48)), received, False))
            )
            summary.kinds["future_dated"] += 1
        if day == first + timedelta(days=days // 2):
            ancient = segment_message(
                rng, Visitor("user-0000", False, "desktop"), noon - timedelta(days=500), noon, False
            )
            lines.append(json.dumps(ancient))
            summary.kinds["too_old"] += 1
        for kind, line in segment_broken_lines(rng, noon):
            lines.append(line)
            summary.kinds[kind] += 1
    storage = Storage(data_root, layout)
    if layout == "segment":
        _write_segment(storage, rng, by_day, summary)
    else:
        _write(storage, rng, by_day, summary)
    summary.start_date = local_days.day_of(oldest[0], time_zone).isoformat() if oldest else ""
    storage.write(f"{storage.root}/{START_DATE_FILE}", f"{summary.start_date}\n".encode())
    return summary


def segment_redeliver(rng: random.Random, message: dict, at: datetime, received: datetime, deliver) -> None:
    """A copy of the message: the same line later, or a retried request with its own ``timestamp``
    (seconds off, across midnight when near it), received later or, now and then, before the original."""
    roll = rng.random()
    if roll < 0.5:
        deliver(message, received + timedelta(hours=rng.randint(1, 72)), "duplicates")
        return
    shift = timedelta(seconds=rng.randint(1, 90)) * (1 if at.minute % 2 else -1)
    midnight = datetime.combine(at.date() + timedelta(days=at.hour >= 12), time(0), UTC)
    if rng.random() < 0.25 and abs(midnight - at) < timedelta(minutes=45):  # a device clock off by minutes
        shift = midnight - at + timedelta(seconds=rng.randint(1, 30)) * (1 if midnight > at else -1)
    copy = {**message, "timestamp": _iso(at + shift), "sentAt": _iso(at + shift)}
    copy_received = (
        received - timedelta(seconds=rng.randint(1, 20))
        if roll < 0.7
        else received + timedelta(hours=rng.randint(1, 48))
    )
    deliver(copy, copy_received, "shifted_copies")


def source_of(line: str) -> str:
    """Which Segment source sends a line: the server (``userId`` only), the mobile app, else the website (whose
    bugs send the broken lines)."""
    try:
        message = json.loads(line)
        context = message.get("context") or {}
    except (ValueError, AttributeError):
        return SOURCES[0]
    if not isinstance(message, dict) or not isinstance(context, dict):
        return SOURCES[0]
    if message.get("userId") and not message.get("anonymousId"):
        return SOURCES[2]
    return SOURCES[1] if isinstance(context.get("device"), dict) else SOURCES[0]


def _write_segment(storage: Storage, rng: random.Random, by_day: dict[date, list[str]], summary) -> None:
    for day, lines in sorted(by_day.items()):
        rng.shuffle(lines)
        by_source: dict[str, list[str]] = {source: [] for source in SOURCES}
        for line in lines:  # each line parsed once
            by_source[source_of(line)].append(line)
        for source, sent in by_source.items():
            # Segment's file names: the upload's Unix milliseconds and a random suffix.
            at = int(datetime.combine(day, time(23, 59), UTC).timestamp() * 1000)
            name = f"{at + rng.randrange(60_000)}.{rng.getrandbits(48):012x}.gz"
            payload = gzip.compress("".join(line + "\n" for line in sent).encode(), mtime=0)
            storage.write(f"{storage.folder(day, source)}/{name}", payload)
            summary.files += 1
            summary.lines += len(sent)


def _write(storage: Storage, rng: random.Random, by_day: dict[date, list[str]], summary: GenerateSummary) -> None:
    for index, (day, lines) in enumerate(sorted(by_day.items())):
        rng.shuffle(lines)
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
            storage.write(f"{storage.folder(day)}/{name}", payload)
            summary.files += 1
            summary.lines += len(part)
