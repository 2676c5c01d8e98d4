"""A deployed Dagster, for tests: ``dg dev`` as a subprocess, driven through the webserver's GraphQL API.

What the UI does is what these helpers do: read sensor ticks, runs and backfills, and launch partition
backfills, over HTTP on a loopback port. The instance lives in a temporary ``DAGSTER_HOME`` holding the
project's ``dagster.yaml``; everything started is stopped with its process group.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
SENSORS = ("landing_sensor", "late_data_sensor")
IN_FLIGHT_RUNS = ["QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"]
FAILED_RUNS = ["FAILURE", "CANCELED"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DagsterDev:
    """``dg dev`` (or any command serving the webserver and daemon) on a project (``cwd``: this one) with its own
    home and data roots, whose sensors are ``sensors``; a context manager."""

    def __init__(
        self,
        home: Path,
        env: dict[str, str],
        command: list[str],
        log: Path,
        cwd: Path = PROJECT,
        sensors: tuple[str, ...] = SENSORS,
    ):
        self.home, self.env, self.command, self.log = home, env, command, log
        self.cwd, self.sensors = cwd, sensors
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> DagsterDev:
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(
                [*self.command, "--host", "127.0.0.1", "--port", str(self.port)],
                cwd=self.cwd,
                env={**self.env, "DAGSTER_HOME": str(self.home)},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_until_serving()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM the whole process group (webserver, daemon, code server, runs), then SIGKILL stragglers."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            return
        finally:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process = None

    def _wait_until_serving(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.command[0]} exited:\n{self.tail()}")
            try:
                data = self.graphql(
                    "{ workspaceOrError { __typename ... on Workspace { locationEntries {"
                    " locationOrLoadError { __typename } } } } }"
                )
                entries = data["workspaceOrError"].get("locationEntries") or []
                kinds = [e["locationOrLoadError"]["__typename"] for e in entries if e["locationOrLoadError"]]
                if "PythonError" in kinds:
                    raise RuntimeError(f"the code location failed to load:\n{self.tail()}")
                if kinds and all(k == "RepositoryLocation" for k in kinds):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(1)
        raise TimeoutError(f"{self.command[0]} did not serve within {timeout} s:\n{self.tail()}")

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.load(response)
        if answer.get("errors"):
            raise RuntimeError(f"GraphQL errors: {answer['errors']}")
        return answer["data"]

    # --- what the UI reads and does ---------------------------------------------------------------

    def repository(self) -> dict:
        """The selector of the one repository served: location and repository names."""
        data = self.graphql(
            "{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"
        )
        [node] = data["repositoriesOrError"]["nodes"]
        return {"repositoryLocationName": node["location"]["name"], "repositoryName": node["name"]}

    def sensor(self, name: str) -> dict:
        """The sensor's status and its recent ticks (newest first)."""
        query = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { __typename
            ... on Sensor { sensorState { status ticks(limit: 200) { status skipReason runIds error { message } } } } } }"""
        data = self.graphql(query, {"s": {**self.repository(), "sensorName": name}})["sensorOrError"]
        assert data["__typename"] == "Sensor", data
        return data["sensorState"]

    def start_sensor(self, name: str) -> None:
        """Switch a sensor on, as the UI's toggle does (a no-op when it already runs)."""
        if self.sensor(name)["status"] == "RUNNING":
            return
        query = """mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename
            ... on PythonError { message } } }"""
        result = self.graphql(query, {"s": {**self.repository(), "sensorName": name}})["startSensor"]
        assert result["__typename"] == "Sensor", result

    def runs(self, statuses: list[str] | None = None) -> list[dict]:
        query = """query($f: RunsFilter) { runsOrError(filter: $f) { ... on Runs { results {
            runId status jobName startTime endTime tags { key value } assetSelection { path } } } } }"""
        variables = {"f": {"statuses": statuses}} if statuses else {"f": {}}
        return self.graphql(query, variables)["runsOrError"]["results"]

    def backfills(self) -> list[dict]:
        query = "{ partitionBackfillsOrError(limit: 100) { ... on PartitionBackfills { results { id status } } } }"
        return self.graphql(query)["partitionBackfillsOrError"]["results"]

    def launch_backfill(self, assets: list[str], partitions: list[str]) -> str:
        """A partition backfill of ``assets`` over ``partitions``, as the UI's "Materialize" dialog launches it."""
        query = """mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
            __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message stack }
            ... on PartitionSetNotFoundError { message } ... on UnauthorizedError { message } } }"""
        params = {"assetSelection": [{"path": [a]} for a in assets], "partitionNames": partitions}
        result = self.graphql(query, {"p": params})["launchPartitionBackfill"]
        assert result["__typename"] == "LaunchBackfillSuccess", result
        return result["backfillId"]

    def settled(self, storage) -> bool:
        """Every received day of ``storage`` (a data root, or several) ingested, every derived table current, and
        nothing in flight."""
        from sessions_assets.graph.partitions import bounds, calendars
        from sessions_assets.settings import Settings
        from sessions_assets.warehouse import pending

        days = bounds(calendars(Settings()).received)  # the tests' instances: the default start
        storages = storage if isinstance(storage, list | tuple) else [storage]
        done = all(not pending.arrivals(s, days).due and pending.backlog(s, days) is None for s in storages)
        return done and self.idle()

    def wait_until_settled(self, storage, timeout: float, failures_allowed: bool = False) -> None:
        """Until the pipeline has caught up with the landing zone (of ``storage``, or of each of several: twice in
        a row, a few seconds apart); fails at once on a failed sensor tick, or run (unless ``failures_allowed``),
        with what the UI would show."""
        import pytest

        deadline, calm = time.monotonic() + timeout, 0
        while time.monotonic() < deadline:
            self.assert_nothing_failed(runs_may_fail=failures_allowed)
            calm = calm + 1 if self.settled(storage) else 0
            if calm == 2:
                return
            time.sleep(3)
        pytest.fail(f"not settled within {timeout} s; runs: {self.runs()}\n{self.tail()}")

    def assert_nothing_failed(self, runs_may_fail: bool = False) -> None:
        for name in self.sensors:
            failed = [t for t in self.sensor(name)["ticks"] if t["status"] == "FAILURE"]
            assert not failed, f"{name} ticks failed: {failed[0]['error']['message'][:2000]}"
        if runs_may_fail:
            return
        assert not self.runs(FAILED_RUNS), self.runs(FAILED_RUNS)
        backfills = self.backfills()
        assert all(b["status"] not in ("FAILED", "COMPLETED_FAILED", "CANCELED") for b in backfills), backfills

    def idle(self) -> bool:
        """No run in flight and no backfill still requesting."""
        busy_backfills = [b for b in self.backfills() if b["status"] in ("REQUESTED", "CANCELING", "FAILING")]
        return not self.runs(IN_FLIGHT_RUNS) and not busy_backfills


def tag(run: dict, key: str) -> str | None:
    """A run's tag, as the GraphQL API lists them."""
    return next((t["value"] for t in run["tags"] if t["key"] == key), None)
