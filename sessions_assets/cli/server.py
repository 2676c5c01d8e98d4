"""A long-lived Spark Connect server that runs attach to (``SPARK_REMOTE``): ``sessions-assets spark-server``.

The server is the installed pyspark's own ``SparkConnectServer``, started through ``spark-submit`` with the
configuration a run's driver gets (``warehouse/spark.py``: the ``SPARK_*`` variables, Delta's jars from disk),
listening on loopback unless told otherwise. Its jobs are scheduled fairly, so several runs
at once (each a session of its own) share the cores instead of queueing behind one another. Its pid and log are
kept in the instance's folder (``<DAGSTER_HOME>/spark-server/``), where ``stop`` and ``status`` find them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sessions_assets.warehouse import spark

MAIN_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Fair scheduling inside the default pool: the jobs of runs attached at once share the cores.
FAIR_POOLS = """<?xml version="1.0"?>
<allocations>
  <pool name="default"><schedulingMode>FAIR</schedulingMode><weight>1</weight><minShare>0</minShare></pool>
</allocations>
"""
START_SECONDS, STOP_SECONDS, RELEASE_SECONDS = 180.0, 30.0, 10.0


class ServerError(RuntimeError):
    """The server could not be started; the message says why in one line."""


def _answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (reaped here when it is this process's child)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@dataclass(frozen=True)
class Server:
    """The server recorded in ``folder`` (its pid, URL and log), or to be started there."""

    folder: Path

    @property
    def record(self) -> Path:
        return self.folder / "server.json"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def running(self) -> dict | None:
        """``{"pid", "url", "started"}`` of the server recorded here, if its process is alive."""
        try:
            found = json.loads(self.record.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return found if _alive(found["pid"]) else None

    def command(self, host: str, port: int) -> list[str]:
        """``spark-submit`` of the Connect server with the pipeline's Spark configuration."""
        config = spark.driver_config(spark.spark_config())
        config |= {
            "spark.app.name": "sessions-assets Spark Connect server",
            "spark.connect.grpc.binding.address": host,
            "spark.connect.grpc.binding.port": str(port),
            "spark.connect.grpc.port.maxRetries": "0",  # listen where SPARK_REMOTE points, or fail
            "spark.scheduler.mode": "FAIR",
            "spark.scheduler.allocation.file": str(self.folder / "fair-scheduler.xml"),
        }
        submit = Path(spark.spark_home()) / "bin" / "spark-submit"
        return [str(submit), "--class", MAIN_CLASS, *(f"--conf={k}={v}" for k, v in config.items() if v != "")]

    def start(self, host: str = "127.0.0.1", port: int = spark.CONNECT_PORT, timeout: float = START_SECONDS) -> str:
        """Start the server unless it runs; returns the line saying where it listens."""
        running = self.running()
        if running:
            return f"Spark Connect server already running at {running['url']} (pid {running['pid']}, log {self.log})"
        url = f"sc://{host}:{port}"
        released = time.monotonic() + RELEASE_SECONDS  # a server that just died may hold its port a moment longer
        while _answers(host, port):
            if time.monotonic() > released:
                raise ServerError(f"{host}:{port} is taken by another program: give another --port")
            time.sleep(0.2)
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "fair-scheduler.xml").write_text(FAIR_POOLS)
        command = self.command(host, port)  # before the process: a missing jar is said here, in one line
        # Without SPARK_REMOTE: it would make spark-submit start a client, not a server.
        env = {**spark.classic_env(), "SPARK_HOME": spark.spark_home(), "PYSPARK_PYTHON": sys.executable}
        with open(self.log, "w") as out:
            process = subprocess.Popen(
                command,
                cwd=self.folder,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.record.write_text(json.dumps({"pid": process.pid, "url": url, "started": time.time()}))
        deadline = time.monotonic() + timeout
        while not _answers(host, port):
            if process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ServerError(f"the Spark Connect server did not start (log {self.log}): {self._first_error()}")
            time.sleep(0.5)
        return f"Spark Connect server listening at {url} (pid {process.pid}, log {self.log})"

    def _first_error(self) -> str:
        lines = self.log.read_text(errors="replace").strip().splitlines() if self.log.exists() else []
        found = next((s for s in lines if " ERROR " in s or "Exception" in s), lines[-1] if lines else "no output")
        return found.strip()[:300]

    def stop(self, grace: float = STOP_SECONDS) -> str:
        """Stop the recorded server: SIGTERM (Spark stops its context), SIGKILL after ``grace`` seconds."""
        running = self.running()
        self.record.unlink(missing_ok=True)
        if not running:
            return "No Spark Connect server running"
        pid = running["pid"]
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not _alive(pid):
                break
        return f"Stopped the Spark Connect server at {running['url']} (pid {pid})"

    def status(self) -> str | None:
        running = self.running()
        if not running:
            return None
        up = time.time() - running["started"]
        return f"Spark Connect server running at {running['url']} (pid {running['pid']}, up {up:.0f} s, log {self.log})"
