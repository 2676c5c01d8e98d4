"""Every tunable of the pipeline, in one place, with the contract's defaults.

Values come from run configuration (the ``settings`` resource) or, for deployments, from environment
variables read once in ``definitions.py``. The rules they parameterise are in ``../shared/CONTRACT.md``.
"""

from __future__ import annotations

import os
from datetime import date, timedelta
from pathlib import Path

import dagster as dg

DEFAULT_START_DATE = "2020-01-01"


def data_root_from_env() -> str:
    """The data root: ``SESSIONS_DATA_ROOT``, default ``./data`` (the contract's ``$ROOT``)."""
    return os.environ.get("SESSIONS_DATA_ROOT", "data")


def start_date_from_env() -> str:
    """First partition day: ``SESSIONS_START_DATE``, default 2020-01-01; older events are ``too_late``."""
    return os.environ.get("SESSIONS_START_DATE", DEFAULT_START_DATE)


class PipelineSettings(dg.ConfigurableResource):
    """Where the data lives and the acceptance, session and lifecycle rules (contract defaults)."""

    data_root: str = "data"
    start_date: str = DEFAULT_START_DATE
    max_future_skew_minutes: int = 60
    max_lateness_days: int = 400
    session_gap_minutes: int = 30
    max_session_hours: int = 24
    lapsing_days: int = 7
    dormant_days: int = 30
    # Queries are interpreted (``resources.py``), except a scan of at least this many stored rows: the
    # ``events`` MERGE matching a day's messages against every touched event day (``compiled``).
    compile_above_rows: int = 4_000_000
    # The ``events`` MERGE consults each touched day's Bloom filter of message ids, and does not open the
    # days it rules out, once the touched days hold this many stored rows (``message_filter.py``).
    message_filter_above_rows: int = 1_000_000
    # ``events`` and ``sessions`` days touched by a run are compacted once they hold this many files
    # (each run adds one to every day it touches), at most ``compact_most_days`` of them per run. At
    # 100,000 events a day a compaction costs ~0.7 s a day and each extra file ~1 ms a run on the
    # ``events`` MERGE alone: 32 files balances the two (README, Performance).
    compact_min_files: int = 32
    compact_most_days: int = 8

    @property
    def landing(self) -> Path:
        return Path(self.data_root) / "landing"

    def table_path(self, table: str) -> str:
        return str((Path(self.data_root) / "warehouse" / table).absolute())

    @property
    def first_day(self) -> date:
        return date.fromisoformat(self.start_date)

    @property
    def session_gap(self) -> timedelta:
        return timedelta(minutes=self.session_gap_minutes)

    @property
    def max_session(self) -> timedelta:
        return timedelta(hours=self.max_session_hours)


def max_days_per_run_from_env() -> int:
    """The most days one run may process (``SESSIONS_MAX_DAYS_PER_RUN``, default 31); backfills split."""
    return int(os.environ.get("SESSIONS_MAX_DAYS_PER_RUN", "31"))
