"""Only runs that show its token reach a Spark Connect server ``spark-server`` started: one without it, or with
another, fails in one line naming the token file, and leaves the token nowhere a user could read it (not in the
server's command lines, which ``ps`` shows everyone, nor its log, the run's output or the Dagster instance).

The server is one of the module's own, its token made at its start; the runs are ``sessions-assets run``
processes on a small generated landing zone, their instance beside the server's folder (``DAGSTER_HOME``), as
under ``make dev``.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessions_assets.cli.server import Server
from sessions_assets.warehouse.spark import TOKEN_VARIABLE
from sessions_assets_tests.helpers.deployed import free_port
from sessions_assets_tests.slow.commands import python_traceback, run

pytestmark = pytest.mark.slow
WRONG = "not-the-servers-token-0123456789abcdef"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory) -> Iterator[Server]:
    """A server with a token of its own, in ``<home>/spark-server``; a landing zone of one day in ``<home>/data``."""
    home = tmp_path_factory.mktemp("guarded")
    server = Server(home / "spark-server")
    server.start(port=free_port())
    generated = run("generate", "--data-root", str(home / "data"), "--days", "1", "--users", "2", cwd=home)
    assert generated.returncode == 0, generated.stderr
    try:
        yield server
    finally:
        server.stop()


def process_group(leader: int) -> list[Path]:
    """``/proc/<pid>`` of every process in the group ``leader`` leads (spark-submit's scripts, the JVM, Python
    workers)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2]) == leader:
                found.append(proc)
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
    return found


@pytest.mark.parametrize(
    "remote, token, why",
    [
        ("{url}", "", "No authentication token provided"),
        ("{url}", WRONG, "Invalid authentication token"),
        ("{url}/;token=" + WRONG, "", "Invalid authentication token"),
    ],
    ids=["no_token", "a_wrong_token", "a_wrong_token_in_the_url"],
)
def test_a_run_without_the_servers_token_fails_in_one_line_naming_the_token_file(guarded, remote, token, why):
    home, url = guarded.folder.parent, guarded.running()["url"]
    env = {"SPARK_REMOTE": remote.format(url=url), TOKEN_VARIABLE: token, "DAGSTER_HOME": str(home)}

    done = run("run", "--data-root", str(home / "data"), cwd=home, env=env)

    assert done.returncode == 1 and "Done in" not in done.stdout, done.stdout + done.stderr[-3000:]
    assert not python_traceback(done.stderr), done.stderr[-3000:]
    [said] = [line for line in done.stderr.splitlines() if line.startswith("sessions-assets")]
    assert said.startswith("sessions-assets: process_job failed"), said
    assert said.endswith(
        f"the Spark Connect server at {url} refused this run ({why}): set {TOKEN_VARIABLE} to the token in "
        f"{guarded.token_file}"
    ), said
    for secret in (WRONG, guarded.token()):  # nor in the instance's records (the run's logs and metadata)
        assert secret not in done.stdout + done.stderr
        assert not [p for p in home.rglob("*") if p != guarded.token_file and p.is_file() and secret in _text(p)]


def test_the_token_is_in_a_file_only_its_owner_reads_and_neither_in_the_servers_command_lines_nor_its_log(guarded):
    token, pid = guarded.token(), guarded.running()["pid"]

    assert len(token) >= 16 and stat.S_IMODE(guarded.token_file.stat().st_mode) == 0o600
    processes = process_group(pid)
    assert processes, "the server's processes are gone"
    for proc in processes:
        assert token not in (proc / "cmdline").read_text(errors="replace"), proc
    # What the server was given it in: its environment, which only its owner can read.
    assert stat.S_IMODE((Path("/proc") / str(pid) / "environ").stat().st_mode) == 0o400
    assert f"{TOKEN_VARIABLE}={token}" in (Path("/proc") / str(pid) / "environ").read_text(errors="replace")
    assert token not in guarded.log.read_text(errors="replace")  # after the refused runs above
    assert token not in guarded.record.read_text()


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")
