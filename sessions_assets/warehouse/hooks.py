"""Named moments inside a run where a caller can act: what the tests use to kill a run half-way through an erasure or
to take a forget request while an ingest judges its lines, without patching a function by its private name.

A run calls ``reached(name, **context)`` at each; nothing is registered outside tests, so it costs a dictionary
lookup. ``at(name, action)`` registers ``action`` (called with the context) for a block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

# An erasure deleted its lines and recorded what it removed, but has not yet recounted their received days.
LINES_REMOVED = "forget.lines_removed"
# An ingest judged and counted its lines, before it checks the journal again and commits.
LINES_JUDGED = "ingest.lines_judged"
# An ingest committed one landing table (``table``); the next ones are still to come.
TABLE_WRITTEN = "ingest.table_written"

_actions: dict[str, list[Callable[..., None]]] = {}


def reached(name: str, **context) -> None:
    for action in list(_actions.get(name, ())):
        action(**context)


@contextmanager
def at(name: str, action: Callable[..., None]) -> Iterator[None]:
    _actions.setdefault(name, []).append(action)
    try:
        yield
    finally:
        _actions[name].remove(action)
