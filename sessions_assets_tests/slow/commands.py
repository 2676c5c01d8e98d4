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


def short_lived_jvm(conf: str) -> str:
    """``SPARK_CONF`` ``conf`` for a driver that lives one short run: it compiles with C1 only, a third less CPU on two
    cores than with C2's compiles too, and the same results. (Not for the tests' server: over a whole test run, C2's
    code pays for its compiles.)"""
    if "TieredStopAtLevel" in conf:
        return conf
    return f"{conf} spark.driver.extraJavaOptions={shlex.quote(f'{DRIVER_JAVA_OPTIONS} -XX:TieredStopAtLevel=1')}"


def user_env(**extra: str) -> dict[str, str]:
    """The caller's environment without a Dagster home or pipeline settings, in UTC, then ``extra``: its runs attach
    to the tests' Spark Connect server (``SPARK_REMOTE``) unless ``extra`` unsets it."""
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME" and not k.startswith("SESSIONS_")}
    return {**env, "TZ": "UTC", "SPARK_CONF": short_lived_jvm(env.get("SPARK_CONF", "")), **extra}


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
