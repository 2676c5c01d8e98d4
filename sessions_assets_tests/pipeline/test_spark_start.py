"""A Spark start reads what ``fetch-jars`` left on disk (``make setup`` runs it): the driver maps the class-data
archive made beside Delta's jars, so it skips loading and verifying the classes the archive holds."""

from __future__ import annotations

from pathlib import Path

from sessions_assets.warehouse import jars


def test_the_driver_maps_the_class_archive_fetch_jars_made(spark):
    archive = jars.class_archive()
    assert archive.is_file(), "sessions-assets fetch-jars makes it"
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    assert str(archive) in {line.split()[-1] for line in maps if line.endswith(".jsa")}, "the JVM ignored it"
