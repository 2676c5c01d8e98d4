"""A long-lived Spark Connect server that runs attach to (``SPARK_REMOTE``): ``sessions-assets spark-server``.

The server is the installed pyspark's own ``SparkConnectServer``, started through ``spark-submit`` with the
configuration a run's driver gets (``warehouse/spark.py``: the ``SPARK_*`` variables, Delta's jars from disk),
listening on loopback unless told otherwise. Its jobs are scheduled fairly, so several runs
at once (each a session of its own) share the cores instead of queueing behind one another. Its pid and log are
kept in the instance's folder (``<DAGSTER_HOME>/spark-server/``), where ``stop`` and ``status`` find them.

It serves only clients that show its token (``spark.connect.authenticate.token``). The token is kept beside the
pid, in a file only its owner can read, and kept across restarts, so runs that hold it keep working once a server
is back; the server reads it from its environment (``SPARK_CONNECT_AUTHENTICATE_TOKEN``), never from its command
line, which ``ps`` shows to every user. A server without a token listens on loopback only.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
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
# A new token's random bytes (43 URL-safe characters); a token given is refused when shorter than a guess takes.
TOKEN_BYTES, MIN_TOKEN_CHARS = 32, 16


class ServerError(RuntimeError):
    """The server could not be started; the message says why in one line."""


class ServerRefused(ServerError):
    """A start its arguments make unsafe or impossible (a user's mistake); the message says why in one line."""


def loopback(host: str) -> bool:
    """Only this machine can reach ``host``: ``localhost`` or a loopback address."""
    if host == spark.LOCAL_HOST:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _write_private(path: Path, text: str) -> None:
    """``text`` in ``path``, readable by its owner only from its first byte (a new file renamed over the old)."""
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    draft.unlink(missing_ok=True)
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(text)
    os.replace(draft, path)


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

    @property
    def token_file(self) -> Path:
        return self.folder / "token"

    def token(self) -> str:
        """The token the server here requires (what a client sets ``SPARK_CONNECT_AUTHENTICATE_TOKEN`` to), or ""
        when none was made."""
        try:
            return self.token_file.read_text().strip()
        except FileNotFoundError:
            return ""

    def _kept_token(self) -> str:
        """The token file's token, unless another user could have read it."""
        try:
            found = self.token_file.stat()
        except FileNotFoundError:
            return ""
        return "" if found.st_mode & 0o077 or found.st_uid != os.getuid() else self.token()

    def serving_token(self, given: str = "", renew: bool = False) -> str:
        """The token to start with, left in the token file (mode 0600): ``given``, else the file's own (unless
        ``renew``), else a new one."""
        token = given.strip() or ("" if renew else self._kept_token()) or secrets.token_urlsafe(TOKEN_BYTES)
        if len(token) < MIN_TOKEN_CHARS or not re.fullmatch(r"[!-~]+", token) or ";" in token:
            raise ServerRefused(
                f"{spark.TOKEN_VARIABLE} must be at least {MIN_TOKEN_CHARS} printable ASCII characters, without "
                "spaces or ';' (it travels in a gRPC header and a URL)"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        _write_private(self.token_file, token + "\n")
        return token

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

    def start(
        self,
        host: str = "127.0.0.1",
        port: int = spark.CONNECT_PORT,
        token: str = "",
        renew: bool = False,
        secured: bool = True,
        timeout: float = START_SECONDS,
    ) -> str:
        """Start the server unless it runs; returns the line saying where it listens. It requires ``token``, else
        the one it had (a new one when ``renew`` or none was made); none when not ``secured``, on loopback only."""
        if not secured and not loopback(host):
            raise ServerRefused(
                f"refusing to serve {host} without a token: anyone who reaches it could read and write every table "
                "(drop --no-token, or listen on 127.0.0.1)"
            )
        running = self.running()
        if running:
            return f"Spark Connect server already running at {running['url']} ({self._where(running)})"
        url = f"sc://{spark.LOCAL_HOST if loopback(host) else host}:{port}"
        released = time.monotonic() + RELEASE_SECONDS  # a server that just died may hold its port a moment longer
        while _answers(host, port):
            if time.monotonic() > released:
                raise ServerError(f"{host}:{port} is taken by another program: give another --port")
            time.sleep(0.2)
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "fair-scheduler.xml").write_text(FAIR_POOLS)
        command = self.command(host, port)  # before the process: a missing jar is said here, in one line
        # Without SPARK_REMOTE: it would make spark-submit start a client, not a server. The token goes in the
        # environment, which only its owner can read (/proc/<pid>/environ), never in the command.
        env = {**spark.classic_env(), "SPARK_HOME": spark.spark_home(), "PYSPARK_PYTHON": sys.executable}
        if secured:
            env[spark.TOKEN_VARIABLE] = self.serving_token(token, renew)
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
        record = {"pid": process.pid, "url": url, "started": time.time(), "token": secured}
        self.record.write_text(json.dumps(record))
        deadline = time.monotonic() + timeout
        while not _answers(host, port):
            if process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ServerError(f"the Spark Connect server did not start (log {self.log}): {self._first_error()}")
            time.sleep(0.5)
        return f"Spark Connect server listening at {url} ({self._where(record)})"

    def _where(self, record: dict) -> str:
        """Its pid, where its token is (or that it has none) and its log."""
        token = f"token in {self.token_file}" if record.get("token") else "no token: any local user may use it"
        return f"pid {record['pid']}, {token}, log {self.log}"

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
        return f"Spark Connect server running at {running['url']} (up {up:.0f} s, {self._where(running)})"
