"""The Spark Connect token without a server: where ``spark-server`` keeps it, which starts it refuses, and that no
URL or error a run shows carries it. The server itself, and runs it refuses, are in ``slow/test_connect_token.py``.
"""

from __future__ import annotations

import stat

import pytest

from sessions_assets.cli.main import main
from sessions_assets.cli.server import MIN_TOKEN_CHARS, Server, ServerRefused
from sessions_assets.graph.names import Names
from sessions_assets.graph.resources import resources
from sessions_assets.settings import Settings
from sessions_assets.warehouse import spark

SECRET = "s3cret-token-of-the-test-0123456789"


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_token_file_is_0600_and_its_token_kept_across_starts_unless_replaced(tmp_path):
    server = Server(tmp_path / "spark-server")

    first = server.serving_token()

    assert len(first) >= MIN_TOKEN_CHARS and server.token() == first and mode(server.token_file) == 0o600
    assert server.serving_token() == first  # a restart: runs holding it keep working
    renewed = server.serving_token(renew=True)
    assert renewed != first and server.token() == renewed
    assert server.serving_token(SECRET) == SECRET and server.token() == SECRET  # SPARK_CONNECT_AUTHENTICATE_TOKEN
    assert mode(server.token_file) == 0o600


def test_a_token_file_others_could_read_is_replaced(tmp_path):
    server = Server(tmp_path / "spark-server")
    exposed = server.serving_token()
    server.token_file.chmod(0o644)

    assert server.serving_token() != exposed and mode(server.token_file) == 0o600


@pytest.mark.parametrize("token", ["short", "with space " + "x" * 16, "semi;colon" + "x" * 16], ids=str.split)
def test_a_token_that_is_short_or_cannot_travel_is_refused(tmp_path, token):
    with pytest.raises(ServerRefused, match="at least 16 printable ASCII characters"):
        Server(tmp_path / "spark-server").serving_token(token)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "spark.example"])
def test_listening_beyond_loopback_without_a_token_is_refused_in_one_line(tmp_path, monkeypatch, capsys, host):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    root = tmp_path / "data"

    code = main(["spark-server", "start", "--data-root", str(root), "--host", host, "--no-token"])

    assert code == 2
    [said] = capsys.readouterr().err.splitlines()
    assert said.startswith(f"sessions-assets: refusing to serve {host} without a token")
    assert not root.exists()  # nothing started, no record left


def test_a_url_with_a_token_is_shown_without_it_and_the_processs_token_nowhere(monkeypatch):
    with_params = f"sc://spark.example:443/;use_ssl=true;token={SECRET};user_id=runs"

    assert spark.without_token(with_params) == "sc://spark.example:443/;use_ssl=true;user_id=runs"
    assert spark.url_token(with_params) == SECRET
    assert SECRET not in spark.redacted(f"no answer from {with_params}")
    monkeypatch.setenv(spark.TOKEN_VARIABLE, SECRET)
    assert spark.redacted(f"authorization: Bearer {SECRET}") == "authorization: Bearer …"
    shown = resources(Settings(), Names(), remote=f"sc://localhost:15002/;token={SECRET}")["spark"].remote
    assert shown == "sc://localhost:15002"


@pytest.mark.parametrize(
    "url, said",
    [
        (f"sc://127.0.0.1:15002/;token={SECRET}", "pyspark does only to localhost: use sc://localhost:15002"),
        (f"sc://spark.example:15002/;token={SECRET}", "or add ;use_ssl=true for one behind a TLS proxy"),
        (f"http://localhost:15002/;token={SECRET}", "is not a Spark Connect URL (sc://host:port)"),
    ],
    ids=["loopback_address", "another_host", "not_sc"],
)
def test_a_token_pyspark_would_send_unencrypted_or_to_no_server_is_refused_in_one_line_without_it(url, said):
    """Refused before any connection is tried (nothing listens at these addresses)."""
    with pytest.raises(spark.ServerUnreachable) as refused:
        spark.attach(url, {})

    line = spark.one_line(refused.value)
    assert said in line and SECRET not in line and "\n" not in line
