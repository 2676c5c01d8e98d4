"""``sessions-assets … --key-prefix P`` in a host project: the instance's attributes come from the ``defs.yaml``
that declares it, as the code location loads them, not from a second copy in ``SESSIONS_*`` variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessions_assets.cli.declared import DeclaredError, declared, settings_of
from sessions_assets.cli.main import main


def write_defs(folder: Path, attributes: str, type_name: str = "sessions_assets.SessionsComponent") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "defs.yaml"
    path.write_text(f"type: {type_name}\nattributes:\n{attributes}")
    return path


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A host project holding two instances, a copy of one in a virtual environment and another component."""
    monkeypatch.setenv("WEB_DATA_ROOT", str(tmp_path / "web-data"))
    defs = tmp_path / "src" / "host" / "defs"
    write_defs(defs / "web", '  key_prefix: web\n  data_root: "{{ env.WEB_DATA_ROOT }}"\n  time_zone: Europe/Paris\n')
    write_defs(defs / "app", f"  key_prefix: app\n  data_root: {tmp_path / 'app-data'}\n")
    write_defs(tmp_path / ".venv" / "lib" / "defs", "  key_prefix: web\n")  # never a code location's
    write_defs(defs / "other", "  key_prefix: web\n", type_name="host.OtherComponent")
    return tmp_path


def test_a_key_prefix_finds_the_instance_its_defs_yaml_declares(host):
    path, component = declared("web", host)
    assert path == host / "src" / "host" / "defs" / "web" / "defs.yaml"
    settings = settings_of(path, component)
    assert (settings.data_root, settings.time_zone) == (str(host / "web-data"), "Europe/Paris")
    assert settings_of(path, component, data_root="elsewhere").data_root == "elsewhere"  # a --data-root given
    assert declared("shop", host) is None


def test_a_key_prefix_written_as_a_template_and_a_data_root_given_over_an_unset_one(host, monkeypatch):
    monkeypatch.setenv("SHOP_PREFIX", "shop")
    path = write_defs(
        host / "defs" / "shop", '  key_prefix: "{{ env.SHOP_PREFIX }}"\n  data_root: "{{ env.NOWHERE }}"\n'
    )
    found = declared("shop", host)
    assert found is not None and found[0] == path
    with pytest.raises(DeclaredError, match="attributes.data_root: {{ env.NOWHERE }} is not set"):
        settings_of(*found)
    assert settings_of(*found, data_root="given").data_root == "given"


def test_an_unknown_attribute_is_named_in_one_line(host):
    app = host / "src" / "host" / "defs" / "app" / "defs.yaml"
    app.write_text(app.read_text() + "  session_gap: 45\n")
    with pytest.raises(DeclaredError) as stopped:
        declared("app", host)
    said = str(stopped.value)
    assert said.startswith(f"{app}: attributes.session_gap") and "\n" not in said, said


def test_a_key_prefix_declared_twice_stops_in_one_line_naming_both_files(host):
    write_defs(host / "src" / "host" / "defs" / "web_copy", "  key_prefix: web\n")
    with pytest.raises(DeclaredError) as stopped:
        declared("web", host)
    said = str(stopped.value)
    assert all(str(host / "src" / "host" / "defs" / d / "defs.yaml") in said for d in ("web", "web_copy")), said
    assert "\n" not in said


def test_the_command_line_runs_with_the_declared_data_root_and_says_a_wrong_attribute_in_one_line(
    host, monkeypatch, capsys
):
    monkeypatch.chdir(host)
    monkeypatch.delenv("SESSIONS_DATA_ROOT", raising=False)
    assert main(["status", "--key-prefix", "app"]) == 2  # no data root there yet: the declared one is named
    said = capsys.readouterr()
    assert "as src/host/defs/app/defs.yaml declares it" in said.err.replace(str(host) + "/", "")
    stopped = said.err.strip().splitlines()[-1]
    app = host / "src" / "host" / "defs" / "app" / "defs.yaml"
    assert stopped.startswith("sessions-assets: no data root at ")
    assert stopped.endswith(f"{host / 'app-data'} (give --data-root or data_root in {app})"), stopped

    app.write_text(app.read_text() + "  session_gap_minutes: often\n")
    assert main(["status", "--key-prefix", "app"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"sessions-assets: {app}: attributes.session_gap_minutes") and "\n" not in err, err
