"""Delta's jars, and any extra packages, on local disk: fetched once at set-up, used by every Spark start.

Spark can resolve Maven packages at each start (``spark.jars.packages``), but then every run needs the
package server, pays the resolution, and two runs starting at once race in the same Ivy cache and can
read each other's half-written jars. So ``make setup`` (or a deployment image) runs ``sessions-assets
fetch-jars`` once, and runs only list the jars it left (``spark.jars``); on a cluster the driver ships
them to the executors. The folder's manifest names the packages it holds, so a run that wants others
(a changed ``SPARK_PACKAGES``, an upgraded ``delta-spark``) says so in one line instead of starting.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

MANIFEST = "packages.txt"


class JarsMissing(RuntimeError):
    """The jars a run needs are not on disk; the message says how to fetch them."""


def delta_packages() -> list[str]:
    """The Maven coordinates of the Delta jars matching the installed ``delta-spark`` and ``pyspark``."""
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    builder = configure_spark_with_delta_pip(SparkSession.Builder())
    return builder._options["spark.jars.packages"].split(",")  # delta-spark computes them; read back here


def packages() -> list[str]:
    """Delta's packages and those in ``SPARK_PACKAGES`` (comma- or space-separated)."""
    extra = shlex.split(os.environ.get("SPARK_PACKAGES", "").replace(",", " "))
    return list(dict.fromkeys(delta_packages() + extra))


def jars_dir() -> Path:
    """``SPARK_JARS_DIR``, else ``share/sessions-assets/jars`` in the Python environment (the project's venv)."""
    return Path(os.environ.get("SPARK_JARS_DIR") or Path(sys.prefix) / "share" / "sessions-assets" / "jars")


def _held(folder: Path) -> list[str]:
    manifest = folder / MANIFEST
    return manifest.read_text().split() if manifest.is_file() else []


def local_jars(folder: Path | None = None) -> list[str]:
    """The jar files of every package a run needs, or ``JarsMissing`` saying how to fetch them."""
    folder = folder or jars_dir()
    missing = [p for p in packages() if p not in _held(folder)]
    if missing:
        raise JarsMissing(
            f"Spark's jars for {', '.join(missing)} are not in {folder}: run `sessions-assets fetch-jars` "
            "(make setup does), or set SPARK_JARS_DIR to a folder it filled"
        )
    return sorted(str(p) for p in folder.glob("*.jar"))


def fetch(env: Mapping[str, str], folder: Path | None = None) -> list[str]:
    """Resolve the packages with Spark's own resolver (Ivy) into a private cache, once, and keep their jars in
    ``folder``. Safe to run twice at once: one resolves under a lock, the other then finds the jars. ``env``: the
    resolver's environment, one that starts a classic driver (``spark.classic_env``), even where the runs attach
    to a server."""
    folder = folder or jars_dir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wanted = packages()
        if set(wanted) <= set(_held(folder)):
            return local_jars(folder)
        with tempfile.TemporaryDirectory(prefix="sessions-assets-ivy-") as ivy:
            start = (
                "from pyspark.sql import SparkSession; SparkSession.builder.master('local[1]')"
                f".config('spark.jars.packages', {','.join(wanted)!r}).config('spark.jars.ivy', {ivy!r})"
                ".config('spark.ui.enabled', 'false').getOrCreate().stop()"
            )
            done = subprocess.run([sys.executable, "-c", start], capture_output=True, text=True, env=dict(env))
            jars = sorted(Path(ivy, "jars").glob("*.jar"))
            if done.returncode != 0 or not jars:
                raise JarsMissing(f"resolving {', '.join(wanted)} failed:\n{done.stderr[-3000:]}")
            staged = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
            for jar in jars:
                shutil.copy2(jar, staged / jar.name)
            (staged / MANIFEST).write_text("\n".join(wanted) + "\n")
            if folder.exists():
                shutil.rmtree(folder)
            staged.rename(folder)
        return local_jars(folder)
