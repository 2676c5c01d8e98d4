"""The test oracle: the contract implemented plainly in Python, one event at a time.

Deliberately naive and independent of the production code (no Spark, no shared helpers): the tests
compare the pipeline's incremental result with what this computes from all lines at once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone


@dataclass(frozen=True)
class Settings:
    session_gap_minutes: int = 30
    max_session_hours: int = 24
    max_future_skew_minutes: int = 60
    max_lateness_days: int = 400
    start_date: date = date(2020, 1, 1)
    lapsing_days: int = 7
    dormant_days: int = 30


ISO = re.compile(
    r"^(\d{4}-\d{2}-\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?(Z|[+-]\d{2}:?\d{2})?$"
)


def parse_time(value) -> datetime | None:
    """An ISO-8601 date-time string as an aware UTC datetime (no offset means UTC), else None."""
    if not isinstance(value, str):
        return None
    match = ISO.match(value.strip())
    if not match:
        return None
    day, hour, minute, second, fraction, offset = match.groups()
    try:
        moment = datetime(
            *map(int, day.split("-")), int(hour), int(minute), int(second or 0),
            int((fraction or "0")[:6].ljust(6, "0")), tzinfo=timezone.utc,
        )  # fmt: skip
    except ValueError:
        return None
    if offset and offset != "Z":
        sign = 1 if offset[0] == "+" else -1
        digits = offset[1:].replace(":", "")
        moment -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return moment


def _text(value) -> str | None:
    """A present, non-blank JSON string, else None (numbers, objects, null count as missing)."""
    return value if isinstance(value, str) and value.strip() else None


def accept_line(line: str, settings: Settings = Settings()):
    """(event, None) for an accepted line, (None, reason) for a rejected one."""
    try:
        message = json.loads(line)
    except ValueError:
        return None, "malformed_json"
    if not isinstance(message, dict):
        return None, "malformed_json"
    message_id = _text(message.get("messageId"))
    if message_id is None:
        return None, "missing_message_id"
    user_id, anonymous_id = _text(message.get("userId")), _text(message.get("anonymousId"))
    if user_id is None and anonymous_id is None:
        return None, "missing_user"
    at, received = parse_time(message.get("timestamp")), parse_time(message.get("receivedAt"))
    if at is None or received is None:
        return None, "bad_timestamp"
    if at > received + timedelta(minutes=settings.max_future_skew_minutes):
        return None, "future_timestamp"
    if at < received - timedelta(days=settings.max_lateness_days) or at.date() < settings.start_date:
        return None, "too_late"
    event = {
        "message_id": message_id,
        "user_id": user_id,
        "anonymous_id": anonymous_id,
        "user_key": user_id if user_id is not None else anonymous_id,
        "event": message.get("event") if isinstance(message.get("event"), str) else None,
        "timestamp": at,
        "received_at": received,
        "payload": line,
    }
    return event, None


def accept_landing(lines_by_received_day: dict[str, list[str]], settings: Settings = Settings()):
    accepted, rejected = [], []
    for received_day, lines in sorted(lines_by_received_day.items()):
        for line in lines:
            event, reason = accept_line(line, settings)
            if event is None:
                rejected.append((received_day, line, reason))
            else:
                accepted.append({**event, "received_date": received_day})
    return accepted, rejected


def dedupe(events: list[dict]) -> list[dict]:
    """One copy per message_id: the earliest received (then received day, then the line's text)."""
    kept: dict[str, dict] = {}
    for event in events:
        rank = (event["received_at"], event["received_date"], event["payload"])
        current = kept.get(event["message_id"])
        if current is None or rank < (current["received_at"], current["received_date"], current["payload"]):
            kept[event["message_id"]] = event
    return list(kept.values())


def sessionize(events: list[dict], settings: Settings = Settings()) -> list[dict]:
    """Walk each user's events in (timestamp, message_id) order and cut sessions by the two rules."""
    gap, cap = timedelta(minutes=settings.session_gap_minutes), timedelta(hours=settings.max_session_hours)
    by_user: dict[str, list[dict]] = {}
    for event in events:
        by_user.setdefault(event["user_key"], []).append(event)
    sessions = []
    for user, user_events in by_user.items():
        user_events.sort(key=lambda e: (e["timestamp"], e["message_id"]))
        current = None
        for event in user_events:
            at = event["timestamp"]
            if current is not None and at - current["session_end"] <= gap and at - current["session_start"] <= cap:
                current["session_end"] = at
                current["num_events"] += 1
                continue
            if current is not None:
                current["ended_by_cap"] = at - current["session_end"] <= gap  # still active: the cap ended it
                sessions.append(current)
            current = {"user_key": user, "session_start": at, "session_end": at, "num_events": 1, "ended_by_cap": False}
        sessions.append(current)
    for session in sessions:
        session["session_date"] = session["session_start"].date()
    return sessions


def _state(day: date, session_days: list[date], settings: Settings) -> str | None:
    past = [d for d in session_days if d <= day]
    if not past:
        return None
    if past[0] == day:
        return "new"
    if past[-1] == day:
        return "active"
    idle = (day - past[-1]).days
    if idle <= settings.lapsing_days:
        return "lapsing"
    return "dormant" if idle <= settings.dormant_days else "churned"


def daily_snapshot(sessions: list[dict], horizon: date, settings: Settings = Settings()) -> list[dict]:
    """Each user's state every day from their first session day to ``horizon``, counted per state."""
    days_by_user: dict[str, list[date]] = {}
    for session in sessions:
        days_by_user.setdefault(session["user_key"], []).append(session["session_date"])
    if not days_by_user:
        return []
    for days in days_by_user.values():
        days.sort()
    first = min(days[0] for days in days_by_user.values())
    rows = []
    entered_on: dict[str, date] = {}
    yesterday: dict[str, str] = {}
    day = first
    while day <= horizon:
        today = {}
        for user, days in days_by_user.items():
            state = _state(day, days, settings)
            if state is not None:
                today[user] = state
                if yesterday.get(user) != state:
                    entered_on[user] = day
        for state in ("new", "active", "lapsing", "dormant", "churned"):
            on_hand = [u for u, s in today.items() if s == state]
            entered = sum(1 for u in on_hand if yesterday.get(u) != state)
            exited = sum(1 for u, s in yesterday.items() if s == state and today.get(u) != state)
            if on_hand or entered or exited:
                ages = [(day - entered_on[u]).days for u in on_hand]
                rows.append({
                    "snapshot_date": day, "state": state, "users_on_hand": len(on_hand), "users_entered": entered,
                    "users_exited": exited, "avg_days_in_state": round(sum(ages) / len(ages), 4) if ages else 0.0,
                })  # fmt: skip
        yesterday = today
        day += timedelta(days=1)
    return rows


def recompute(lines_by_received_day: dict[str, list[str]], settings: Settings = Settings()) -> dict:
    """Every table from all lines at once."""
    accepted, rejected = accept_landing(lines_by_received_day, settings)
    events = dedupe(accepted)
    sessions = sessionize(events, settings)
    horizon = date.fromisoformat(max(lines_by_received_day)) if lines_by_received_day else None
    snapshot = daily_snapshot(sessions, horizon, settings) if horizon else []
    return {"accepted": accepted, "rejected": rejected, "events": events, "sessions": sessions, "snapshot": snapshot}
