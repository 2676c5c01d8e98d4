"""What a Spark server did, read from its UI's REST API: the SQL executions, jobs and stages between two instants,
with the bytes its tasks read from storage, the shuffle they read and their run time; and the instants each step of a
Dagster run started and ended, to tell one step's work from the next.

Only a server started with ``SPARK_UI=true`` serves it (the default is off: the plans it shows can hold a forget key's
HMAC pads). A client cannot add a listener to a Spark Connect server, so a window of time is what tells one run's
work from another's: count on a server no one else uses meanwhile.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime

import dagster as dg


def _epoch(stamp: str) -> float:
    """A UI time (``2026-12-04T19:20:08.123GMT``) in seconds since the epoch."""
    return datetime.strptime(stamp.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


@dataclass(frozen=True)
class Bill:
    """What a window of time cost the server."""

    sql: int  # SQL executions, as /sql lists them
    jobs: int
    stages: int
    bytes_read: int  # from storage, by the stages' tasks
    shuffle_read: int
    task_seconds: float  # the tasks' run time, summed

    def __add__(self, other: Bill) -> Bill:
        return Bill(*(a + b for a, b in zip(self.row(), other.row(), strict=True)))

    def row(self) -> tuple:
        return (self.sql, self.jobs, self.stages, self.bytes_read, self.shuffle_read, self.task_seconds)


class SparkUI:
    """The REST API of the UI at ``url`` (``http://localhost:4040``), for its one application."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        [app] = self._get("/api/v1/applications")
        self.base = f"/api/v1/applications/{app['id']}"

    def _get(self, path: str):
        with urllib.request.urlopen(f"{self.url}{path}", timeout=60) as answer:
            return json.load(answer)

    def bill(self, since: float, until: float) -> Bill:
        """What was submitted from ``since`` to ``until`` (epoch seconds)."""
        return self.bills({"": (since, until)})[""]

    def bills(self, windows: dict[str, tuple[float, float]]) -> dict[str, Bill]:
        """What was submitted in each window (``since``, ``until``: epoch seconds), the server's lists read once. The
        UI settles a moment after a query ends: this waits a second or so first."""
        time.sleep(1.5)
        sql = [_epoch(e["submissionTime"]) for e in self._get(f"{self.base}/sql?details=false&length=1000000")]
        jobs = [j for j in self._get(f"{self.base}/jobs") if "submissionTime" in j]
        stages = [s for s in self._get(f"{self.base}/stages") if s["status"] != "SKIPPED"]
        found = {}
        for name, (since, until) in windows.items():
            theirs = [j for j in jobs if since <= _epoch(j["submissionTime"]) <= until]
            wanted = {i for j in theirs for i in j["stageIds"]}
            ran = [s for s in stages if s["stageId"] in wanted]
            found[name] = Bill(
                sum(since <= t <= until for t in sql),
                len(theirs),
                len(ran),
                sum(s.get("inputBytes", 0) for s in ran),
                sum(s.get("shuffleReadBytes", 0) for s in ran),
                round(sum(s.get("executorRunTime", 0) for s in ran) / 1000, 1),
            )
        return found


def step_windows(inst: dg.DagsterInstance, run_ids: list[str]) -> dict[str, tuple[float, float]]:
    """Each step's start and end (epoch seconds). A ``process_job`` run ingests inside its ``events`` step: its
    ``ingest`` ends at the landing assets' materializations there."""
    windows = {}
    for run_id in run_ids:
        for s in inst.get_run_step_stats(run_id):
            windows[s.step_key] = (s.start_time, s.end_time)
        landed = [
            r.timestamp
            for r in inst.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
            if r.event_log_entry.asset_materialization.asset_key.path[-1] == "raw_events"
        ]
        if landed and "events" in windows:
            start, end = windows["events"]
            windows["ingest"], windows["events"] = (start, max(landed)), (max(landed), end)
    return windows
