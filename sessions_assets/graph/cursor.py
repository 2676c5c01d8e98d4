"""What the landing sensor remembers between ticks: its cursor, one JSON object.

    {"reported": ["notes"], "listed_at": 1733097600.0, "latest": {"landing": "2024-03-14"}, "pending": ["2024-03-12"]}

- ``reported``: the keys of the messages already logged (a folder that is not a received day, a day's n-th failed
  run), so each is logged once;
- ``listed_at``: when a tick last listed every received day's files (epoch seconds);
- ``latest``: each parent folder's latest received day at the last tick (day folders sort by time, so one past
  it is new);
- ``pending``: the days due at the last tick, looked at again every tick while they stay due.

It says only which folders a tick looks at; whether a day is due is the warehouse's record (``pending.arrivals``).
A cursor that is a JSON list is an older one, the messages reported; with it, with none, or with one that cannot be
read, nothing was listed yet and the next tick lists everything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date

from sessions_assets.warehouse.pending import Arrivals, Glance


@dataclass(frozen=True)
class LandingCursor:
    reported: frozenset[str] = frozenset()
    listed_at: float | None = None
    latest: Mapping[str, date] = field(default_factory=dict)
    pending: frozenset[date] = frozenset()

    @classmethod
    def read(cls, text: str | None) -> LandingCursor:
        try:
            data = json.loads(text or "{}")
            if isinstance(data, list):
                return cls(reported=frozenset(map(str, data)))
            return cls(
                frozenset(map(str, data.get("reported", ()))),
                float(data["listed_at"]) if data.get("listed_at") is not None else None,
                {str(parent): date.fromisoformat(day) for parent, day in data.get("latest", {}).items()},
                frozenset(date.fromisoformat(day) for day in data.get("pending", ())),
            )
        except (ValueError, TypeError, AttributeError):
            return cls()

    def dump(self) -> str:
        return json.dumps(
            {
                "reported": sorted(self.reported),
                "listed_at": self.listed_at,
                "latest": {parent: day.isoformat() for parent, day in sorted(self.latest.items())},
                "pending": sorted(day.isoformat() for day in self.pending),
            }
        )

    def glance(self, now: float, recent_days: int, full_listing_minutes: int) -> Glance | None:
        """The days this tick looks at, or None when every day's files are due a listing: none yet, or the last
        one ``full_listing_minutes`` ago or more."""
        if self.listed_at is None or now - self.listed_at >= full_listing_minutes * 60:
            return None
        return Glance(self.latest, self.pending, recent_days)

    def after(self, arrivals: Arrivals, glance: Glance | None, now: float, reported: Iterable[str]) -> LandingCursor:
        """What the next tick starts from, after one that looked at ``arrivals`` (through ``glance``, or every day's
        files when None) and reported ``reported``."""
        return LandingCursor(
            frozenset(reported), now if glance is None else self.listed_at, arrivals.latest, frozenset(arrivals.due)
        )
