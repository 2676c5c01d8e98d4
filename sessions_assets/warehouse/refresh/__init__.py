"""Bring ``events``, ``sessions``, ``users`` and the snapshot up to date with their inputs: one step per asset.

Each step reads where its table stands (``ledger.position``), the input's change feed since then, applies
the engine, and writes once with its new note. Without a note or a feed it rebuilds the table whole. A
step may also repair chosen days: recompute them from their inputs whatever the table holds. A step is a
handful of Spark jobs and one commit: what it reports is collected in one small query. The steps, their inputs and
their order are listed once, in ``steps.py``.
"""

from sessions_assets.warehouse.refresh.events import refresh_events
from sessions_assets.warehouse.refresh.outcome import Outcome
from sessions_assets.warehouse.refresh.sessions import refresh_sessions
from sessions_assets.warehouse.refresh.snapshot import refresh_snapshot
from sessions_assets.warehouse.refresh.users import refresh_users

__all__ = ["Outcome", "refresh_events", "refresh_sessions", "refresh_snapshot", "refresh_users"]
