"""The test oracle: the data contract (``../shared/CONTRACT.md``) written out plainly in Python.

This module is what the test-suite compares the real pipeline with. It is deliberately naive:

* standard library only (no Spark, no pandas) and nothing shared with ``sessions_assets``, so a bug in the
  pipeline cannot hide by being copied here;
* it always recomputes everything from all landing lines at once -- no partitions, no incremental state,
  no "affected days" -- because the contract says the incremental tables must equal exactly that;
* it walks one line, one event, one user and one day at a time, in the contract's words, choosing
  clarity over speed.

The pieces, each usable on its own in tests::

    accept_line(line)                    -> (event, None) or (None, reason)
    accept_landing({day: [lines]})       -> accepted events, rejects (received_date, payload, reason, source_id);
                                            a day may be {source_id: [lines]} (Segment's layout)
    dedupe(events)                       -> one event per message_id (the earliest received copy)
    stitch(events)                       -> each event with its person as user_key
    sessionize(events)                   -> sessions (30-minute gap, 24-hour cap), numbered, with attributes
    daily_snapshot(sessions, horizon)    -> the accumulating snapshot rows
    users(events, sessions)              -> one row per person
    forget({day: [lines]}, user_ids)     -> the landing zone without the forgotten persons' lines
    recompute({day: [lines]})            -> all of the above (``forgotten``: from all lines but theirs)

The one thing it does not work out itself is what kind of device a user agent is: for that it asks the
same maintained library the pipeline uses (``device_detector``), as it asks ``datetime`` about calendars.

Where the contract leaves a detail open, the choice made here is written next to the code ("Decision:").
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from fractions import Fraction
from zoneinfo import ZoneInfo

__all__ = [
    "Settings",
    "STATES",
    "parse_timestamp",
    "accept_line",
    "accept_landing",
    "dedupe",
    "stitch",
    "sessionize",
    "users",
    "state_on",
    "daily_snapshot",
    "forget",
    "recompute",
]


@dataclass(frozen=True)
class Settings:
    """The contract's configurable thresholds, with its defaults."""

    session_gap_minutes: int = 30
    max_session_hours: int = 24
    max_future_skew_minutes: int = 60
    max_lateness_days: int = 400
    start_date: date = date(2020, 1, 1)
    lapsing_days: int = 7  # lapsing: the last session was 1..lapsing_days days before D
    dormant_days: int = 30  # dormant: lapsing_days+1..dormant_days days; churned: more than that
    stitch_identities: bool = True  # off: an event's user_key is its userId, else its anonymousId
    own_domains: tuple[str, ...] = ()  # a referrer on one of these, or under one, is no referrer
    conversion_events: tuple[str, ...] = ("Order Completed", "Signed Up")
    time_zone: str = "UTC"  # every day but a received day is a local day of this zone (an IANA name)


DEFAULTS = Settings()

# The lifecycle states, in the order the snapshot lists them for a day.
STATES = ("new", "active", "lapsing", "dormant", "churned")


# --------------------------------------------------------------------------------------------------
# Days
# --------------------------------------------------------------------------------------------------


def local_day(moment: datetime, settings: Settings = DEFAULTS) -> date:
    """The date an instant falls on in the settings' time zone (Python's own zone rules)."""
    return moment.astimezone(ZoneInfo(settings.time_zone)).date()


@functools.cache
def first_instant(day: date, settings: Settings = DEFAULTS) -> datetime:
    """The first instant whose local date is ``day``: found by walking the UTC clock a minute at a time from well
    before the day, then back a second at a time, rather than by assuming a local midnight exists or lasts 24 h.

    Decision: zones change offsets on whole seconds, so a second's precision finds the instant."""
    moment = datetime.combine(day - timedelta(days=1), datetime.min.time(), UTC)
    while local_day(moment, settings) < day:
        moment += timedelta(minutes=1)
    while local_day(moment - timedelta(seconds=1), settings) == day:
        moment -= timedelta(seconds=1)
    return moment


def horizon(latest_received_day: date, settings: Settings = DEFAULTS) -> date:
    """The snapshot's last day: the last local day that has ended by the end of the latest received (UTC) day."""
    end = datetime.combine(latest_received_day + timedelta(days=1), datetime.min.time(), UTC)
    day = local_day(end, settings)
    while first_instant(day + timedelta(days=1), settings) > end:
        day -= timedelta(days=1)
    return day


# --------------------------------------------------------------------------------------------------
# Accepting events
# --------------------------------------------------------------------------------------------------

# 'YYYY-MM-DDTHH:MM[:SS[.fraction]]' then optionally 'Z', '+HH:MM', '-HH:MM', '+HHMM' or '-HHMM'.
# ASCII digits only ([0-9], not \d, which in Python also matches other scripts' digits).
ISO_8601 = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})"
    r"T(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})"
    r"(?::(?P<second>[0-9]{2})(?:\.(?P<fraction>[0-9]+))?)?"
    r"(?P<offset>Z|(?P<sign>[+-])(?P<offset_hours>[0-9]{2}):?(?P<offset_minutes>[0-9]{2}))?"
)


def parse_timestamp(value) -> datetime | None:
    """An ISO-8601 date-time string as an aware UTC datetime, or None when it is not one.

    No offset means UTC. Fractions of a second are kept to the microsecond; further digits are cut off
    (truncated, not rounded). Numbers, date-only strings, impossible dates or times (2024-02-30, 24:00,
    a 60th second) and anything else give None.

    Decision: the whole string must be the date-time -- surrounding whitespace makes it not ISO-8601.
    Decision: an offset must be under 24 hours with minutes 00..59; '+HH' without minutes is not accepted.
    """
    if not isinstance(value, str):
        return None
    match = ISO_8601.fullmatch(value)
    if match is None:
        return None
    fraction = match["fraction"] or ""
    microseconds = int(fraction[:6].ljust(6, "0"))
    offset = timedelta(0)
    if match["sign"] is not None:
        hours, minutes = int(match["offset_hours"]), int(match["offset_minutes"])
        if hours > 23 or minutes > 59:
            return None
        offset = timedelta(hours=hours, minutes=minutes)
        if match["sign"] == "-":
            offset = -offset
    try:
        local = datetime(
            int(match["year"]),
            int(match["month"]),
            int(match["day"]),
            int(match["hour"]),
            int(match["minute"]),
            int(match["second"] or 0),
            microseconds,
            tzinfo=timezone(offset),
        )
        return local.astimezone(UTC)
    except (ValueError, OverflowError):  # no such date or time, or out of datetime's range in UTC
        return None


# Unicode's White_Space characters: what a "blank" string is made of.
WHITE_SPACE = frozenset(
    "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _present_string(value) -> str | None:
    """The value when it is a JSON string with something in it, else None.

    Numbers, booleans, objects, arrays and null are "missing", and so is "".
    Decision: a string of nothing but white space (Unicode's White_Space, no-break spaces included) counts
    as empty too: it cannot identify a message or a user, or name a page.
    """
    if isinstance(value, str) and any(c not in WHITE_SPACE for c in value):
        return value
    return None


def _id(value) -> str | None:
    """An id as Segment's warehouses read it: a JSON string with something in it, as sent, or a JSON integer's
    decimal text (``42`` is ``"42"``); anything else is missing.

    Decision: an integer is a number written without a fraction or an exponent (``_number`` keeps those with at
    most 38 digits as ``int``); ``true`` is not one, though Python's bool is an int."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return _present_string(value)


def _string(value) -> str | None:
    """The value when it is a JSON string (even empty), else None: names are taken as sent."""
    return value if isinstance(value, str) else None


def _at(message: dict, *path: str):
    """The value at a path of nested objects, or None where one is missing or not an object."""
    for key in path:
        if not isinstance(message, dict):
            return None
        message = message.get(key)
    return message


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _has_lone_surrogate(value) -> bool:
    """Whether a parsed JSON value holds an unpaired UTF-16 surrogate (``"\\ud800"``): not a character."""
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def accept_line(line: str, settings: Settings = DEFAULTS) -> tuple[dict | None, str | None]:
    """Judge one landing line: ``(event, None)`` when accepted, ``(None, reason)`` when rejected.

    The rules are checked in the order of the contract's table; the first broken one is the reason.
    The event has ``message_id``, ``user_id``, ``anonymous_id``, ``user_key``, ``event``, ``timestamp``
    and ``received_at`` (aware UTC datetimes), and ``payload`` (the line itself, for tie-breaks).
    """
    # 1. malformed_json: the line is not a JSON object (blank lines, arrays, numbers, broken JSON).
    # Decision: strictly JSON: NaN and Infinity are not numbers, and an unpaired surrogate escape is not text.
    try:
        message = json.loads(line, parse_constant=_no_constant, parse_float=_number, parse_int=_number)
    except ValueError:  # json.JSONDecodeError is a ValueError; "" and "   " raise it too
        return None, "malformed_json"
    if not isinstance(message, dict) or _has_lone_surrogate(message):
        return None, "malformed_json"

    # 2. missing_message_id: messageId is missing or empty.
    message_id = _id(message.get("messageId"))
    if message_id is None:
        return None, "missing_message_id"

    # 3. missing_user: both userId and anonymousId are missing or empty.
    user_id = _id(message.get("userId"))
    anonymous_id = _id(message.get("anonymousId"))
    if user_id is None and anonymous_id is None:
        return None, "missing_user"

    # 4. bad_timestamp: timestamp or receivedAt is missing or not ISO-8601.
    timestamp = parse_timestamp(message.get("timestamp"))
    received_at = parse_timestamp(message.get("receivedAt"))
    if timestamp is None or received_at is None:
        return None, "bad_timestamp"

    # 5. future_timestamp: timestamp is more than max_future_skew after receivedAt.
    if timestamp - received_at > timedelta(minutes=settings.max_future_skew_minutes):
        return None, "future_timestamp"

    # 6. too_late: more than max_lateness_days before receivedAt, or before the start date (a local day: its first
    # instant).
    if received_at - timestamp > timedelta(days=settings.max_lateness_days):
        return None, "too_late"
    if timestamp < first_instant(settings.start_date, settings):
        return None, "too_late"

    # The session key: userId when non-empty, else anonymousId.
    user_key = user_id if user_id is not None else anonymous_id
    event = {
        "message_id": message_id,
        "user_id": user_id,
        "anonymous_id": anonymous_id,
        "user_key": user_key,
        "type": _string(message.get("type")),
        "event": _string(message.get("event")),
        "timestamp": timestamp,
        "received_at": received_at,
        "event_date": local_day(timestamp, settings),
        "payload": line,
        **attributes(message),
        "revenue": revenue(_at(message, "properties", "revenue")),
    }
    return event, None


def _number(text: str) -> int | Decimal | float:
    """A JSON number as the contract's parser types it. Decision: as Spark's VARIANT does, a number written
    with an exponent, or with more digits than DECIMAL(38) holds, is a double; any other is exact."""
    if "e" in text or "E" in text:
        return float(text)
    exact = Decimal(text)
    digits, scale = len(exact.as_tuple().digits), max(0, -exact.as_tuple().exponent)
    if max(digits, scale) > 38:
        return float(text)
    return int(text) if "." not in text else exact


MONEY_LIMIT = Decimal(10) ** 32  # DECIMAL(38,6) holds less than this


def money_sum(values: list[Decimal]) -> Decimal | None:
    """A sum of revenues; None when there are none. Decision: a sum DECIMAL(38,6) cannot hold counts as none."""
    if not values:
        return None
    total = sum(values, Decimal(0))
    return total if abs(total) < MONEY_LIMIT else None


def revenue(value) -> Decimal | None:
    """A JSON number, rounded half up to 6 places; None for anything else, or a number too large for
    DECIMAL(38,6). Decision: a number with 32 or more integer digits does not fit, so counts as no revenue."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal | float):
        return None
    if isinstance(value, float):  # a double: its shortest decimal spelling, as Spark casts it
        if value != value or value in (float("inf"), float("-inf")):
            return None
        value = Decimal(repr(value))
    with localcontext() as exact:
        exact.prec = 60
        try:
            rounded = Decimal(value).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)
        except InvalidOperation:  # more digits than any DECIMAL(38,6) holds
            return None
    return rounded if abs(rounded) < MONEY_LIMIT else None


def attributes(message: dict) -> dict:
    """What the session columns are drawn from: the first of the contract's places holding a non-blank string."""

    def first(*paths: tuple[str, ...]) -> str | None:
        return next((v for v in (_present_string(_at(message, *p)) for p in paths) if v is not None), None)

    return {
        "page_path": first(("context", "page", "path"), ("properties", "path")),
        "referrer": first(("context", "page", "referrer"), ("properties", "referrer")),
        "utm_source": first(("context", "campaign", "source")),
        "utm_medium": first(("context", "campaign", "medium")),
        "utm_campaign": first(("context", "campaign", "name")),
        "user_agent": first(
            ("context", "userAgent"),
        ),
        "device_type": first(
            ("context", "device", "type"),
        ),
    }


def accept_landing(
    lines_by_received_day: dict[str, list[str] | dict[str, list[str]]], settings: Settings = DEFAULTS
) -> tuple[list[dict], list[tuple[str, str, str, str | None]]]:
    """Judge every line of every received day ('YYYY-MM-DD' -> lines, or -> {source_id: lines} when the day
    came from several Segment sources).

    Returns the accepted events, each with ``received_date`` (the folder's day, as given) and ``source_id``
    (None without sources) added, and the rejects as ``(received_date, payload, reason, source_id)``; both in
    (received day, source, line) order.
    """
    accepted: list[dict] = []
    rejected: list[tuple[str, str, str, str | None]] = []
    for received_date in sorted(lines_by_received_day):
        day = lines_by_received_day[received_date]
        by_source = day if isinstance(day, dict) else {None: day}
        for source_id in sorted(by_source, key=lambda s: s or ""):
            for line in by_source[source_id]:
                event, reason = accept_line(line, settings)
                if event is not None:
                    accepted.append({**event, "received_date": received_date, "source_id": source_id})
                else:
                    rejected.append((received_date, line, reason, source_id))
    return accepted, rejected


# --------------------------------------------------------------------------------------------------
# Duplicates
# --------------------------------------------------------------------------------------------------


def _copy_rank(event: dict) -> tuple:
    """Which copy of a message wins: the earliest receivedAt, then the earliest received day, then the
    smallest raw line, then the first source by name (none first). The last three only make the choice
    order-independent when receivedAt ties; the source, when two sources sent the same line."""
    return (event["received_at"], event["received_date"], event["payload"], event.get("source_id") or "")


def dedupe(events: list[dict]) -> list[dict]:
    """Keep one copy per ``message_id``: the earliest received (see ``_copy_rank``).

    The result does not depend on the input order; it is sorted by ``message_id``.
    """
    copies_by_id: dict[str, list[dict]] = {}
    for event in events:
        copies_by_id.setdefault(event["message_id"], []).append(event)
    return [min(copies_by_id[message_id], key=_copy_rank) for message_id in sorted(copies_by_id)]


# --------------------------------------------------------------------------------------------------
# Identity
# --------------------------------------------------------------------------------------------------


def stitch(events: list[dict]) -> list[dict]:
    """Give each kept event its person as ``user_key``.

    A link is an event with both a userId and an anonymousId. An anonymousId belongs to the userId of its
    latest link by (timestamp, message_id); an event's person is its own userId, else its anonymousId's
    person, else its anonymousId.
    """
    latest: dict[str, dict] = {}
    for event in events:
        if event["user_id"] is not None and event["anonymous_id"] is not None:
            known = latest.get(event["anonymous_id"])
            order = (event["timestamp"], event["message_id"])
            if known is None or order > (known["timestamp"], known["message_id"]):
                latest[event["anonymous_id"]] = event
    stitched = []
    for event in events:
        if event["user_id"] is not None:
            person = event["user_id"]
        elif event["anonymous_id"] in latest:
            person = latest[event["anonymous_id"]]["user_id"]
        else:
            person = event["anonymous_id"]
        stitched.append({**event, "user_key": person})
    return stitched


# --------------------------------------------------------------------------------------------------
# Sessions
# --------------------------------------------------------------------------------------------------


def sessionize(events: list[dict], settings: Settings = DEFAULTS) -> list[dict]:
    """Cut each user's events into sessions, by the contract's two rules, and describe each session.

    Per ``user_key``, events in (timestamp, message_id) order. An event starts a new session when

    * more than ``session_gap_minutes`` passed since the user's previous event (exactly that much does not
      split), or
    * it is more than ``max_session_hours`` after the first event of the current session (the cap).

    ``ended_by_cap`` is True for a session that the cap cut off: the next event came within the gap, so
    without the cap the session would have gone on.
    Decision: when the next event is both past the cap and past the gap, the gap ended the session (the
    user went quiet), so ``ended_by_cap`` is False. A user's last session is never ended by the cap.

    Returns dicts with every column of the ``sessions`` table (``describe``), sorted by (user_key,
    session_start). Events may leave out what sessions are drawn from (``type``, ``page_path``, ...).
    """
    gap = timedelta(minutes=settings.session_gap_minutes)
    cap = timedelta(hours=settings.max_session_hours)

    events_by_user: dict[str, list[dict]] = {}
    for event in events:
        events_by_user.setdefault(event["user_key"], []).append(event)

    sessions: list[dict] = []
    for user_key in sorted(events_by_user):
        ordered = sorted(events_by_user[user_key], key=lambda e: (e["timestamp"], e["message_id"]))
        runs: list[tuple[list[dict], bool]] = []  # each session's events, and whether the cap ended it
        current: list[dict] = []
        for event in ordered:
            if current:
                too_quiet = event["timestamp"] - current[-1]["timestamp"] > gap
                too_long = event["timestamp"] - current[0]["timestamp"] > cap
                if too_quiet or too_long:
                    runs.append((current, not too_quiet))
                    current = []
            current.append(event)
        if current:
            runs.append((current, False))
        for number, (run, capped) in enumerate(runs, start=1):
            sessions.append(describe(user_key, number, run, capped, settings))
    return sessions


def _name(event: dict) -> str | None:
    """What an analyst calls an event: its ``event`` for a track call, else its type."""
    return event.get("event") if event.get("type") == "track" else event.get("type")


def _first_carrying(events: list[dict], *fields: str) -> dict | None:
    """The first event (in order) with a value in any of ``fields``."""
    return next((e for e in events if any(e.get(f) is not None for f in fields)), None)


MOBILE = {"smartphone", "feature phone", "phablet", "wearable", "portable media player", "camera"}


@functools.cache  # the library takes milliseconds an agent; the answer never changes
def device_class(user_agent: str) -> str:
    """mobile, tablet or desktop (anything else, unrecognised agents included), per device_detector's type."""
    from device_detector import DeviceDetector

    kind = DeviceDetector(user_agent, skip_bot_detection=True).parse().device_type()
    kind = str(getattr(kind, "value", kind) or "").lower()
    return "tablet" if kind == "tablet" else "mobile" if kind in MOBILE else "desktop"


@functools.cache
def is_bot(user_agent: str) -> bool:
    """A crawler, spider, monitor or other bot, per device_detector's bot list."""
    from device_detector import DeviceDetector

    return bool(DeviceDetector(user_agent).parse().is_bot())


# The contract's source categories and its paid mediums, as it writes them.
SEARCH = {"google", "bing", "yahoo", "duckduckgo", "baidu", "yandex", "ecosia", "naver", "ask", "brave", "startpage"}
SOCIAL = {
    "facebook",
    "instagram",
    "linkedin",
    "twitter",
    "pinterest",
    "reddit",
    "tiktok",
    "snapchat",
    "threads",
    "mastodon",
}
VIDEO = {"youtube", "vimeo", "twitch", "dailymotion"}
PAID = re.compile(r"(.*cp.*|ppc|retargeting|paid.*)", re.DOTALL)
EMAIL = {"email", "e-mail", "e_mail", "e mail"}
# Decision: "trimmed" strips ASCII whitespace (space, tab, line breaks, vertical tab, form feed).
WHITESPACE = " \t\n\x0b\f\r"
# Decision: a referrer is a URL when it starts scheme://; its host runs to the first '/', '?', '#' or ':'
# (past any user@). Anything else has no host.
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://(?:[^/?#@]*@)?([^/?#:]+)")


def referrer_host(referrer: str | None, own_domains: tuple[str, ...] = ()) -> str:
    """The referrer's host, lowercased, without a leading ``www.``; '' when there is none or it is internal."""
    found = URL.match(referrer or "")
    host = found.group(1).lower() if found else ""
    host = host[len("www.") :] if host.startswith("www.") else host
    if any(host == d or host.endswith("." + d) for d in own_domains):
        return ""
    return host


def channel_group(session: dict, settings: Settings = DEFAULTS) -> str:
    """The contract's default channel group of a session: the first of its sixteen rules that matches."""

    def clean(value: str | None) -> str:
        return (value or "").lower().strip(WHITESPACE)

    s, m, c = clean(session["utm_source"]), clean(session["utm_medium"]), clean(session["utm_campaign"])
    h = referrer_host(session["referrer"], settings.own_domains)
    source = s or h

    def source_in(category: set[str]) -> bool:
        return bool(source) and (source in category or any(label in category for label in source.split(".")))

    paid = PAID.fullmatch(m) is not None
    if not s and not m and not h:
        return "Direct"
    if "cross-network" in c:
        return "Cross-network"
    for category, channel in ((SEARCH, "Paid Search"), (SOCIAL, "Paid Social"), (VIDEO, "Paid Video")):
        if source_in(category) and paid:
            return channel
    if m in ("display", "banner", "expandable", "interstitial", "cpm"):
        return "Display"
    if paid:
        return "Paid Other"
    if source_in(SEARCH) or m == "organic":
        return "Organic Search"
    if source_in(SOCIAL) or m in ("social", "social-network", "social-media", "sm", "social network", "social media"):
        return "Organic Social"
    if source_in(VIDEO) or "video" in m:
        return "Organic Video"
    if s in EMAIL or m in EMAIL:
        return "Email"
    if m == "affiliate":
        return "Affiliates"
    if s == "sms" or m == "sms":
        return "SMS"
    if m.endswith("push") or "mobile" in m or "notification" in m:
        return "Mobile Push Notifications"
    if m in ("referral", "app", "link") or (not m and h):
        return "Referral"
    return "Unassigned"


def is_conversion(event: dict, settings: Settings = DEFAULTS) -> bool:
    return event.get("type") == "track" and event.get("event") in settings.conversion_events


def describe(user_key: str, number: int, events: list[dict], ended_by_cap: bool, settings: Settings = DEFAULTS) -> dict:
    """A session's row from its events in (timestamp, message_id) order: the contract's "Sessions" list."""
    start, end = events[0]["timestamp"], events[-1]["timestamp"]
    with_path = [e for e in events if e.get("page_path") is not None]
    referrer = _first_carrying(events, "referrer")
    campaign = _first_carrying(events, "utm_source", "utm_medium", "utm_campaign") or {}
    agent = _first_carrying(events, "user_agent")
    sent_type = _first_carrying(events, "device_type")
    stamp = start.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    converted = [e for e in events if is_conversion(e, settings)]
    revenues = [e["revenue"] for e in converted if e.get("revenue") is not None]
    session = {
        "session_id": hashlib.sha256(f"{user_key}|{stamp}".encode()).hexdigest()[:32],
        "user_key": user_key,
        "session_number": number,
        "session_start": start,
        "session_end": end,
        "duration_seconds": (end - start).total_seconds(),
        "num_events": len(events),
        "page_views": sum(e.get("type") == "page" for e in events),
        "first_event": _name(events[0]),
        "last_event": _name(events[-1]),
        "landing_path": with_path[0]["page_path"] if with_path else None,
        "exit_path": with_path[-1]["page_path"] if with_path else None,
        "referrer": referrer["referrer"] if referrer else None,
        "utm_source": campaign.get("utm_source"),
        "utm_medium": campaign.get("utm_medium"),
        "utm_campaign": campaign.get("utm_campaign"),
        "device_type": device_class(agent["user_agent"]) if agent else sent_type["device_type"] if sent_type else None,
        "ended_by_cap": ended_by_cap,
        "is_bot": is_bot(agent["user_agent"]) if agent else False,
        "conversions": len(converted),
        "revenue": money_sum(revenues),
        "first_conversion_at": converted[0]["timestamp"] if converted else None,
        "session_date": local_day(start, settings),
    }
    return {**session, "default_channel_group": channel_group(session, settings)}


# --------------------------------------------------------------------------------------------------
# The daily accumulating snapshot
# --------------------------------------------------------------------------------------------------


def state_on(day: date, session_days: set[date], settings: Settings = DEFAULTS) -> str | None:
    """A user's lifecycle state at the end of ``day``, from the days their sessions started on.

    None before their first session day (the user is not in the snapshot yet).
    """
    days_so_far = [d for d in session_days if d <= day]
    if not days_so_far:
        return None
    if min(days_so_far) == day:
        return "new"  # the first session ever started today (more sessions today change nothing)
    if day in session_days:
        return "active"  # a session today, not the first
    idle_days = (day - max(days_so_far)).days  # 1 or more
    if idle_days <= settings.lapsing_days:
        return "lapsing"
    if idle_days <= settings.dormant_days:
        return "dormant"
    return "churned"


def _round_half_up(value: Fraction, places: int) -> float:
    """Round a non-negative exact fraction to ``places`` decimals, halves up (as SQL's ROUND does).

    Decision: halves go up, computed exactly, rather than Python's round() on a float (which rounds
    halves to even and sees binary approximations).
    """
    scale = 10**places
    return float(Fraction(int(value * scale + Fraction(1, 2)), scale))


def daily_snapshot(sessions: list[dict], horizon: date, settings: Settings = DEFAULTS) -> list[dict]:
    """The accumulating snapshot from the first session day up to ``horizon`` (inclusive).

    Only ``user_key`` and ``session_date`` of the sessions are used. One row per (snapshot_date, state):
    ``users_on_hand`` at the end of the day, ``users_entered`` / ``users_exited`` versus the end of the day
    before (a user not yet in the snapshot the day before enters), and ``avg_days_in_state``: the mean
    over the users on hand of (day - the day they entered their current state), rounded half up to
    4 decimals, 0.0 with nobody on hand (``sum_days_in_state`` is the sum before dividing). Rows with all
    three counts zero are left out.
    Sessions that start after ``horizon`` do not count.
    """
    session_days: dict[str, set[date]] = {}
    for session in sessions:
        session_days.setdefault(session["user_key"], set()).add(session["session_date"])
    if not session_days:
        return []
    first_day = min(min(days) for days in session_days.values())

    rows: list[dict] = []
    state_yesterday: dict[str, str] = {}  # user -> state at the end of the previous day
    entered_on: dict[str, date] = {}  # user -> day they entered their current state
    day = first_day
    while day <= horizon:
        state_today: dict[str, str] = {}
        for user, days in session_days.items():
            state = state_on(day, days, settings)
            if state is None:
                continue
            state_today[user] = state
            if state_yesterday.get(user) != state:
                entered_on[user] = day

        for state in STATES:
            on_hand = [user for user, s in state_today.items() if s == state]
            entered = [user for user in on_hand if state_yesterday.get(user) != state]
            exited = [user for user, s in state_yesterday.items() if s == state and state_today.get(user) != state]
            if not on_hand and not entered and not exited:
                continue
            total_days = sum((day - entered_on[user]).days for user in on_hand)
            average = _round_half_up(Fraction(total_days, len(on_hand)), 4) if on_hand else 0.0
            rows.append(
                {
                    "snapshot_date": day,
                    "state": state,
                    "users_on_hand": len(on_hand),
                    "users_entered": len(entered),
                    "users_exited": len(exited),
                    "avg_days_in_state": average,
                    "sum_days_in_state": total_days,
                }
            )

        state_yesterday = state_today
        day += timedelta(days=1)
    return rows


# --------------------------------------------------------------------------------------------------
# Users
# --------------------------------------------------------------------------------------------------

FIRST_TOUCH = (
    "landing_path",
    "referrer",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "device_type",
    "default_channel_group",
)


def users(events: list[dict], sessions: list[dict], settings: Settings = DEFAULTS) -> list[dict]:
    """One row per person: its userId (None for a visitor never identified), when it was first and last seen,
    its sessions, events and distinct anonymousIds, its first session's source as ``first_*``, and its
    conversions: how many, their revenue (None when none carries any), when the first was, and how many of its
    sessions carry revenue."""
    by_person: dict[str, list[dict]] = {}
    for event in events:
        by_person.setdefault(event["user_key"], []).append(event)
    first_sessions = {s["user_key"]: s for s in sessions if s["session_number"] == 1}
    sessions_of: dict[str, list[dict]] = {}
    for session in sessions:
        sessions_of.setdefault(session["user_key"], []).append(session)
    counts = Counter(s["user_key"] for s in sessions)
    rows = []
    for person, own in sorted(by_person.items()):
        first = first_sessions[person]
        user_ids = {e["user_id"] for e in own if e["user_id"] is not None}
        # Summed over its sessions' revenues: a session whose sum overflowed has none.
        revenues = [s["revenue"] for s in sessions_of[person] if s["revenue"] is not None]
        rows.append(
            {
                "user_key": person,
                "user_id": person if person in user_ids else None,  # its own events' userIds are its key
                "first_seen": min(e["timestamp"] for e in own),
                "last_seen": max(e["timestamp"] for e in own),
                "sessions": counts[person],
                "events": len(own),
                "anonymous_ids": len({e["anonymous_id"] for e in own if e["anonymous_id"] is not None}),
                **{f"first_{name}": first[name] for name in FIRST_TOUCH},
                "conversions": sum(is_conversion(e, settings) for e in own),
                "revenue": money_sum(revenues),
                "first_conversion_at": min((e["timestamp"] for e in own if is_conversion(e, settings)), default=None),
                "revenue_sessions": len(revenues),
            }
        )
    return rows


# --------------------------------------------------------------------------------------------------
# Everything at once
# --------------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------
# Forgetting a person
# --------------------------------------------------------------------------------------------------


def _ids(line: str) -> tuple[str | None, str | None] | None:
    """A line's userId and anonymousId as the pipeline reads them, or None when it is not a JSON object (a line
    that cannot be parsed names no one)."""
    try:
        message = json.loads(line, parse_constant=_no_constant, parse_float=_number, parse_int=_number)
    except ValueError:
        return None
    if not isinstance(message, dict) or _has_lone_surrogate(message):
        return None
    return _id(message.get("userId")), _id(message.get("anonymousId"))


def _lines_of(day) -> list[str]:
    return [line for lines in (day.values() if isinstance(day, dict) else [day]) for line in lines]


def forget(lines_by_received_day: dict, user_ids: set[str]) -> dict:
    """The landing zone (``accept_landing``'s input) without the lines the contract forgets for ``user_ids``:
    every line whose userId is one of them, and every line without a userId whose anonymousId was ever linked to
    one: carried by any line (accepted or rejected, any copy, any day) together with that userId.

    Decision: a link is any line carrying both ids, not only the kept copy of an accepted message: forgetting errs
    towards forgetting. A received day left without lines is no received day (it holds no line, as the pipeline
    counts days)."""
    ids = [_ids(line) for day in lines_by_received_day.values() for line in _lines_of(day)]
    linked = {device for found in ids if found for user, device in [found] if user in user_ids and device}

    def kept(line: str) -> bool:
        found = _ids(line)
        if found is None:
            return True
        user, device = found
        return user not in user_ids and not (user is None and device in linked)

    remaining = {}
    for received_date, day in lines_by_received_day.items():
        if isinstance(day, dict):
            left = {source: [x for x in lines if kept(x)] for source, lines in day.items()}
            left = {source: lines for source, lines in left.items() if lines}
        else:
            left = [x for x in day if kept(x)]
        if left:
            remaining[received_date] = left
    return remaining


def recompute(lines_by_received_day: dict, settings: Settings = DEFAULTS, forgotten: set[str] = frozenset()) -> dict:
    """Every output from all landing lines at once (``accept_landing``'s input): what the incremental pipeline
    must equal. ``forgotten``: userIds the pipeline was asked to forget, whose lines are left out (``forget``).

    Keys: ``accepted`` and ``rejected`` (``accept_landing``), ``events`` (deduplicated), ``sessions``,
    ``snapshot`` (up to the horizon: the last local day ended by the end of the latest received day), ``users``.
    """
    if forgotten:
        lines_by_received_day = forget(lines_by_received_day, set(forgotten))
    accepted, rejected = accept_landing(lines_by_received_day, settings)
    events = dedupe(accepted)
    if settings.stitch_identities:
        events = stitch(events)
    sessions = sessionize(events, settings)
    if lines_by_received_day:
        last = horizon(date.fromisoformat(str(max(lines_by_received_day))), settings)
        snapshot = daily_snapshot(sessions, last, settings)
    else:
        snapshot = []
    return {
        "accepted": accepted,
        "rejected": rejected,
        "events": events,
        "sessions": sessions,
        "snapshot": snapshot,
        "users": users(events, sessions, settings),
    }
