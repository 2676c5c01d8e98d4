"""Servers the slow tests run the pipeline against, each on loopback ports in a temporary directory and
stopped with its whole process group: a standalone Spark cluster (a master and two workers), PostgreSQL
for the Dagster instance, and an S3-compatible object store (S3Proxy on the local file system)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyspark
import pytest

from sessions_assets.warehouse.spark import classic_env
from sessions_assets_tests.helpers.deployed import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
WORKERS = 2
WORKER_CORES, WORKER_MEMORY = 1, "1g"


def start(command: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A server in its own process group, its output in ``log``. Not a Spark Connect client: a standalone worker
    with ``SPARK_REMOTE`` set would start executors without Spark's SQL jars (nor given the tests' token)."""
    inherited = classic_env()
    with open(log, "w") as out:
        return subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**inherited, **(env or {})},
            start_new_session=True,
        )


def stop(process: subprocess.Popen, grace: float = 30) -> None:
    """SIGTERM the process group (a Spark worker takes its executors down with it), then SIGKILL what is left."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def wait_for(
    ready: Callable[[], bool], what: str, processes: list[subprocess.Popen], logs: list[Path], timeout: float = 90
) -> None:
    """Until ``ready()``; fails early, with the logs, when a server exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in processes):
            break
        try:
            if ready():
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.5)
    tails = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in logs if log.exists())
    pytest.fail(f"{what} not ready within {timeout} s:\n{tails}")


@dataclass
class SparkCluster:
    """A standalone master and its workers; ``url`` is what ``spark.master`` takes."""

    url: str
    web_url: str
    work_dirs: list[Path]
    processes: list[subprocess.Popen] = field(default_factory=list)

    def state(self) -> dict:
        """The master's JSON status: workers, active and completed applications."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=10) as response:
            return json.load(response)

    def executor_dirs(self) -> list[Path]:
        """``<work dir>/<app id>/<executor id>``: one per executor a worker started."""
        return sorted(p for d in self.work_dirs for p in d.glob("app-*/*") if p.is_dir())


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory) -> Iterator[SparkCluster]:
    """A master and two workers (1 core, 1 GiB each) from pyspark's own ``bin/spark-class``, on 127.0.0.1."""
    base = tmp_path_factory.mktemp("spark-cluster")
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    # Executors start Python workers with the driver's interpreter; everything binds to loopback.
    env = {
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(base),
        "SPARK_NO_DAEMONIZE": "1",
    }
    port, web_port = free_port(), free_port()
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", [])
    logs = [base / "master.log"]
    try:
        cluster.processes.append(
            start(
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(web_port),
                ],
                logs[0],
                env,
            )
        )
        wait_for(lambda: cluster.state()["status"] == "ALIVE", "the Spark master", cluster.processes, logs)
        for n in range(WORKERS):
            work_dir = base / f"worker-{n}"
            work_dir.mkdir()
            cluster.work_dirs.append(work_dir)
            logs.append(base / f"worker-{n}.log")
            cluster.processes.append(
                start(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        "127.0.0.1",
                        "--webui-port",
                        str(free_port()),
                        "--cores",
                        str(WORKER_CORES),
                        "--memory",
                        WORKER_MEMORY,
                        "--work-dir",
                        str(work_dir),
                        cluster.url,
                    ],
                    logs[-1],
                    {**env, "SPARK_WORKER_DIR": str(work_dir)},
                )
            )
        alive = lambda: sum(w["state"] == "ALIVE" for w in cluster.state()["workers"]) == WORKERS  # noqa: E731
        wait_for(alive, f"{WORKERS} Spark workers", cluster.processes, logs)
        yield cluster
    finally:
        for process in reversed(cluster.processes):
            stop(process)


def postgres_bin() -> Path:
    """The directory of PostgreSQL's server programs: Debian's ``/usr/lib/postgresql/<version>/bin`` (the
    newest; not on PATH there), else wherever ``initdb`` is on PATH."""
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parents[1].name))
    found = debian[-1] if debian else shutil.which("initdb")
    if not found:
        pytest.fail("PostgreSQL is not installed (initdb not found): apt-get install postgresql, as .ci/run does")
    return Path(found).resolve().parent


@dataclass(frozen=True)
class Postgres:
    host: str
    port: int
    user: str
    db_name: str

    def instance_storage(self) -> dict:
        """The ``storage`` section of a ``dagster.yaml`` that keeps the instance in this database. The driver
        is named: SQLAlchemy 2.1 reads a bare ``postgresql://`` as psycopg 3, dagster-postgres installs psycopg2."""
        db = {
            "hostname": self.host,
            "port": self.port,
            "username": self.user,
            "db_name": self.db_name,
            "scheme": "postgresql+psycopg2",
        }
        return {"storage": {"postgres": {"postgres_db": db}}}


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server of its own (trust authentication on 127.0.0.1, a free port, its socket in its
    directory) with an empty ``dagster`` database. PostgreSQL refuses to run as root: as root, the server
    runs as the ``postgres`` user (Debian's package creates it), else ``nobody``."""
    bin_dir = postgres_bin()
    # Not under pytest's temporary directory, which only root may enter.
    base = Path(tempfile.mkdtemp(prefix="sessions-assets-postgres-"))
    sockets, data, log = base / "sockets", base / "data", base / "server.log"
    sockets.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        user = next(name for name in ("postgres", "nobody") if _user_exists(name))
        for path in (base, sockets):
            shutil.chown(path, user)
        as_user = ["runuser", "-u", user, "--"]
    port = free_port()

    def run(program: str, *args: str) -> None:
        result = subprocess.run(
            [*as_user, str(bin_dir / program), *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        server_log = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        assert result.returncode == 0, f"{program} failed:\n{result.stdout}{result.stderr}\n{server_log}"

    try:
        run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync")
        # pg_ctl starts the server in a session of its own; ``stop`` below ends it and its backends.
        options = f"-h 127.0.0.1 -p {port} -k {sockets} -c fsync=off -c max_connections=100"
        run("pg_ctl", "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start")
        run("createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "dagster")
        yield Postgres("127.0.0.1", port, "postgres", "dagster")
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                capture_output=True,
                timeout=120,
            )
        _kill_postmaster(data)
        shutil.rmtree(base, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _kill_postmaster(data: Path) -> None:
    """SIGKILL the server's process group if a stop left it running (the first line of postmaster.pid)."""
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
        os.killpg(pid, signal.SIGKILL)
    except (FileNotFoundError, IndexError, ValueError, ProcessLookupError, PermissionError):
        pass


# S3Proxy's runnable jar from Maven Central, fetched into ~/.m2 by Maven on first use (it needs Java 17).
S3PROXY = "org.gaul:s3proxy:2.7.0:jar:jar-with-dependencies"
MAVEN_GET = "org.apache.maven.plugins:maven-dependency-plugin:3.11.0:get"
# S3Proxy rejects the CRC32 checksum headers that current AWS SDKs (botocore, the Java SDK v2 in hadoop-aws)
# send by default; both send them only where S3 requires them with these settings.
CHECKSUMS_WHEN_REQUIRED = {
    "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
    "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
}


def maven_jar(coordinates: str) -> Path:
    """``group:artifact:version:jar:classifier`` from the local Maven repository, fetched when missing."""
    group, artifact, version, _, classifier = coordinates.split(":")
    repository = Path.home() / ".m2" / "repository"  # told to Maven, whose JVM takes its home from the passwd entry
    jar = repository / Path(*group.split(".")) / artifact / version / f"{artifact}-{version}-{classifier}.jar"
    if not jar.exists():
        if not shutil.which("mvn"):
            pytest.fail(f"{coordinates} is not in ~/.m2 and Maven is not installed (apt-get install maven)")
        get = [MAVEN_GET, f"-Dartifact={coordinates}", "-Dtransitive=false", f"-Dmaven.repo.local={repository}"]
        fetch = subprocess.run(
            ["mvn", "-q", "-B", *get],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=600,
        )
        assert fetch.returncode == 0 and jar.exists(), f"mvn could not fetch {coordinates}:\n{fetch.stdout[-3000:]}"
    return jar


def hadoop_version() -> str:
    """The version of Spark's own Hadoop client (``pyspark/jars/hadoop-client-api-<version>.jar``): the
    ``hadoop-aws`` connector must match it."""
    [jar] = (SPARK_HOME / "jars").glob("hadoop-client-api-*.jar")
    return jar.stem.removeprefix("hadoop-client-api-")


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    key: str
    secret: str
    bucket: str
    jars: Path  # Delta's jars and the s3a connector's, fetched once for the module

    def env(self) -> dict[str, str]:
        """What a process needs to reach the store, through s3fs and through Spark's s3a connector."""
        return {
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "FSSPEC_S3_ENDPOINT_URL": self.endpoint,
            "AWS_ENDPOINT_URL": self.endpoint,  # delta-rs, reading received_days in the sensors and status
            "AWS_ALLOW_HTTP": "true",
            **CHECKSUMS_WHEN_REQUIRED,
            "SPARK_PACKAGES": f"org.apache.hadoop:hadoop-aws:{hadoop_version()}",
            "SPARK_JARS_DIR": str(self.jars),
            "SPARK_CONF": " ".join(f"{k}={v}" for k, v in self.spark_conf().items()),
        }

    def spark_conf(self) -> dict[str, str]:
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        }

    def filesystem(self):
        """An s3fs client of the store, for this process."""
        import s3fs

        checksums = {"request_checksum_calculation": "when_required", "response_checksum_validation": "when_required"}
        return s3fs.S3FileSystem(key=self.key, secret=self.secret, endpoint_url=self.endpoint, config_kwargs=checksums)


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory) -> Iterator[S3Server]:
    """S3Proxy on a free loopback port, keeping its objects in memory, with one empty bucket;
    requests must be signed (AWS signature v2 or v4) with the server's key."""
    jar = maven_jar(S3PROXY)
    base = tmp_path_factory.mktemp("s3")
    port = free_port()
    server = S3Server(
        f"http://127.0.0.1:{port}", "sessions-assets", "sessions-assets-secret", "sessions", base / "jars"
    )
    fetched = subprocess.run(
        [sys.executable, "-m", "sessions_assets.cli.main", "fetch-jars"],
        env={**os.environ, **server.env()},
        capture_output=True,
        text=True,
    )
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    properties = {
        "s3proxy.endpoint": server.endpoint,
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": server.key,
        "s3proxy.credential": server.secret,
        # In memory: the file-system providers list a folder marker (s3a's ``mkdirs`` of ``_staged_commits``)
        # without the ``Size`` every S3 listing entry carries, and delta-rs refuses such a listing.
        "jclouds.provider": "transient",
        "jclouds.identity": server.key,
        "jclouds.credential": server.secret,
    }
    (base / "s3proxy.conf").write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    log = base / "s3proxy.log"
    process = start(["java", "-Xmx512m", "-jar", str(jar), "--properties", str(base / "s3proxy.conf")], log)
    try:

        def answers() -> bool:
            try:
                urllib.request.urlopen(server.endpoint, timeout=5)
            except urllib.error.HTTPError:  # 403 to an unsigned request: it serves
                return True
            return True

        wait_for(answers, "S3Proxy", [process], [log])
        server.filesystem().call_s3("create_bucket", Bucket=server.bucket)
        yield server
    finally:
        stop(process)


@pytest.fixture
def connect_server(tmp_path) -> Iterator:
    """A Spark Connect server of the test's own (one the test may kill), from the ``SPARK_*`` variables, with a
    token of its own (``connect_server.token()``)."""
    from sessions_assets.cli.server import Server

    server = Server(tmp_path / "spark-server")
    server.start(port=free_port())
    try:
        yield server
    finally:
        server.stop()
