"""Builders for test inputs: Segment lines, landing folders, and the oracle's view of a landing zone."""

from __future__ import annotations

import gzip
import json
import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

DESKTOP = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36"
PHONE = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148"
TABLET = "Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148"


def ts(text: str) -> datetime:
    """'2024-03-11 09:45' (UTC) -> aware datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def segment(
    message_id: str,
    user: str | None,
    at: datetime | str,
    received: datetime | str | None = None,
    *,
    kind: str = "track",
    event: str | None = "Page Viewed",
    path: str | None = None,
    referrer: str | None = None,
    campaign: dict | None = None,
    agent: str | None = None,
    device: str | None = None,
    **extra: Any,
) -> str:
    """One Segment message as a JSON line; ``received`` defaults to 5 s after the device time. ``path``,
    ``referrer``, ``campaign``, ``agent`` and ``device`` go where Segment's libraries put them."""
    at = ts(at) if isinstance(at, str) else at
    received = ts(received) if isinstance(received, str) else (received or at + timedelta(seconds=5))
    context: dict[str, Any] = {}
    if path is not None or referrer is not None:
        context["page"] = {k: v for k, v in (("path", path), ("referrer", referrer)) if v is not None}
    if campaign:
        context["campaign"] = campaign
    if agent:
        context["userAgent"] = agent
    if device:
        context["device"] = {"type": device}
    message = {
        "messageId": message_id,
        "type": kind,
        "userId": user,
        "anonymousId": f"anon-{user}",
        "timestamp": iso(at),
        "receivedAt": iso(received),
        "sentAt": iso(at),
        "properties": {},
        "context": context,
    }
    if kind == "track":
        message["event"] = event
    message.update(extra)
    return json.dumps({k: v for k, v in message.items() if v is not ...})


def received_day_of(line: str) -> date:
    return datetime.fromisoformat(json.loads(line)["receivedAt"].replace("Z", "+00:00")).date()


def write_day(root: Path, received_day: date | str, lines: list[str], name: str = "part-0000.jsonl") -> Path:
    """Write ``lines`` as one landing file of ``received_day`` (gzipped for a ``.gz`` name); returns the file."""
    path = Path(root) / "landing" / f"received_date={received_day}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(payload) if name.endswith(".gz") else payload)
    return path


def by_received_day(lines: list[str]) -> dict[str, list[str]]:
    """Lines grouped by their ``receivedAt`` day, as the oracle takes a landing zone."""
    days: dict[str, list[str]] = {}
    for line in lines:
        days.setdefault(received_day_of(line).isoformat(), []).append(line)
    return days


def write_by_received_day(root: Path, lines: list[str], name: str = "part-0000.jsonl") -> list[date]:
    """Write each line into the folder of its ``receivedAt`` day; returns the received days."""
    days = by_received_day(lines)
    for day, day_lines in days.items():
        write_day(root, day, day_lines, name)
    return sorted(date.fromisoformat(d) for d in days)


def write_segment_day(
    root: Path, received_day: date | str, source: str, lines: list[str], name: str = "1710547200000.a1b2.gz"
) -> Path:
    """Write ``lines`` as one gzipped file of ``source`` for ``received_day``, as Segment's S3 destination does."""
    day = date.fromisoformat(str(received_day))
    path = Path(root) / "landing" / "segment-logs" / source / str(segment_millis(day)) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode(), mtime=0))
    return path


def segment_millis(day: date) -> int:
    """The Unix milliseconds of a day's UTC midnight: the name of its folder in Segment's layout."""
    return int(datetime.combine(day, datetime.min.time(), UTC).timestamp()) * 1000


def _read(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        lines = re.split(r"\r\n|\r|\n", f.read())  # Hadoop's line breaks
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def landing_lines(root: Path) -> dict[str, list[str] | dict[str, list[str]]]:
    """Every line of the landing zone's readable files, by received day, read plainly (gzip included); in
    Segment's layout, by received day and source. Folders that are not a received day are left out."""
    by_day: dict = {}
    landing = Path(root) / "landing"
    for path in sorted(landing.glob("received_date=*/*")):
        if not path.name.startswith((".", "_")) and path.name.endswith((".jsonl", ".json", ".jsonl.gz")):
            by_day.setdefault(path.parent.name.split("=")[1], []).extend(_read(path))
    for path in sorted(landing.glob("segment-logs/*/*/*")):
        millis, source = path.parent.name, path.parent.parent.name
        hidden = path.name.startswith((".", "_")) or source.startswith((".", "_"))
        if not re.fullmatch(r"[1-9][0-9]*", millis) or int(millis) % 86_400_000 or hidden:
            continue
        if path.is_file() and path.name.endswith((".gz", ".jsonl", ".json")):
            day = (datetime.fromtimestamp(int(millis) / 1000, UTC)).date().isoformat()
            by_day.setdefault(day, {}).setdefault(source, []).extend(_read(path))
    return by_day
