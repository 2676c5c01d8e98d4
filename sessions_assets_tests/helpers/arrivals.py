"""The project's jobs on a test instance, and received days arriving in steps through them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path

from sessions_assets_tests.helpers.landing import write_day


@contextmanager
def running(root: Path, **settings) -> Iterator:
    """A ``Runner`` of the project's jobs on a fresh in-memory instance over the data root ``root``, with the
    pipeline's settings (``settings`` overriding them): what ``sessions-assets run`` drives. In memory, a run's
    few hundred events cost no file-backed database commits."""
    import dagster as dg

    from sessions_assets.cli.runner import Runner
    from sessions_assets.settings import Settings

    with dg.DagsterInstance.ephemeral() as instance:
        yield Runner(instance, Settings(data_root=str(root), **settings))


def arrive_in_steps(spark, root: Path, steps: list[dict[date, list[str]]], **settings):
    """Write each step's received days (day -> lines) into the landing zone and run what is due (with
    ``settings``); returns the warehouse."""
    from sessions_assets.warehouse.delta import Warehouse
    from sessions_assets.warehouse.storage import Storage

    with running(root, **settings) as runner:
        for step in steps:
            for day, lines in step.items():
                write_day(root, day, lines)
            runner.process()
    return Warehouse(spark, Storage(str(root)))
