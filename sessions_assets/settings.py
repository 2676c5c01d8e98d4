"""Every tunable of the pipeline, in one place, with the data contract's defaults.

The engine and the warehouse take a ``Settings``; the Dagster resource (``defs/resources.py``) builds one
from its config, whose defaults come from the environment (``Settings.from_env``). The README's
configuration table lists the variables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from datetime import date, timedelta

ENV_PREFIX = "SESSIONS_"


@dataclass(frozen=True)
class Settings:
    """Where the data lives and the acceptance, session and lifecycle rules."""

    # ``$ROOT``: a local path or an object-store URI (``s3a://``, ``abfss://``, ``gs://``).
    data_root: str = "data"
    # The first partition day; events before it are ``too_late``.
    start_date: str = "2020-01-01"
    max_future_skew_minutes: int = 60
    max_lateness_days: int = 400
    session_gap_minutes: int = 30
    max_session_hours: int = 24
    # Lifecycle: lapsing 1..lapsing_days idle days, dormant up to dormant_days, churned after.
    lapsing_days: int = 7
    dormant_days: int = 30

    def __post_init__(self) -> None:
        if not 1 <= self.lapsing_days < self.dormant_days:
            raise ValueError("lapsing_days must be at least 1 and below dormant_days")
        if self.session_gap_minutes <= 0 or self.max_session_hours <= 0:
            raise ValueError("session_gap_minutes and max_session_hours must be positive")
        date.fromisoformat(self.start_date)

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        """Defaults from ``SESSIONS_<FIELD>`` (``SESSIONS_DATA_ROOT``, ``SESSIONS_START_DATE``, ...)."""
        values = {}
        for f in fields(cls):
            raw = os.environ.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = int(raw) if f.type == "int" else raw
        return cls(**{**values, **overrides})

    @property
    def first_day(self) -> date:
        return date.fromisoformat(self.start_date)

    @property
    def session_gap(self) -> timedelta:
        return timedelta(minutes=self.session_gap_minutes)

    @property
    def max_session(self) -> timedelta:
        return timedelta(hours=self.max_session_hours)
