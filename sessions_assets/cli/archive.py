"""The driver JVM's class-data archive: made once at set-up, beside the jars, and mapped by every Spark start.

A Spark start loads and verifies some 18,000 classes before its first query. Java's class-data sharing
(CDS) keeps them parsed and verified in a file the JVM maps instead: a cold run of a small day starts
about 3 s sooner. ``fetch-jars`` makes the archive by running the pipeline once on a small generated
landing zone with ``-XX:ArchiveClassesAtExit`` (the JVM writes it as it exits), and every later driver
gets ``-XX:SharedArchiveFile`` (``jars.driver_java_options``). The JVM checks the archive against its own
build and class path and ignores it if they differ (another JDK, an upgraded pyspark); deleting the file
and running ``fetch-jars`` again makes a matching one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sessions_assets.warehouse import jars


def create(folder: Path) -> str:
    """Make ``folder``'s archive unless it is there; returns a line saying what it did. The JVM writes the file
    under a temporary name, renamed once the JVM has exited cleanly: a run never maps a half-written archive."""
    target = jars.class_archive(folder)
    if target.is_file():
        return f"class-data archive: {target} (kept)"
    staged = folder / f".{jars.CLASS_ARCHIVE}.{os.getpid()}"
    # A local driver with the default rules, whatever this environment deploys with: the sample is processed.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONS_") and k != "SPARK_MASTER"}
    with tempfile.TemporaryDirectory(prefix="sessions-assets-archive-") as work:
        done = subprocess.run(
            [sys.executable, "-m", __name__, work, str(staged)],
            env={**env, "SPARK_JARS_DIR": str(folder)},
            capture_output=True,
            text=True,
        )
    if done.returncode != 0 or not staged.is_file():
        staged.unlink(missing_ok=True)
        tail = (done.stderr.strip().splitlines() or ["no archive written"])[-1]
        return f"class-data archive not made ({tail}); Spark starts without one"
    staged.rename(target)
    return f"class-data archive: {target}"


def _record(work: str, staged: str) -> None:
    """Run the pipeline on a small landing zone in a driver that archives its classes, and wait for that JVM
    to exit: it writes the archive then, after this process's own work is done."""
    from pyspark import SparkContext

    from sessions_assets.cli.main import main
    from sessions_assets.defs.resources import DRIVER_JAVA_OPTIONS

    options = f"{DRIVER_JAVA_OPTIONS} -XX:ArchiveClassesAtExit={staged}"
    os.environ["SPARK_CONF"] = f"{os.environ.get('SPARK_CONF', '')} spark.driver.extraJavaOptions='{options}'"
    os.environ.pop("DAGSTER_HOME", None)  # the run's instance lives in the temporary data root
    with open(os.devnull, "w") as quiet:
        sys.stdout = quiet
        code = main(["generate", "--data-root", work, "--days", "2", "--users", "5"]) or main(
            ["run", "--data-root", work]
        )
    if code:
        raise SystemExit(code)  # the run has said why on stderr
    gateway = SparkContext._gateway.proc  # the driver JVM; it exits when its standard input closes
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    gateway.stdin.close()
    if gateway.wait(timeout=300):
        raise SystemExit("the archiving JVM failed at exit")


if __name__ == "__main__":
    _record(*sys.argv[1:])
