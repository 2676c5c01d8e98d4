"""Events for engine tests: drawn as the oracle takes them (dicts), handed to Spark as its columns."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession

from sessions_assets.engine.devices import device_class, is_bot
from sessions_assets.engine.sessionize import SESSIONIZED
from sessions_assets_tests.helpers.landing import DESKTOP, PHONE, TABLET

BASE = datetime(2024, 3, 1, 22, 0, tzinfo=UTC)  # streams straddle midnights
_ids = itertools.count()
TYPES = {"timestamp": "timestamp", "is_bot": "boolean", "revenue": "decimal(38,6)"}
SCHEMA = ", ".join(f"{c} {TYPES.get(c, 'string')}" for c in SESSIONIZED)
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"


def ev(at: datetime, user: str = "u1", **fields) -> dict:
    """One accepted event as the oracle sees it, with a fresh message id."""
    return {
        "message_id": f"m-{next(_ids):06d}",
        "user_key": user,
        "timestamp": at,
        "type": "track",
        "event": "Viewed",
        **fields,
    }


def call(message_id: str, user_id: str | None, anonymous_id: str | None, at: datetime, **fields) -> dict:
    """A kept event as the identity rules read it: its two ids, its raw ``user_key`` and its time."""
    return {
        "message_id": message_id,
        "user_id": user_id,
        "anonymous_id": anonymous_id,
        "user_key": user_id or anonymous_id,
        "timestamp": at,
        **fields,
    }


def frame(spark: SparkSession, events: list[dict]) -> DataFrame:
    """Events as the ``events`` table holds them: the device class worked out from the user agent."""
    rows = []
    for e in events:
        agent = e.get("user_agent")
        values = {
            **e,
            "device_class": device_class(agent) if agent else None,
            "is_bot": is_bot(agent) if agent else None,
        }
        rows.append(tuple(values.get(c) for c in SESSIONIZED))
    return spark.createDataFrame(rows, SCHEMA)


def _attributes(draw) -> dict:
    kind = draw(st.sampled_from(["page", "page", "track", "identify"]))
    events = ["Signed Up", "Order Completed", "Viewed", None]
    fields = {"type": kind, "event": draw(st.sampled_from(events)) if kind == "track" else None}
    if fields["event"] and draw(st.booleans()):
        fields["revenue"] = draw(st.sampled_from([Decimal("19.990000"), Decimal("0.000001"), Decimal("-5.000000")]))
    if kind == "page" and draw(st.booleans()):
        fields["page_path"] = draw(st.sampled_from(["/", "/a", "/b"]))
    if draw(st.integers(0, 3)) == 0:
        fields["referrer"] = draw(st.sampled_from(REFERRERS))
    if draw(st.integers(0, 4)) == 0:
        field = draw(st.sampled_from(["utm_source", "utm_medium", "utm_campaign"]))
        fields[field] = draw(st.sampled_from(CAMPAIGN_VALUES[field]))
    if draw(st.integers(0, 3)) == 0:
        fields["user_agent"] = draw(st.sampled_from([DESKTOP, PHONE, TABLET, BOT]))
    if draw(st.integers(0, 4)) == 0:
        fields["device_type"] = draw(st.sampled_from(["ios", "android"]))
    return fields


# Referrers and campaign values that reach every channel rule (the site's own domain: example.com).
REFERRERS = [
    "https://r/",
    "https://www.google.co.uk/search",
    "https://m.facebook.com/",
    "https://youtube.com/watch",
    "https://shop.example.com/cart",
    "not a url",
]
CAMPAIGN_VALUES = {
    "utm_source": ["x", "google", "Newsletter", "email", "sms", " Bing ", "tiktok"],
    "utm_medium": [
        "cpc",
        "paid-social",
        "display",
        "organic",
        "social",
        "video",
        "email",
        "affiliate",
        "push",
        "referral",
        "",
    ],
    "utm_campaign": ["brand", "cross-network-q3", "y"],
}


@st.composite
def streams(draw, users: int = 3, max_events: int = 12) -> list[dict]:
    """A few users' events: steps cluster around the 30-minute gap; now and then a bot-like run past 24 h."""
    events = []
    for user in range(draw(st.integers(1, users))):
        moment = BASE + timedelta(minutes=draw(st.integers(0, 600)))
        steps = [1, 10, 29, 30, 31, 45, 200, 1440] + ([25] * 4 if draw(st.integers(0, 5)) == 0 else [])
        for _ in range(draw(st.integers(1, max_events))):
            moment += timedelta(minutes=draw(st.sampled_from(steps)), seconds=draw(st.sampled_from([0, 0, 1])))
            events.append(ev(moment, f"u{user}", **_attributes(draw)))
    return events
