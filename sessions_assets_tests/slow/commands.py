"""``sessions-assets`` as the slow tests start it: its own process, in a user's environment."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from sessions_assets.warehouse.spark import DRIVER_JAVA_OPTIONS

TIMEOUT = 600
COMMAND = [sys.executable, "-m", "sessions_assets.cli.main"]


def user_env(**extra: str) -> dict[str, str]:
    """The caller's environment without a Dagster home or pipeline settings, in UTC, then ``extra``: its runs attach
    to the tests' Spark Connect server (``SPARK_REMOTE``, with its token) unless ``extra`` unsets it. The JVM of a short run with a
    driver of its own compiles with C1 only: a third less CPU on two cores, the same results. (Not the tests'
    server: over a whole test run, C2's code pays for its compiles.)"""
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME" and not k.startswith("SESSIONS_")}
    jvm = shlex.quote(f"{DRIVER_JAVA_OPTIONS} -XX:TieredStopAtLevel=1")
    conf = f"{env.get('SPARK_CONF', '')} spark.driver.extraJavaOptions={jvm}"
    return {**env, "TZ": "UTC", "SPARK_CONF": conf, **extra}


def run(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess:
    """``sessions-assets ARGS`` in ``cwd`` (where Spark may leave files), ``env`` over ``user_env()``; its output."""
    return subprocess.run(
        [*COMMAND, *args], cwd=cwd, env=user_env(**(env or {})), capture_output=True, text=True, timeout=timeout
    )


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = TIMEOUT) -> str:
    """``run``, which must succeed; its standard output."""
    done = run(*args, cwd=cwd, env=env, timeout=timeout)
    assert done.returncode == 0, f"sessions-assets {' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done.stdout


def python_traceback(stderr: str) -> bool:
    return "Traceback (most recent call last)" in stderr


def start(*args: str, cwd: Path, out: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``sessions-assets ARGS`` started in its own process group (``env`` over ``user_env()``), writing to
    ``<out>.out`` and ``<out>.err``."""
    with open(f"{out}.out", "w") as stdout, open(f"{out}.err", "w") as stderr:
        return subprocess.Popen(
            [*COMMAND, *args],
            cwd=cwd,
            env=user_env(**(env or {})),
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
