"""Overlapping runs: Dagster serializes the warehouse writers, Delta's optimistic concurrency is the backstop.

Every asset that writes a Delta table is in one pool, ``WAREHOUSE_POOL``. With ``dagster.yaml``'s
``concurrency.pools.default_limit: 1`` at most one such step runs at a time across all runs (a daily run,
a sensor's backfill and someone's UI backfill), so a step always reads the other tables as the previous
step left them. Where pools are not enforced (another instance, a limit raised by hand), two writers can
still meet on one table: Delta then refuses the later commit with a concurrent-modification error and the
step is retried from the start, re-reading the tables, so nothing is written from a stale read.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

WAREHOUSE_POOL = "delta_warehouse"
MAX_CONFLICT_RETRIES = 5

# Delta's commit-conflict exceptions (io.delta.exceptions.*), as delta-spark surfaces them in Python.
DELTA_CONFLICTS = {
    "DeltaConcurrentModificationException",
    "ConcurrentWriteException",
    "MetadataChangedException",
    "ProtocolChangedException",
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
}


def is_write_conflict(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is Delta refusing a commit because another one won."""
    while error is not None:
        if type(error).__name__ in DELTA_CONFLICTS or "io.delta.exceptions.Concurrent" in str(error)[:300]:
            return True
        error = error.__cause__ or error.__context__
    return False


@contextmanager
def retry_on_write_conflict(context: dg.AssetExecutionContext) -> Iterator[None]:
    """Re-run the step (Dagster retry, jittered back-off) when Delta rejects its commit; re-raise anything else."""
    try:
        yield
    except Exception as error:
        if not is_write_conflict(error):
            raise
        attempt = context.retry_number + 1
        wait = min(30.0, 2.0**attempt) * random.uniform(0.5, 1.5)
        context.log.warning(f"Delta write conflict (attempt {attempt}), retrying in {wait:.1f}s: {str(error)[:200]}")
        raise dg.RetryRequested(max_retries=MAX_CONFLICT_RETRIES, seconds_to_wait=wait) from error
