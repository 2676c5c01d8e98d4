"""How a step fails: a lost Delta commit race is retried; anything else fails the run in one line.

The one line (the innermost Java cause of a Spark error, else the error itself) is the step failure's
message: what the UI's run list, ``sessions-assets status`` and the sensors' logs show. The whole trace
stays in the failure's metadata. Neither carries a Spark Connect token.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import TypeVar

import dagster as dg

from sessions_assets.warehouse.delta import is_write_conflict
from sessions_assets.warehouse.spark import one_line, redacted

T = TypeVar("T")
CONFLICT_RETRIES, CONFLICT_WAIT_SECONDS = 5, 2.0


def run_step(context: dg.OpExecutionContext, step: Callable[[], T]) -> T:
    try:
        return step()
    except Exception as error:
        if is_write_conflict(error):
            context.log.warning(f"another run committed first; retrying: {redacted(str(error))[:300]}")
            raise dg.RetryRequested(max_retries=CONFLICT_RETRIES, seconds_to_wait=CONFLICT_WAIT_SECONDS) from error
        trace = redacted("".join(traceback.format_exception(error)))[-20000:]
        raise dg.Failure(description=one_line(error), metadata={"trace": dg.MetadataValue.text(trace)}) from None
