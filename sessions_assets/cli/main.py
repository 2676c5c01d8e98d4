"""``sessions-assets``: generate a sample landing zone, process it through Dagster, say what is due, repair days,
keep the tables compact.

    sessions-assets generate --data-root DIR [--days N] [--users N] [--seed S] [--layout received_date|segment]
    sessions-assets run      --data-root DIR [--key-prefix P]
    sessions-assets status   --data-root DIR [--key-prefix P]
    sessions-assets repair   --data-root DIR [--key-prefix P] --from DAY [--to DAY] [--tables events,sessions,…]
    sessions-assets reingest --data-root DIR [--key-prefix P] [--from DAY [--to DAY] [--folders]]
    sessions-assets maintain --data-root DIR [--key-prefix P] [--retain-hours H]
    sessions-assets forget   --data-root DIR [--key-prefix P] --user-id U [--user-id U2 ...] [--purge-landing]
                             [--hash-only]
    sessions-assets fetch-jars [--to DIR]
    sessions-assets spark-server start|stop|status [--data-root DIR] [--host HOST] [--port PORT]
                                 [--new-token | --no-token]

Runs are recorded in the Dagster instance at ``$DAGSTER_HOME`` (default ``DIR/dagster_home``), so the UI
shows them and a second ``run`` finds nothing to do. ``--key-prefix``: the instance's, when a code location holds
it under one (a ``SessionsComponent``'s ``key_prefix``); the ``defs.yaml`` under the working folder that declares it
gives its attributes. Errors a user can cause are one line, exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import date
from pathlib import Path

from sessions_assets.settings import KEY_PREFIX, SettingsError
from sessions_assets.warehouse.layouts import LAYOUTS
from sessions_assets.warehouse.storage import LayoutError


def _settings(args: argparse.Namespace):
    from sessions_assets.settings import Settings

    if args.declared is not None:
        return args.declared.settings(data_root=args.data_root)
    return Settings.from_env(data_root=args.data_root)


def _declare(args: argparse.Namespace) -> None:
    """With ``--key-prefix``, the instance a ``defs.yaml`` under the working folder declares (``declared.py``):
    its attributes are the command's settings and Spark, a ``--data-root`` given over them."""
    args.declared = args.declared_in = None
    if getattr(args, "key_prefix", ""):
        from sessions_assets.cli.declared import DeclaredError, declared, settings_of

        try:
            found = declared(args.key_prefix, Path.cwd())
            if found is not None:
                given = {} if args.data_root is None else {"data_root": args.data_root}
                args.data_root = settings_of(*found, **given).data_root
                args.declared_in, args.declared = found
                print(f"Instance {args.key_prefix!r}, as {args.declared_in} declares it", file=sys.stderr)
        except DeclaredError as error:
            raise SystemExit(f"sessions-assets: {error}") from None
    if getattr(args, "data_root", "") is None:  # not given, nor declared
        args.data_root = os.environ.get("SESSIONS_DATA_ROOT", "data")


def _runner(instance, args: argparse.Namespace, settings=None):
    """The jobs of the command's instance, run in this process (``runner.py``)."""
    from sessions_assets.cli.runner import Runner

    spark = {}
    if args.declared is not None:
        spark = {"remote": args.declared.spark_remote, "spark_conf": args.declared.spark_conf}
    return Runner(instance, settings or _settings(args), args.key_prefix, **spark)


def _bounds(args: argparse.Namespace):
    """The first and last received days of the instance's partitions now."""
    from sessions_assets.graph.partitions import bounds, calendars

    return bounds(calendars(_settings(args)).received)


def _storage(args: argparse.Namespace, landing: bool = True):
    from sessions_assets.warehouse.storage import Storage

    storage = Storage.of(_settings(args))
    if not storage.root_exists():
        where = f"data_root in {args.declared_in}" if args.declared_in else "SESSIONS_DATA_ROOT"
        raise SystemExit(f"sessions-assets: no data root at {storage.root} (give --data-root or {where})")
    if landing and not storage.landing_exists():
        raise SystemExit(
            f"sessions-assets: no landing zone at {storage.landing} (received days go in "
            "landing/received_date=YYYY-MM-DD/, or Segment's landing/segment-logs/<source-id>/<day in ms>/)"
        )
    return storage


def generate(args: argparse.Namespace) -> int:
    from sessions_assets.cli.generate import generate_landing_zone

    summary = generate_landing_zone(
        args.data_root,
        days=args.days,
        users=args.users,
        seed=args.seed,
        layout=args.layout,
        time_zone=_settings(args).time_zone,  # the sample's start is the local day of its oldest event
    )
    print(summary)
    return 0


def _ingest_lines(metadata: dict) -> list[str]:
    """A line per received day of an ingest, then what was rejected or not read."""
    raw, rejected, mapped = metadata["raw_events"], metadata["rejected_events"], metadata["partition_map"]
    lines = [
        f"- {r['received_day']}: {r['files_read']} file(s) read"
        + (f" ({r['files_kept']} kept as read before)" if r.get("files_kept") else "")
        + f": {r['lines']} lines, {r['accepted']} accepted, {r['rejected']} rejected, "
        + (f"{r['suppressed']} of forgotten persons suppressed, " if r.get("suppressed") else "")
        + f"{r['event_days']} event day(s)"
        for r in (record.data for record in raw["per_received_day"].records)
    ]
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(rejected["reasons"].items())) or "none"
    days = mapped["event_days"]
    span = f"{days[0]}..{days[-1]} ({len(days)})" if days else "none"
    skipped = [f"{f['received_day']}/{f['file']} ({f['skipped']})" for f in raw["files"] if f.get("skipped")]
    lines.append(
        f"  rejected: {reasons}; event days {span}" + (f"; files not read: {', '.join(skipped)}" if skipped else "")
    )
    return lines


def _refresh_line(metadata: dict) -> str:
    from sessions_assets.graph.names import DERIVED

    parts = []

    for asset in DERIVED:
        m = metadata.get(asset, {})
        counts = ", ".join(f"{k} {v}" for k, v in m.items() if isinstance(v, int) and k != "input_version_absorbed")
        parts.append(f"{asset} {m.get('refresh', '?')}" + (f" ({counts})" if counts else ""))
    return "- refresh: " + "; ".join(parts)


def run(args: argparse.Namespace) -> int:
    from sessions_assets.warehouse import ledger, pending

    started = time.monotonic()
    storage, days = _storage(args), _bounds(args)
    refused = ledger.ingested_elsewhere(storage, _settings(args).time_zone)
    if refused:
        print(f"sessions-assets: {refused}", file=sys.stderr)
        return 2
    arrivals = pending.arrivals(storage, days)
    for line in arrivals.describe_ignored():
        print(f"Skipped landing folder {line}")
    spans, refresh = pending.ranges(arrivals.due), pending.backlog(storage, days)
    purge_hours = _settings(args).forget_purge_hours
    if not spans and refresh is None and not pending.erasures(storage, purge_hours).due:
        print(f"Nothing to do: every received day under {storage.landing} is processed.")
        return 0
    from sessions_assets.cli.instance import open_instance
    from sessions_assets.cli.runner import RunFailed

    if spans or refresh is not None:
        print(f"{len(arrivals.due)} received day(s) to ingest and refresh in {len(spans) or 1} run(s)", flush=True)
    with open_instance(args.data_root) as instance:
        runner = _runner(instance, args)
        try:
            for first, last in spans:
                step = runner.ingest_and_refresh(first, last)
                print("\n".join(_ingest_lines(step.metadata)), flush=True)
                print(_refresh_line(step.metadata), flush=True)
            if not spans and refresh is not None:
                print(f"- {refresh.describe()}", flush=True)
                print(_refresh_line(runner.refresh(refresh).metadata))
            if pending.erasures(storage, purge_hours).due:
                print(_forget_lines(runner.forget().metadata["forget"]), flush=True)
        except RunFailed as failure:
            print(f"sessions-assets: {failure}", file=sys.stderr)
            return 1
    print(f"Done in {time.monotonic() - started:.0f}s. Tables under {storage.root}/warehouse.")
    return 0


def status(args: argparse.Namespace) -> int:
    from sessions_assets.cli.instance import open_instance
    from sessions_assets.graph import names_of, planning
    from sessions_assets.warehouse import ledger, pending

    storage, days = _storage(args), _bounds(args)
    arrivals = pending.arrivals(storage, days)
    refresh = pending.backlog(storage, days)
    zone = _settings(args).time_zone
    refused = ledger.ingested_elsewhere(storage, zone)
    if refused:
        print(f"refreshes wait: {refused}")
    again = ledger.to_reingest(storage, zone)
    if again and not refused:
        print(
            f"received days ingested before ids sent as JSON integers were read: {len(again)} ({again[0]}..{again[-1]}); "
            "`sessions-assets reingest` judges their stored lines again"
        )
    with open_instance(args.data_root) as instance:
        history = planning.History.read(instance, names_of(_settings(args), args.key_prefix))
        now = time.time()
        print(f"received days to ingest: {', '.join(d.isoformat() for d in arrivals.due) or 'none'}")
        for day in arrivals.due:
            attempts = history.ingest(day)
            if attempts.failures:
                wait = (
                    f"next try in {attempts.waiting(now):.0f} s"
                    if attempts.waiting(now)
                    else "retried at the next tick"
                )
                print(f"  failing: {day}: {attempts.failures} failed run(s), {wait}; {attempts.error}")
        print(f"refresh due: {refresh.describe() if refresh else 'no'}")
        attempts = history.refresh()
        if refresh and attempts.failures:
            print(f"  failing: {attempts.failures} failed refresh run(s); {attempts.error}")
        erasures = pending.erasures(storage, _settings(args).forget_purge_hours)
        undone = [*erasures.pending, *erasures.purging, *erasures.waiting]
        print(f"forget requests not done: {len(undone) or 'none'}")
        for r in undone:
            what = f"{len(r.user_hashes)} user(s)" if r.user_hashes else "files superseded beside an erasure"
            step = "rows still stored" if r.state == "pending" else "rows removed, files to purge"
            print(f"  {r.request_id} ({r.reason}, {what}, taken {r.requested_at:%Y-%m-%d %H:%M} UTC): {step}")
        attempts = history.forget()
        if undone and attempts.failures:
            print(f"  failing: {attempts.failures} failed erasure run(s); {attempts.error}")
    for line in arrivals.describe_ignored():
        print(f"skipped landing folder {line}")
    return 0


def repair(args: argparse.Namespace) -> int:
    from sessions_assets.cli.instance import open_instance
    from sessions_assets.cli.runner import RunFailed
    from sessions_assets.warehouse.refresh import steps

    tables = set(args.tables.split(",")) if args.tables else set(steps.NAMES)
    if not tables <= set(steps.NAMES):
        raise SystemExit(f"sessions-assets: --tables takes {', '.join(steps.NAMES)}")
    first, last = args.first, args.last or args.first
    _storage(args, landing=False)
    with open_instance(args.data_root) as instance:
        runner = _runner(instance, args)
        try:
            print(_refresh_line(runner.repair(first, last, tables).metadata))
        except RunFailed as failure:
            print(f"sessions-assets: {failure}", file=sys.stderr)
            return 1
    return 0


def reingest(args: argparse.Namespace) -> int:
    from sessions_assets.cli.instance import open_instance
    from sessions_assets.cli.runner import RunFailed
    from sessions_assets.graph import planning
    from sessions_assets.warehouse import ledger, pending

    if args.folders and not args.first:
        print("sessions-assets: reingest --folders needs --from (the received days to read whole)", file=sys.stderr)
        return 2
    settings, storage = _settings(args), _storage(args, landing=args.folders)
    if args.first:
        recorded = ledger.received(storage)
        days = [d for d in planning.days_between(args.first, args.last or args.first) if d in recorded]
    else:
        days = ledger.to_reingest(storage, settings.time_zone)
    if not days:
        print(f"Nothing to ingest again: every received day was ingested in {settings.time_zone} with today's rules.")
        return 0
    spans = pending.ranges(days)
    source = "every file of their folders" if args.folders else "their stored lines"
    print(f"{len(days)} received day(s) to ingest again from {source} in {len(spans)} run(s)", flush=True)
    with open_instance(args.data_root) as instance:
        runner = _runner(instance, args, settings)
        try:
            for first, last in spans:
                print("\n".join(_ingest_lines(runner.reingest(first, last, args.folders).metadata)), flush=True)
            refresh = pending.backlog(storage, _bounds(args))
            if refresh is not None:
                print(_refresh_line(runner.refresh(refresh).metadata), flush=True)
        except RunFailed as failure:
            print(f"sessions-assets: {failure}", file=sys.stderr)
            return 1
    return 0


def maintain(args: argparse.Namespace) -> int:
    from sessions_assets.cli.instance import open_instance
    from sessions_assets.cli.runner import RunFailed

    _storage(args, landing=False)
    with open_instance(args.data_root) as instance:
        runner = _runner(instance, args)
        try:
            runner.maintain(args.retain_hours)
        except RunFailed as failure:
            print(f"sessions-assets: {failure}", file=sys.stderr)
            return 1
    print("Compacted every table; vacuumed them unless a refresh was due (the run's log says which).")
    return 0


def _forget_lines(summary: dict) -> str:
    removed = ", ".join(f"{table} {n}" for table, n in summary["rows_removed"].items()) or "none"
    lines = [
        f"- forget: {summary['requests_removed']} request(s) removed from the tables, {summary['requests_done']} "
        f"done; rows removed or rewritten: {removed}",
        f"  purged: {', '.join(summary['tables_purged']) or 'nothing'}"
        + (
            f"; {summary['requests_waiting_for_purge']} request(s) wait for their purge"
            if summary["requests_waiting_for_purge"]
            else ""
        ),
    ]
    if "landing_files_holding_lines" in summary:
        files = summary["landing_files_holding_lines"]
        lines.append(f"  landing files holding {summary['landing_lines']} line(s) of forgotten persons: {len(files)}")
        rewritten = set(summary["landing_files_rewritten"])
        lines += [f"    {f}{' (rewritten without them)' if f in rewritten else ''}" for f in files]
        lines += [f"    {f}: not rewritten (cannot be read whole)" for f in summary["landing_files_not_rewritten"]]
        if files and not rewritten:
            lines.append("  (--purge-landing rewrites them without those lines)")
    return "\n".join(lines)


def forget(args: argparse.Namespace) -> int:
    from sessions_assets.cli.instance import open_instance
    from sessions_assets.cli.runner import RunFailed
    from sessions_assets.warehouse import journal

    settings = _settings(args)
    storage = _storage(args, landing=False)
    requests = journal.read_without_spark(storage)
    try:
        key = journal.load_key(settings, create=not requests)
        journal.check_key(key, {r.key_id for r in requests})
        hashes = journal.user_hashes(key, args.user_ids)
    except journal.ForgetError as error:
        raise SystemExit(f"sessions-assets: {error}") from None
    if args.hash_only:
        print("\n".join(hashes))
        return 0
    with open_instance(args.data_root) as instance:
        runner = _runner(instance, args, settings)
        try:
            step = runner.forget(hashes, "rewrite" if args.purge_landing else "list")
        except RunFailed as failure:
            print(f"sessions-assets: {failure}", file=sys.stderr)
            return 1
    print(_forget_lines(step.metadata["forget"]))
    if step.metadata["forget"].get("landing_files_rewritten"):
        print("  their received days are ingested again by the next run (what they hold is what the tables hold)")
    return 0


def fetch_jars(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sessions_assets.warehouse import jars, spark

    try:
        found = jars.fetch(spark.classic_env(), Path(args.to) if args.to else None)
    except jars.JarsMissing as failure:
        print(f"sessions-assets: {failure}", file=sys.stderr)
        return 1
    folder = Path(found[0]).parent
    print(f"{len(found)} jars for {', '.join(jars.packages())} in {folder}")
    return 0


def spark_server(args: argparse.Namespace) -> int:
    from sessions_assets.cli.instance import instance_home
    from sessions_assets.cli.server import Server, ServerError, ServerRefused
    from sessions_assets.warehouse.jars import JarsMissing
    from sessions_assets.warehouse.spark import TOKEN_VARIABLE

    server = Server((instance_home(args.data_root) / "spark-server").absolute())
    if args.action == "start":
        token = os.environ.get(TOKEN_VARIABLE, "")
        try:
            print(server.start(args.host, args.port, token, renew=args.new_token, secured=not args.no_token))
        except (ServerError, JarsMissing) as failure:
            print(f"sessions-assets: {failure}", file=sys.stderr)
            return 2 if isinstance(failure, ServerRefused) else 1
    elif args.action == "stop":
        print(server.stop())
    else:
        said = server.status()
        print(said or f"No Spark Connect server running (its record is kept in {server.folder})")
        return 0 if said else 3
    return 0


def _prefix(text: str) -> str:
    if text and not KEY_PREFIX.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a key prefix (a letter, then letters, digits or _)")
    return text


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a day (YYYY-MM-DD)") from None


class _Parser(argparse.ArgumentParser):
    """A mistake in the arguments is one line, like every other user error (subcommands inherit this)."""

    def error(self, message: str):
        raise SystemExit(f"{self.prog}: {message}")


def main(argv: list[str] | None = None) -> int:
    from sessions_assets.warehouse.refresh import steps

    parser = _Parser(prog="sessions-assets", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    root = {
        "default": None,
        "help": "the data root (default: the data_root of the instance --key-prefix names in a defs.yaml under the "
        "working folder, else SESSIONS_DATA_ROOT, else data)",
    }
    prefix = {"default": "", "type": _prefix, "help": "the instance's key prefix, when its code location gives it one"}
    gen = sub.add_parser("generate", help="write a realistic sample landing zone")
    gen.add_argument("--data-root", **root)
    gen.add_argument("--days", type=int, default=14)
    gen.add_argument("--users", type=int, default=200)
    gen.add_argument("--seed", type=int, default=7)
    gen.add_argument(
        "--layout",
        choices=tuple(LAYOUTS),
        default="received_date",
        help="received_date=YYYY-MM-DD/ folders, or Segment's S3 destination (segment-logs/<source>/<day in ms>/)",
    )
    gen.set_defaults(func=generate)
    for name, func, text in (
        ("run", run, "ingest every new or changed received day, then refresh what it touched"),
        ("status", status, "what the next run would do"),
    ):
        command = sub.add_parser(name, help=text)
        command.add_argument("--data-root", **root)
        command.add_argument("--key-prefix", **prefix)
        command.set_defaults(func=func)
    repaired = f"recompute chosen local days from their inputs ({steps.described()})"
    fix = sub.add_parser("repair", help=repaired, description=repaired)
    fix.add_argument("--data-root", **root)
    fix.add_argument("--key-prefix", **prefix)
    fix.add_argument("--from", dest="first", type=_day, required=True)
    fix.add_argument("--to", dest="last", type=_day)
    fix.add_argument("--tables", help=f"comma-separated (default: {','.join(steps.NAMES)})")
    fix.set_defaults(func=repair)
    again = sub.add_parser(
        "reingest",
        help="judge received days' stored lines again and rebuild what they feed: after a change of time zone (the "
        "days ingested in another one) or of the acceptance rules (the days ingested before)",
    )
    again.add_argument("--data-root", **root)
    again.add_argument("--key-prefix", **prefix)
    again.add_argument("--from", dest="first", type=_day, help="these received days instead (YYYY-MM-DD)")
    again.add_argument("--to", dest="last", type=_day)
    again.add_argument(
        "--folders",
        action="store_true",
        help="read every file the days' folders hold now and replace the days whole (a file removed from a folder "
        "withdraws its lines only so); needs --from",
    )
    again.set_defaults(func=reingest)
    upkeep = sub.add_parser("maintain", help="compact the tables and remove files no recent version reads")
    upkeep.add_argument("--data-root", **root)
    upkeep.add_argument("--key-prefix", **prefix)
    upkeep.add_argument("--retain-hours", type=int, help="keep files younger than this (default 168)")
    upkeep.set_defaults(func=maintain)
    erase = sub.add_parser("forget", help="forget persons: their lines, rows and files, and their later lines")
    erase.add_argument("--data-root", **root)
    erase.add_argument("--key-prefix", **prefix)
    erase.add_argument("--user-id", dest="user_ids", action="append", required=True, help="a userId (repeatable)")
    erase.add_argument(
        "--purge-landing", action="store_true", help="also rewrite the landing files holding their lines without them"
    )
    erase.add_argument(
        "--hash-only", action="store_true", help="print each userId's keyed hash (for forget_job's run config) and stop"
    )
    erase.set_defaults(func=forget)
    fetch = sub.add_parser("fetch-jars", help="put Delta's jars (and SPARK_PACKAGES') on disk for every Spark start")
    fetch.add_argument("--to", help="the folder (default: SPARK_JARS_DIR, else share/sessions-assets/jars in the venv)")
    fetch.set_defaults(func=fetch_jars)
    serve = sub.add_parser(
        "spark-server", help="a long-lived Spark Connect server that runs attach to (SPARK_REMOTE=sc://host:port)"
    )
    serve.add_argument("action", choices=("start", "stop", "status"))
    serve.add_argument("--data-root", **root)
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: loopback)")
    serve.add_argument("--port", type=int, default=15002, help="the port to listen on (default 15002)")
    tokens = serve.add_mutually_exclusive_group()
    tokens.add_argument(
        "--new-token",
        action="store_true",
        help="a new token, not the one kept from its last start (SPARK_CONNECT_AUTHENTICATE_TOKEN, set, is used instead)",
    )
    tokens.add_argument("--no-token", action="store_true", help="serve any client (loopback only)")
    serve.set_defaults(func=spark_server)
    try:
        args = parser.parse_args(argv)
        _declare(args)
        return args.func(args)
    except SettingsError as error:
        print(f"sessions-assets: a SESSIONS_* setting is not valid: {error}", file=sys.stderr)
        return 2
    except LayoutError as error:
        print(f"sessions-assets: {error}", file=sys.stderr)
        return 2
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
