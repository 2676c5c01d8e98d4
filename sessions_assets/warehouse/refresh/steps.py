"""The registry of refresh steps: every derived table, what it reads, how far a repair reaches, in refresh order.

The one list the rest is read from: the ledger's follow order (``FOLLOWS``), the derived assets and their
dependencies (``graph/assets.py``), the erasure's refresh (``forget.refresh_all``), the command line's
``repair --tables`` and its help, and the order in ``docs/operations.md``. Adding a derived table is an entry here
and its refresh function (``refresh(wh, settings, days)``, returning an ``Outcome``).

``identities`` and ``lifecycle`` are internal state of the steps that keep them (``kept``): the events step reads and
catches up ``identities``; the lifecycle's totals hand the snapshot its earliest changed day. They are no assets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from enum import Enum

from sessions_assets.settings import Settings
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.refresh.events import refresh_events
from sessions_assets.warehouse.refresh.outcome import Outcome
from sessions_assets.warehouse.refresh.sessions import refresh_sessions
from sessions_assets.warehouse.refresh.snapshot import refresh_snapshot
from sessions_assets.warehouse.refresh.users import refresh_users
from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import (
    DAILY_SNAPSHOT,
    EVENTS,
    IDENTITIES,
    LIFECYCLE,
    PARTITION_MAP,
    RAW_EVENTS,
    RECEIVED_DAYS,
    SESSIONS,
    USERS,
    Table,
)


class Span(Enum):
    """Which days of an input a day of the step's table reads."""

    ANY_RECEIVED_DAY = "any received day"  # a received day holds events of any day
    SAME_DAY = "the same day"
    NEIGHBOURS = "the day and its neighbours"  # a session started the day before runs into the day


class Reach(Enum):
    """What a repair of some days recomputes."""

    DAYS = "those days"
    EVERY_ROW = "every row"


@dataclass(frozen=True)
class Input:
    """An asset the step's table is computed from, and which of its days a day of the table reads."""

    table: Table
    span: Span


@dataclass(frozen=True)
class Step:
    """One derived table: the assets it depends on, the tables whose logs it absorbs (its positions in the
    ``ledger``), its refresh, what a repair recomputes, what the table holds (its asset's description), and the
    internal tables it keeps, each with the table whose log it absorbs."""

    table: Table
    inputs: tuple[Input, ...]
    absorbs: tuple[Table, ...]
    refresh: Callable[[Warehouse, Settings, tuple[date, date] | None], Outcome]
    reach: Reach
    description: str
    kept: tuple[tuple[Table, Table], ...] = ()
    changed: Callable[[Outcome], int] = lambda outcome: sum(outcome.days.values())  # rows changed, for a summary

    @property
    def name(self) -> str:
        return self.table.name


def _persons(outcome: Outcome) -> int:
    return sum(outcome.counts.get(k, 0) for k in ("persons_written", "persons_removed", "persons"))


STEPS = (
    Step(
        EVENTS,
        (Input(RAW_EVENTS, Span.ANY_RECEIVED_DAY), Input(PARTITION_MAP, Span.ANY_RECEIVED_DAY)),
        (RAW_EVENTS,),
        refresh_events,
        Reach.DAYS,
        "Accepted events by event day, one row per ``messageId``: the first-received copy, wherever it landed.",
        kept=((IDENTITIES, EVENTS),),  # read, then caught up with the events the step wrote
    ),
    Step(
        SESSIONS,
        (Input(EVENTS, Span.NEIGHBOURS),),
        (EVENTS,),
        refresh_sessions,
        Reach.DAYS,
        "Sessions by start day (a gap and a cap from the pipeline's settings), numbered per user, with landing "
        "page, source, channel group, device, bot flag, conversions and revenue: only the chains that changed are "
        "recomputed.",
    ),
    Step(
        USERS,
        (Input(SESSIONS, Span.SAME_DAY), Input(EVENTS, Span.SAME_DAY)),
        (SESSIONS, EVENTS),
        lambda wh, settings, days: refresh_users(wh, repair=days is not None),
        Reach.EVERY_ROW,
        "One row per person: its userId, first and last seen, sessions, events, anonymous ids and first touch. "
        "Only the persons whose sessions or events changed are recomputed (``rebuild``: all of them).",
        changed=_persons,
    ),
    Step(
        DAILY_SNAPSHOT,
        (Input(SESSIONS, Span.SAME_DAY),),
        # Summed from the lifecycle's totals, up to the horizon the latest received day sets.
        (LIFECYCLE, RECEIVED_DAYS),
        lambda wh, settings, days: refresh_snapshot(wh, settings, repair=days is not None),
        Reach.EVERY_ROW,
        "Users on hand per lifecycle state at the end of each day, up to the latest received day.",
        kept=((LIFECYCLE, SESSIONS),),
    ),
)
BY_NAME = {step.name: step for step in STEPS}
NAMES = tuple(BY_NAME)


def _follows() -> tuple[tuple[Table, Table], ...]:
    """(table, the input it absorbs) in refresh order: a step's internal tables that follow its inputs come before
    its own positions, those that follow its own table after them."""
    pairs = []
    for step in STEPS:
        pairs += [kept for kept in step.kept if kept[1] is not step.table]
        pairs += [(step.table, source) for source in step.absorbs]
        pairs += [kept for kept in step.kept if kept[1] is step.table]
    return tuple(pairs)


FOLLOWS = _follows()


def behind(storage: Storage) -> list[ledger.Position]:
    """The derived and internal tables that have not absorbed every change of their inputs (no Spark)."""
    return ledger.behind(storage, FOLLOWS)


def refresh_all(wh: Warehouse, settings: Settings) -> Counter:
    """Every step in order, applying what its inputs changed; the rows (``users``: persons) each changed."""
    return Counter({step.name: step.changed(step.refresh(wh, settings, None)) for step in STEPS})


def described(names=NAMES) -> str:
    """What a repair of some days recomputes in each of ``names``, for ``--help`` and messages."""
    return "; ".join(f"{n}: {BY_NAME[n].reach.value}" for n in names)
