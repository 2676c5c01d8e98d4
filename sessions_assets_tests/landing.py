"""Builders for landing-zone files in tests: Segment lines and received-day folders."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any


def ts(text: str) -> datetime:
    """'2024-03-11 09:45' (UTC) -> aware datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def segment(
    message_id: str, user: str | None, at: datetime | str, received: datetime | str | None = None, **extra: Any
) -> str:
    """One Segment track event as a JSON line; ``received`` defaults to 5 s after the device time."""
    at = ts(at) if isinstance(at, str) else at
    received = ts(received) if isinstance(received, str) else (received or at + timedelta(seconds=5))
    message = {
        "messageId": message_id,
        "type": "track",
        "event": "Page Viewed",
        "userId": user,
        "anonymousId": f"anon-{user}",
        "timestamp": iso(at),
        "receivedAt": iso(received),
        "sentAt": iso(at),
        "properties": {"path": "/"},
    }
    message.update(extra)
    return json.dumps({k: v for k, v in message.items() if v is not ...})


def received_day_of(line: str) -> date:
    return datetime.fromisoformat(json.loads(line)["receivedAt"].replace("Z", "+00:00")).date()


def write_day(root: Path, received_day: date | str, lines: list[str], name: str = "part-0000.jsonl") -> Path:
    """Write ``lines`` as one landing file of ``received_day``; returns the file."""
    folder = Path(root) / "landing" / f"received_date={received_day}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def write_by_received_day(root: Path, lines: list[str], name: str = "part-0000.jsonl") -> list[date]:
    """Write each line into the folder of its ``receivedAt`` day; returns the received days."""
    days: dict[date, list[str]] = {}
    for line in lines:
        days.setdefault(received_day_of(line), []).append(line)
    for day, day_lines in days.items():
        write_day(root, day, day_lines, name)
    return sorted(days)
