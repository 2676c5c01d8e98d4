"""Received days arriving in steps, each step processed the way ``sessions-assets run`` does."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from sessions_assets_tests.landing import write_day


def arrive_in_steps(spark, root: Path, steps: list[dict[date, list[str]]], **settings):
    """Write each step's received days (day -> lines) into the landing zone and run what is due, with the
    pipeline's settings (``settings`` overriding them); returns the warehouse."""
    import dagster as dg

    from sessions_assets.cli.runner import Runner
    from sessions_assets.settings import Settings
    from sessions_assets.warehouse.delta import Warehouse
    from sessions_assets.warehouse.storage import Storage

    with dg.instance_for_test() as instance:
        runner = Runner.on(instance, Settings(data_root=str(root), **settings))
        for step in steps:
            for day, lines in step.items():
                write_day(root, day, lines)
            runner.process()
    return Warehouse(spark, Storage(str(root)))
