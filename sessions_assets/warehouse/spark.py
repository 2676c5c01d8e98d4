"""Spark with Delta for a run, in one of two modes, and what its errors say in one line.

- **Its own driver** (``SPARK_REMOTE`` unset): the run's process starts a Spark driver (``local[2]`` or a cluster's
  client), with the Delta jars ``fetch-jars`` left on disk.
- **Attached** (``SPARK_REMOTE=sc://host:port``): the run's process is a Spark Connect client of a long-lived
  server that holds the driver (``cli/server.py`` starts one with this same configuration), with a session of its
  own. The server's JVM, JIT, jars and caches are warm; a run pays only for its own queries. It shows its token
  (``SPARK_CONNECT_AUTHENTICATE_TOKEN``, or ``;token=`` in the URL) to the server, and nowhere else: every URL
  and error this module reports has it struck out.

The pipeline's code is the same in both: DataFrames and Delta SQL, never the JVM behind a classic session.
What matters for correctness (UTC, Delta, strict JSON) is fixed here; the master, memory and extra settings
come from ``SPARK_*`` variables, so the same code runs on ``local[2]``, on a cluster and behind a server.
"""

from __future__ import annotations

import atexit
import os
import re
import shlex
import socket
import tempfile
import warnings
from typing import Any
from urllib.parse import urlparse

from sessions_assets.warehouse import jars

# Many small queries: the parallel collector pauses less often than the default G1 at this heap size.
DRIVER_JAVA_OPTIONS = "-XX:+UseParallelGC"
# Spark Connect's own default port.
CONNECT_PORT = 15002
# Set when the driver starts (its JVM, its catalog), not per session: a run attached to a server leaves them.
STATIC = ("spark.sql.extensions", "spark.sql.catalog.spark_catalog", "spark.sql.warehouse.dir")
# A run attached to a server retries an unanswered call a few times (about 4 s in all), then fails in one line:
# a server that restarts has lost the run's session anyway, and the daemon's retries and the sensors' backoff
# request the work again (Spark Connect's own default keeps trying for ten minutes).
CONNECT_RETRIES = 4
# Set, even empty, they make pyspark build a Spark Connect client, and Spark's launcher leave the classic SQL jars
# off every class path it builds (a driver's, a standalone worker's executors').
CONNECT_CLIENT_VARIABLES = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")
# The pre-shared token a Spark Connect server requires of its clients (``spark.connect.authenticate.token``):
# the server and pyspark's client both read it from this variable.
TOKEN_VARIABLE = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
# Where ``sessions-assets spark-server`` keeps its token, under the instance's folder.
TOKEN_FILE = "<DAGSTER_HOME>/spark-server/token"
# The only host pyspark sends a token to without TLS (over gRPC's local credentials).
LOCAL_HOST = "localhost"
_TOKEN_PARAMETER = re.compile(r"(;\s*token\s*=\s*)[^;\s'\"]*", re.IGNORECASE)


def classic_env() -> dict[str, str]:
    """This process's environment for a process that must start a classic driver (a server, a jar resolver),
    without the Connect client's variables or a token it has no use for."""
    return {k: v for k, v in os.environ.items() if k not in (*CONNECT_CLIENT_VARIABLES, TOKEN_VARIABLE)}


class ServerUnreachable(RuntimeError):
    """``SPARK_REMOTE`` names a Spark Connect server that does not answer, or cannot be given the token safely;
    the message says what to do."""


def redacted(text: str) -> str:
    """``text`` with every ``;token=…`` of a URL, and this process's token, struck out: what may be shown."""
    text = _TOKEN_PARAMETER.sub(r"\1…", text)
    for token in (os.environ.get(TOKEN_VARIABLE, "").strip(), url_token(remote())):
        if len(token) >= 8:  # shorter ones would strike out ordinary words (``spark-server`` takes 16 and more)
            text = text.replace(token, "…")
    return text


def url_token(url: str) -> str:
    """The ``;token=`` of a Spark Connect URL, or ""."""
    for parameter in urlparse(url).path.split(";")[1:]:
        key, _, value = parameter.partition("=")
        if key.strip().lower() == "token":
            return value.strip()
    return ""


def without_token(url: str) -> str:
    """``url`` without its ``;token=`` parameter: the URL as configuration, logs and errors show it."""
    parsed = urlparse(url)
    kept = [p for p in parsed.path.split(";")[1:] if p.partition("=")[0].strip().lower() != "token"]
    path = ";".join([parsed.path.split(";")[0], *kept])
    return parsed._replace(path="" if path in ("", "/") else path).geturl()


def with_token(url: str, token: str) -> str:
    """``url`` (without a token) carrying ``token``, as pyspark's client reads it."""
    return f"{url};token={token}" if "/;" in url else f"{url.rstrip('/')}/;token={token}"


def token_for(url: str) -> str:
    """The token to show the server at ``url``: the URL's own, else ``SPARK_REMOTE``'s when that names the same
    server (a resource holds the URL without it), else ``SPARK_CONNECT_AUTHENTICATE_TOKEN``; "" for none."""
    configured = remote()
    if url_token(url):
        return url_token(url)
    if url_token(configured) and without_token(configured) == without_token(url):
        return url_token(configured)
    return os.environ.get(TOKEN_VARIABLE, "").strip()


def token_file() -> str:
    """Where a refused run is told to find the token: the instance's server folder when this process knows it."""
    home = os.environ.get("DAGSTER_HOME")
    return os.path.join(home, "spark-server", "token") if home else TOKEN_FILE


def spark_home() -> str:
    """The installed pyspark, which holds Spark's jars and scripts (``bin/spark-submit``)."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def remote() -> str:
    """``SPARK_REMOTE``: the Spark Connect server runs attach to, or "" when each run starts its own driver."""
    return os.environ.get("SPARK_REMOTE", "").strip()


def spark_config(**overrides: Any) -> dict[str, str]:
    """The pipeline's Spark configuration: defaults, then ``SPARK_*`` variables, then ``overrides``.

    ``SPARK_MASTER`` (``local[2]``), ``SPARK_DRIVER_MEMORY`` (``3g``), ``SPARK_SHUFFLE_PARTITIONS`` (``2``),
    ``SPARK_JARS_DIR`` (where ``fetch-jars`` left Delta's jars and those of ``SPARK_PACKAGES``: ``jars.py``),
    ``SPARK_JARS`` (more local jars) and ``SPARK_CONF`` (``key=value`` pairs, space-separated).
    """
    env = os.environ.get
    shuffle = env("SPARK_SHUFFLE_PARTITIONS", "2")
    config = {
        "spark.master": env("SPARK_MASTER", "local[2]"),
        "spark.app.name": "sessions-assets",
        "spark.driver.memory": env("SPARK_DRIVER_MEMORY", "3g"),
        "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Partition keys are UTC days, and the contract reads offset-less timestamps as UTC.
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": shuffle,
        "spark.default.parallelism": shuffle,
        # Small queries on two cores: one job per query and interpreted plans cost less than adaptive
        # re-planning and compiling each plan to Java.
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        # Inferring constraints through unions of wide comparisons grows exponentially (the corrections of
        # a re-ingested day hung in it); no query here needs inferred filters.
        "spark.sql.constraintPropagation.enabled": "false",
        # A checkpointed frame has no size the optimizer knows, so it takes each one for a huge scan and filters it
        # with a runtime Bloom filter built from the Delta table it is joined to: a second read of that table and
        # its files planned again, for rows already in memory. Small sides here are broadcast instead.
        "spark.sql.optimizer.runtime.bloomFilter.enabled": "false",
        # Delta rebuilds a table's state with this many tasks (default 50): too many for small logs.
        "spark.databricks.delta.snapshotPartitions": "2",
        # Python's json keeps the last of duplicate keys; so does the parser, as the contract's oracle.
        "spark.sql.variant.allowDuplicateKeys": "true",
        "spark.ui.enabled": env("SPARK_UI", "false"),
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": env("SPARK_LOG_LEVEL", "ERROR"),
        # A write with nothing to change still commits, so a table's note and version always move with it.
        "spark.databricks.delta.skipRecordingEmptyCommits": "false",
        # Delta writes its log entries and checksums on a local disk through Hadoop's FileContext. Without its checksum
        # layer each is one file, not two, and one rename: fewer processes per commit, as Hadoop starts a `readlink`
        # for each rename and a `chmod` for each file. Data files, and every read, go through the FileSystem API,
        # which keeps its checksums (S3A's disk buffers need that local file system). Object stores are not concerned.
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
        # Tables are addressed by path; the catalog's folder is kept out of the working directory.
        "spark.sql.warehouse.dir": os.path.join(tempfile.gettempdir(), "sessions-assets-spark-warehouse"),
        # More local jars; Delta's are added from disk when the driver starts (``driver_config``).
        "spark.jars": ",".join(shlex.split(env("SPARK_JARS", "").replace(",", " "))),
    }
    for pair in shlex.split(env("SPARK_CONF", "")):
        key, _, value = pair.partition("=")
        config[key] = value
    return {**config, **{k: str(v) for k, v in overrides.items()}}


def driver_config(config: dict[str, str]) -> dict[str, str]:
    """``config`` for a driver's start, with Delta's jars from disk (``jars.JarsMissing`` when absent). Looked up
    when a driver starts, not when the definitions load: the sensors and the UI need no Spark, and a missing jar
    fails a run in one line rather than the code location."""
    listed = [j for j in (config.get("spark.jars") or "").split(",") if j]
    return {**config, "spark.jars": ",".join(jars.local_jars() + listed)}


def session_config(config: dict[str, str]) -> dict[str, str]:
    """What a session may set of ``config``: the SQL and Delta settings a run attached to a server applies to its
    own session (the server was started with the rest)."""
    return {
        k: v for k, v in config.items() if k.startswith(("spark.sql.", "spark.databricks.delta.")) and k not in STATIC
    }


def session(config: dict[str, str], url: str = ""):
    """A session with ``config``: attached to the Spark Connect server at ``url``, else on this process's driver."""
    return attach(url, config) if url else start_driver(config)


def start_driver(config: dict[str, str]):
    """A classic session, starting this process's driver on first use (one per process: later calls share it)."""
    from pyspark.sql import SparkSession

    for name in CONNECT_CLIENT_VARIABLES:  # SPARK_CONNECT_MODE_ENABLED: set by a parent process's Connect session
        os.environ.pop(name, None)
    builder = SparkSession.builder
    for key, value in driver_config(config).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def attach(url: str, config: dict[str, str]):
    """This process's session on the Spark Connect server at ``url``, with ``config``'s session settings; a server
    that does not answer is ``ServerUnreachable`` at once, not after the client's retries.

    One session per process, like one driver per process: its runs share it (pyspark files a checkpoint under the
    process's active session, so a second session in the same process would lose its checkpoints). It is released
    when the process exits, and its views, checkpoints and settings go with it."""
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    parsed, shown = urlparse(url), without_token(url)
    if parsed.scheme != "sc" or not parsed.hostname:
        raise ServerUnreachable(f"SPARK_REMOTE={shown} is not a Spark Connect URL (sc://host:port)")
    token = token_for(url)
    if token and parsed.hostname != LOCAL_HOST and "use_ssl=true" not in parsed.path.lower():
        raise ServerUnreachable(_in_clear(shown, parsed.port or CONNECT_PORT))
    try:
        socket.create_connection((parsed.hostname, parsed.port or CONNECT_PORT), timeout=10).close()
    except OSError as error:
        raise ServerUnreachable(_unreachable(shown, error.strerror or str(error))) from None
    if not token:  # set but empty, pyspark would send an empty token
        os.environ.pop(TOKEN_VARIABLE, None)
    existing = SparkSession.getActiveSession()
    connect = with_token(shown, token) if token else shown
    session = SparkSession.builder.remote(connect).config(map=session_config(config)).getOrCreate()
    # The client warns when its retries run out; the error that follows says it in one line (``one_line``).
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]", category=UserWarning)
    if session is not existing:
        session.client.set_retry_policies([DefaultPolicy(max_retries=CONNECT_RETRIES)])
        atexit.register(session.stop)
    return session


def _unreachable(url: str, why: str) -> str:
    return (
        f"the Spark Connect server at {url} does not answer ({why}): start it (`sessions-assets spark-server "
        "start`), or unset SPARK_REMOTE to run with a driver of its own"
    )


def _in_clear(url: str, port: int) -> str:
    return (
        f"SPARK_REMOTE={url} would carry this run's token unencrypted, which pyspark does only to "
        f"{LOCAL_HOST}: use sc://{LOCAL_HOST}:{port} for a server on this machine, or add ;use_ssl=true for one "
        "behind a TLS proxy"
    )


def _refused(url: str, why: str) -> str:
    return (
        f"the Spark Connect server at {url} refused this run ({why}): set {TOKEN_VARIABLE} to the token in "
        f"{token_file()}"
    )


def one_line(error: BaseException) -> str:
    """What went wrong, in one line and with any token struck out: a Spark Connect server that refused the run's
    token or went away, the innermost Java cause of a Spark error, else the error's first line."""
    text = str(error)
    if isinstance(error, ServerUnreachable):  # already a line of its own
        return redacted(text)[:500]
    server = without_token(remote()) or "SPARK_REMOTE"
    if re.search(r"StatusCode\.UNAUTHENTICATED", text[:3000]):
        found = re.search(r'details = "([^"]*)"', text)
        return redacted(_refused(server, found.group(1) if found else "unauthenticated"))[:500]
    if re.search(r"NO_ACTIVE_SESSION|SESSION_NOT_FOUND|SESSION_CLOSED", text[:3000]):
        return (
            f"the Spark Connect server at {server} no longer holds this run's session (it was "
            "restarted or stopped during the run): run again; no table kept a partial write"
        )
    if re.search(r"StatusCode\.UNAVAILABLE|failed to connect to all addresses|Connection refused", text[:3000]):
        found = re.search(r'details = "([^"]*)"', text)
        return redacted(_unreachable(server, found.group(1) if found else "unavailable"))[:500]
    causes = re.findall(r"Caused by: ([\w.$]+(?:Exception|Error)[^\n]*)", text)
    if causes:
        return redacted(causes[-1].strip())[:500]
    first = next((s for s in text.splitlines() if s.strip()), "")
    return redacted(f"{type(error).__name__}: {first.strip()}")[:500]
