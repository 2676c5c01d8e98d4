"""Requests to the store per landing sensor tick, on an S3-compatible server (S3Proxy on loopback, in memory).

    python benchmarks/landing_listing.py [--days 730] [--sources 3] [--before REV] [--out FILE]

Lays out ``--days`` received days ending yesterday (UTC) in Segment's layout, a folder for each of ``--sources``
sources a day with one tiny file in it, and a ``received_days`` table recording every day as ingested with the
fingerprint its folders have now (written with delta-rs and uploaded: no Spark). Then, in a fresh process for each
version of the code (``--before``: a git revision, exported with ``git archive``; then the working tree), sensor
ticks against a fresh instance: a first one with no cursor, the next with its cursor, one after the next day's
folders land, and (where the cursor records its full listing) one an hour after that listing. Each tick's requests
are counted from S3Proxy's request log (every client: s3fs for the landing zone and the Delta log, delta-rs for
``received_days``), by kind. S3Proxy's jar comes from Maven Central into ``~/.m2`` on first use, as for the S3
tests; s3fs is the ``s3`` extra.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

PROJECT = Path(__file__).resolve().parents[1]
BUCKET, PREFIX = "sessions", "bench"
DATA_ROOT = f"s3a://{BUCKET}/{PREFIX}"
KEY, SECRET = "sessions-assets", "sessions-assets-secret"
SOURCES = ("web", "app", "server", "ios", "android", "backend")
DAY_MS = 86_400_000
REQUEST = re.compile(r"request: Request\((\w+) (\S+)\)")
KINDS = ("list landing", "list warehouse", "read warehouse", "other")
NOTE = (
    "S3Proxy's in-memory store lists a prefix with a delimiter by scanning every key under it, so a listing of "
    "`landing/` or `segment-logs/` costs it far more than a day folder's; code that lists those for every day spends "
    "most of its tick there. The request counts are what carries over to S3; the times are this machine's."
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=730)
    parser.add_argument("--sources", type=int, default=3, choices=range(1, len(SOURCES) + 1))
    parser.add_argument("--before", default="", help="a git revision to measure first (e.g. main)")
    parser.add_argument("--out", type=Path, help="also write the table (markdown) here")
    parser.add_argument("--step", choices=("record", "ticks"), help=argparse.SUPPRESS)  # in a child process
    parser.add_argument("--log", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sources, last = SOURCES[: args.sources], datetime.now(UTC).date() - timedelta(days=1)
    days = [last - timedelta(days=n) for n in range(args.days)][::-1]
    if args.step == "record":
        return record(days)
    if args.step == "ticks":
        return ticks(args.log, sources, last + timedelta(days=1))
    with tempfile.TemporaryDirectory(prefix="landing-listing-") as work, server(Path(work)) as (endpoint, log):
        env = environment(endpoint)
        land(endpoint, sources, days)
        child(PROJECT, env, "--step", "record", "--days", str(args.days))
        rows = []
        versions = [(args.before, export(args.before, Path(work)))] if args.before else []
        for label, code in [*versions, ("working tree", PROJECT)]:
            out = child(code, env, "--step", "ticks", "--log", str(log), "--sources", str(args.sources))
            rows += [{"code": label, **json.loads(line)} for line in out.splitlines() if line.startswith("{")]
    table = render(rows, args.days, len(sources), " ".join(["python", "benchmarks/landing_listing.py", *sys.argv[1:]]))
    print(table)
    if args.out:
        args.out.write_text(table)


def environment(endpoint: str) -> dict[str, str]:
    """What a process needs to reach the store through s3fs and delta-rs, as the S3 tests give it."""
    return {
        **{k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "PYTHONPATH")},
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "FSSPEC_S3_ENDPOINT_URL": endpoint,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        # S3Proxy refuses the checksum headers current SDKs send by default.
        "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
        "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
        "SESSIONS_START_DATE": "2020-01-01",
    }


@contextmanager
def server(work: Path) -> Iterator[tuple[str, Path]]:
    """S3Proxy on a free loopback port, keeping objects in memory and logging each request it serves."""
    sys.path.insert(0, str(PROJECT))  # the slow tests' helpers; only in this process
    from sessions_assets_tests.helpers.deployed import free_port
    from sessions_assets_tests.slow.conftest import S3PROXY, maven_jar, start, stop, wait_for

    endpoint = f"http://127.0.0.1:{free_port()}"
    properties = {
        "s3proxy.endpoint": endpoint,
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": KEY,
        "s3proxy.credential": SECRET,
        "jclouds.provider": "transient",
        "jclouds.identity": KEY,
        "jclouds.credential": SECRET,
    }
    (work / "s3proxy.conf").write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    log = work / "s3proxy.log"
    command = ["java", "-Xmx512m", "-jar", str(maven_jar(S3PROXY)), "--properties", str(work / "s3proxy.conf")]
    process = start(command, log, {"LOG_LEVEL": "debug"})
    try:
        wait_for(lambda: _answers(endpoint), "S3Proxy", [process], [log])
        yield endpoint, log
    finally:
        stop(process)


def _answers(endpoint: str) -> bool:
    try:
        urllib.request.urlopen(endpoint, timeout=5)
    except urllib.error.HTTPError:  # 403 to an unsigned request: it serves
        pass
    return True


def filesystem(endpoint: str):
    import s3fs

    checksums = {"request_checksum_calculation": "when_required", "response_checksum_validation": "when_required"}
    return s3fs.S3FileSystem(key=KEY, secret=SECRET, endpoint_url=endpoint, config_kwargs=checksums)


def land(endpoint: str, sources: tuple[str, ...], days: list[date]) -> None:
    """The bucket and every source's folder of every day, each holding one line in a gzipped file."""
    fs = filesystem(endpoint)
    fs.call_s3("create_bucket", Bucket=BUCKET)
    fs.pipe({path: data for day in days for path, data in day_files(sources, day).items()})


def day_files(sources: tuple[str, ...], day: date) -> dict[str, bytes]:
    """A day's files in Segment's layout, named as Segment names them, under the bucket."""
    millis = (day - date(1970, 1, 1)).days * DAY_MS
    line = json.dumps({"messageId": f"m-{day}", "type": "track", "event": "Page Viewed", "anonymousId": "a"})
    payload = gzip.compress(f"{line}\n".encode(), mtime=0)
    return {
        f"{BUCKET}/{PREFIX}/landing/segment-logs/{s}/{millis}/{millis + DAY_MS - 1}.0a1b2c.gz": payload for s in sources
    }


def record(days: list[date]) -> None:
    """``received_days`` as an ingest of every day would leave it: each day's fingerprint now (child process)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from sessions_assets.warehouse import ledger
    from sessions_assets.warehouse.storage import Storage

    storage = Storage(DATA_ROOT)
    zone = storage.zone()
    rows = [
        {
            "received_date": day,
            "fingerprint": storage.fingerprint(day, zone),
            "lines": 1,
            "accepted": 1,
            "rejected": 0,
            "event_days": [day],
            "raw_version": 0,
            "ingested_at": datetime.now(UTC),
        }
        for day in days
    ]
    schema = pa.schema(
        [
            ("received_date", pa.date32()),
            ("fingerprint", pa.string()),
            ("lines", pa.int64()),
            ("accepted", pa.int64()),
            ("rejected", pa.int64()),
            ("event_days", pa.list_(pa.date32())),
            ("raw_version", pa.int64()),
            ("ingested_at", pa.timestamp("us", tz="UTC")),
        ]
    )
    with tempfile.TemporaryDirectory() as local:
        write_deltalake(f"{local}/received_days", pa.Table.from_pylist(rows, schema))
        storage.fs.put(f"{local}/received_days", storage.path_of(storage.table_uri("received_days")), recursive=True)
    assert len(ledger.received(storage)) == len(days)


def ticks(log: Path, sources: tuple[str, ...], new_day: date) -> None:
    """Sensor ticks from a first with no cursor; a line of JSON each (child process, the code under test)."""
    import dagster as dg

    from sessions_assets.warehouse.storage import Storage

    try:  # the sensor of an instance built from its settings, or an older revision's module-level one
        from sessions_assets.graph import build
        from sessions_assets.graph.resources import PipelineResource
        from sessions_assets.settings import Settings

        landing_sensor = build(Settings(data_root=DATA_ROOT)).get_sensor_def("landing_sensor")
    except ImportError:
        from sessions_assets.defs.resources import PipelineResource
        from sessions_assets.defs.sensors import landing_sensor

    fs = Storage(DATA_ROOT).fs
    with dg.DagsterInstance.ephemeral() as instance:
        cursor = None
        for name in ("first: no cursor", "next", "next: a new day landed", "next: an hour after the full listing"):
            if name == "next: a new day landed":
                fs.pipe(day_files(sources, new_day))
            if name.startswith("next: an hour"):
                state = json.loads(cursor)
                if not isinstance(state, dict):  # a cursor without the time of a full listing
                    continue
                cursor = json.dumps({**state, "listed_at": state["listed_at"] - 3600})
            mark = log.stat().st_size
            started = time.perf_counter()
            context = dg.build_sensor_context(
                instance=instance, resources={"pipeline": PipelineResource(data_root=DATA_ROOT)}, cursor=cursor
            )
            result = landing_sensor(context)
            seconds = time.perf_counter() - started
            time.sleep(1)  # the server's log written
            requests = _requests(log, mark)
            cursor = result.cursor
            days = sorted(
                {
                    # the received days a request ingests: its sessions/ingest tag, else (older revisions) its partitions
                    r.tags.get("sessions/ingest", "").rpartition("..")[2]
                    or r.partition_key
                    or r.tags.get("dagster/asset_partition_range_end")
                    for r in result.run_requests
                }
            )
            print(json.dumps({"tick": name, "seconds": round(seconds, 2), "requests": requests, "requested": days}))
        for path in day_files(sources, new_day):  # one at a time: S3Proxy refuses a batch delete without MD5
            fs.rm_file(path)


def _requests(log: Path, offset: int) -> dict[str, int]:
    with open(log, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    kinds: Counter[str] = Counter()
    for method, url in REQUEST.findall(text):
        kinds[_kind(method, url)] += 1
    return dict(kinds)


def _kind(method: str, url: str) -> str:
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    where = unquote(query.get("prefix", [""])[0]) if "list-type" in query else unquote(parts.path)
    area = "landing" if "/landing" in f"/{where}" else "warehouse" if "/warehouse" in f"/{where}" else ""
    if method == "GET" and "list-type" in query and area:
        return f"list {area}"
    if method in ("GET", "HEAD") and area == "warehouse":
        return "read warehouse"
    return "other"


def export(revision: str, work: Path) -> Path:
    """The project at a git revision, as files (``git archive``), for its code to be imported from."""
    folder = work / "before"
    folder.mkdir()
    archive = subprocess.run(["git", "-C", str(PROJECT), "archive", revision], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def child(code: Path, env: dict[str, str], *args: str) -> str:
    """This script in a fresh process importing ``sessions_assets`` from ``code``."""
    done = subprocess.run(
        [sys.executable, __file__, *args],
        env={**env, "PYTHONPATH": str(code)},
        cwd=code,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return done.stdout


def render(rows: list[dict], days: int, sources: int, command: str) -> str:
    commit = subprocess.run(["git", "-C", str(PROJECT), "describe", "--always", "--dirty"], capture_output=True)
    lines = [
        "# Requests to the store per landing sensor tick",
        "",
        f"`{command}` on {datetime.now(UTC):%Y-%m-%d}, the working tree at {commit.stdout.decode().strip()}: "
        f"{days} received days × {sources} sources in Segment's layout ({days * sources:,} day folders, one small "
        "file each) on S3Proxy (in memory, on loopback), every day recorded in `received_days` as ingested; each "
        "tick's requests as the server logged them (s3fs and delta-rs), its time as the sensor call took.",
        "",
        "| code | tick | list landing/ | list warehouse/ | read warehouse/ | other | total | tick time | days requested |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        counts = [row["requests"].get(kind, 0) for kind in KINDS]
        requested = ", ".join(row["requested"]) or "none"
        lines.append(
            f"| {row['code']} | {row['tick']} | {' | '.join(f'{n:,}' for n in counts)} | {sum(counts):,} "
            f"| {row['seconds']:.2f} s | {requested} |"
        )
    return "\n".join([*lines, "", NOTE]) + "\n"


if __name__ == "__main__":
    main()
