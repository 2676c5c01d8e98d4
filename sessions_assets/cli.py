"""``sessions-assets``: generate a sample landing zone, or process it through Dagster.

    sessions-assets generate --data-root DIR [--days N] [--users N] [--seed S]
    sessions-assets run --data-root DIR
    sessions-assets status --data-root DIR

``run`` first finishes what an interrupted run left (``status.py``), then ingests every received day that
is new or whose files changed, oldest first, and after each one rebuilds exactly the partitions it
affected (``affected.plan_rebuild``, the late-data sensor's logic). ``status`` tells, without running
anything, which of those the next ``run`` would do. Runs are recorded in the Dagster instance at ``$DAGSTER_HOME`` (default ``DIR/dagster_home``),
so ``dagster dev`` with the same home shows them, and a second ``run`` finds nothing to do.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def _instance(data_root: Path):
    import dagster as dg

    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    home = data_root / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    return dg.DagsterInstance.local_temp(tempdir=str(home.absolute()))


def generate(args: argparse.Namespace) -> int:
    from sessions_assets.generate import generate_landing_zone

    summary = generate_landing_zone(args.data_root, days=args.days, users=args.users, seed=args.seed)
    print(summary)
    return 0


def run(args: argparse.Namespace) -> int:
    from sessions_assets.definitions import build_resources
    from sessions_assets.runner import ASSET_NAMES, Runner, recover_crashed_runs
    from sessions_assets.status import pipeline_status

    started = time.monotonic()
    data_root = Path(args.data_root)
    os.environ["SESSIONS_DATA_ROOT"] = str(data_root)
    resources = build_resources(data_root=str(data_root))
    with _instance(data_root) as instance:
        runner = Runner(instance, resources)
        for run_id in recover_crashed_runs(instance):
            print(f"Marked run {run_id} failed: its process is gone.")
        status_ = pipeline_status(instance, resources["settings"], ASSET_NAMES)
        if status_.catch_up is not None and not status_.catch_up.empty:
            print(f"Finishing an interrupted run: {status_.catch_up.describe()}", flush=True)
            runner.apply(status_.catch_up)
        pending = status_.to_ingest  # finishing a rebuild ingests nothing, so this is still current
        if not pending:
            print(f"Nothing to do: every received day under {data_root / 'landing'} is processed.")
            return 0
        print(f"{len(pending)} received day(s) to process: {pending[0]} .. {pending[-1]}")
        for received_day in pending:
            report = runner.process(received_day)
            print(f"- {report}", flush=True)
    print(f"Done in {time.monotonic() - started:.0f}s. Tables under {data_root / 'warehouse'}.")
    return 0


def status(args: argparse.Namespace) -> int:
    from sessions_assets.definitions import build_resources
    from sessions_assets.runner import ASSET_NAMES
    from sessions_assets.status import pipeline_status

    data_root = Path(args.data_root)
    settings = build_resources(data_root=str(data_root))["settings"]
    with _instance(data_root) as instance:
        print(pipeline_status(instance, settings, ASSET_NAMES).describe())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sessions-assets", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write a realistic sample landing zone")
    gen.add_argument("--data-root", default=os.environ.get("SESSIONS_DATA_ROOT", "data"))
    gen.add_argument("--days", type=int, default=14)
    gen.add_argument("--users", type=int, default=200)
    gen.add_argument("--seed", type=int, default=7)
    gen.set_defaults(func=generate)
    runp = sub.add_parser("run", help="process every unprocessed received day through Dagster")
    runp.add_argument("--data-root", default=os.environ.get("SESSIONS_DATA_ROOT", "data"))
    runp.set_defaults(func=run)
    stat = sub.add_parser("status", help="what state the pipeline is in and what the next run would process")
    stat.add_argument("--data-root", default=os.environ.get("SESSIONS_DATA_ROOT", "data"))
    stat.set_defaults(func=status)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
