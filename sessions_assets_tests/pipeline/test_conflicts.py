"""A commit another commit beat is recognised by the condition Delta's exception carries, as the test server raises it;
any other error is not (a step retries only a lost commit race, and fails on anything else in one line)."""

from __future__ import annotations

import threading

import pytest
from pyspark.errors import PySparkException

from sessions_assets.warehouse.delta import is_write_conflict


def test_a_commit_that_lost_a_race_is_a_write_conflict_and_a_missing_table_is_not(spark, tmp_path):
    path = tmp_path / "raced"
    spark.sql(f"CREATE TABLE delta.`{path}` (k INT, v INT) USING delta")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (1, 1), (2, 2)")
    errors: list[Exception] = []

    def update(writer: int) -> None:
        for n in range(12):
            if errors:  # a conflict is what the test needs: the writers stop at the first
                return
            try:
                spark.sql(f"UPDATE delta.`{path}` SET v = {writer * 100 + n} WHERE k = 1")
            except Exception as error:  # noqa: BLE001 (every error is judged below)
                errors.append(error)

    writers = [threading.Thread(target=update, args=(w,)) for w in range(3)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert errors, "no two of 36 concurrent updates of one row conflicted"
    assert all(isinstance(e, PySparkException) and e.getCondition().startswith("DELTA_CONCURRENT_") for e in errors)
    assert all(is_write_conflict(e) for e in errors)

    with pytest.raises(PySparkException) as missing:
        spark.sql(f"UPDATE delta.`{tmp_path / 'missing'}` SET v = 0").collect()
    assert not is_write_conflict(missing.value)
