"""What the ``sessions`` commits' marks allow: a row is added to stored sessions only if no commit that
may have counted it read its day after it was inserted (``session_extend``)."""

from __future__ import annotations

from datetime import date, datetime

from sessions_assets.session_extend import UNKNOWN, mark, read_marks, seen_upto
from sessions_assets.tables import SESSIONS, Warehouse

MAR_1, MAR_2, MAR_3, MAR_9 = date(2024, 3, 1), date(2024, 3, 2), date(2024, 3, 3), date(2024, 3, 9)


def _write(wh: Warehouse, day: date, note: str | None = None) -> None:
    """Append one session to ``sessions`` as one commit, with ``note`` as its ``userMetadata``."""
    start = datetime(day.year, day.month, day.day, 9)
    rows = wh.spark.createDataFrame([(f"s{day}", "u", start, start, 1, False, day)], SESSIONS.schema)
    writer = rows.write.format("delta").mode("append")
    if note is not None:
        writer = writer.option("userMetadata", note)
    writer.save(wh.path(SESSIONS))


def _seen(wh: Warehouse) -> dict[date, int]:
    marks = read_marks(wh)
    return {day: seen_upto(marks, day) for day in (MAR_1, MAR_2, MAR_3, MAR_9)}


def test_an_empty_table_has_read_nothing(warehouse):
    warehouse.delta(SESSIONS)  # created: a commit that holds no rows
    assert set(_seen(warehouse).values()) == {-1}


def test_a_write_without_a_mark_may_have_read_anything(warehouse):
    # Written by an older version of the project, or by hand: no row can be added on top of it.
    _write(warehouse, MAR_1)
    assert set(_seen(warehouse).values()) == {UNKNOWN}


def test_a_mark_bounds_the_unmarked_writes_before_it_and_covers_only_its_days(warehouse):
    _write(warehouse, MAR_1)
    _write(warehouse, MAR_2, mark(5, MAR_1, MAR_2))
    # The unmarked write came first, so it read no later version than the mark's 5, on any day.
    assert _seen(warehouse) == {MAR_1: 5, MAR_2: 5, MAR_3: 5, MAR_9: 5}
    _write(warehouse, MAR_9, mark(9, MAR_3, MAR_9))
    assert _seen(warehouse) == {MAR_1: 5, MAR_2: 5, MAR_3: 9, MAR_9: 9}
    _write(warehouse, MAR_2, mark(12, None, None))  # a full build read every day
    assert set(_seen(warehouse).values()) == {12}
