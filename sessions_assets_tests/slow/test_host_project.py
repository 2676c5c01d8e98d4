"""A host ``dg`` project, as a team that uses this one builds it: this repository installed into its environment (not
editable), ``dg scaffold defs sessions_assets.SessionsComponent`` twice, each ``defs.yaml`` edited to its own data
root, ``dg check defs``, then ``dg dev`` with the sensors on and days dropped into both landing zones.

Nothing is downloaded: the host's environment reads every other package from this project's own (a ``.pth`` file
puts it on the path, and the commands ``dg`` and ``dagster`` are written as pip would write them), and pip builds
and installs this repository with no index and no build isolation. The runs attach to the tests' Spark Connect
server. Both graphs must equal the oracle, no run may fail, and no run of one instance may touch the other's
tables; a bad ``defs.yaml`` must stop ``dg check defs`` with one line naming the file and the attribute.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import dagster as dg
import pytest

from sessions_assets.cli.generate import generate_landing_zone
from sessions_assets.graph.names import REFRESH_TAG
from sessions_assets.warehouse import jars
from sessions_assets.warehouse.delta import DeltaLog, Warehouse
from sessions_assets.warehouse.spark import TOKEN_VARIABLE
from sessions_assets.warehouse.storage import Storage, as_uri
from sessions_assets.warehouse.tables import ALL
from sessions_assets_tests.helpers.deployed import PROJECT, DagsterDev, tag
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle

pytestmark = pytest.mark.slow
TIMEOUT = 600  # per wait
PREFIXES = ("web", "app")
LAYOUTS = {"web": "received_date", "app": "segment"}  # one instance in each collector's layout
ZONES = {"web": "UTC", "app": "Asia/Tokyo"}  # and each in its own time zone
COMMANDS = ("dagster-dg-cli", "dagster", "dagster-webserver")  # the distributions whose commands the host runs
# Not part of the repository as shipped: what a checkout holds besides it.
LEFT_OUT = {".venv", ".git", "build", "data", "dagster_home", ".pytest_cache", ".hypothesis", ".ruff_cache"}
DEFINITIONS = """from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""
PYPROJECT = """[project]
name = "host"
version = "0.1.0"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "host"
"""


def host_environment(base: Path) -> Path:
    """A Python environment with this repository installed from a copy of it, non-editably; its other packages are
    this project's environment's. Returns its ``bin`` folder."""
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "project-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for dist in COMMANDS:  # what pip writes for a distribution's console scripts
        for entry in importlib.metadata.distribution(dist).entry_points.select(group="console_scripts"):
            module, _, function = entry.value.partition(":")
            script = venv / "bin" / entry.name
            script.write_text(f"#!{python}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n")
            script.chmod(0o755)
    source = base / "source"
    ignore = lambda folder, names: [  # noqa: E731
        n for n in names if (folder == str(PROJECT) and (n in LEFT_OUT or n.startswith("data-"))) or n == "__pycache__"
    ]
    shutil.copytree(PROJECT, source, ignore=ignore)
    install = [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", str(source)]
    done = subprocess.run(install, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return venv / "bin"


def host_project(base: Path) -> Path:
    root = base / "host"
    (root / "host" / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "host" / "__init__.py").write_text("")
    (root / "host" / "defs" / "__init__.py").write_text("")
    (root / "host" / "definitions.py").write_text(DEFINITIONS)
    return root


def dg_command(bin_dir: Path, root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_dir / "dg"), *args], cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )


def assert_check_fails_in_one_line(bin_dir, root, env, defs_yaml: Path, edited: str, attribute: str) -> None:
    """``dg check defs`` of a ``defs.yaml`` edited so: it fails, and one line names the file and the attribute."""
    kept = defs_yaml.read_text()
    defs_yaml.write_text(edited)
    try:
        done = dg_command(bin_dir, root, env, "check", "defs")
    finally:
        defs_yaml.write_text(kept)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    naming = [line for line in said.splitlines() if str(defs_yaml) in line and f"attributes.{attribute}" in line]
    assert len(naming) == 1, said
    assert "sessions_assets/graph/" not in said, said  # no trace from inside the graph


def test_a_host_project_runs_two_instances_side_by_side(tmp_path, spark):
    bin_dir = host_environment(tmp_path)
    root, home = host_project(tmp_path), tmp_path / "dagster_home"
    data = {p: tmp_path / f"{p}-data" for p in PREFIXES}
    env = {
        "TZ": "UTC",
        "HOME": str(tmp_path),
        "VIRTUAL_ENV": str(bin_dir.parent),
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SPARK_REMOTE": os.environ["SPARK_REMOTE"],
        TOKEN_VARIABLE: os.environ.get(TOKEN_VARIABLE, ""),  # the tests' server's token, as a host gives its runs
        **{f"{p.upper()}_DATA_ROOT": str(data[p]) for p in PREFIXES},
    }
    # Installed, not linked to the checkout: the package and its data files in the host's environment.
    where = "import sessions_assets.warehouse.jars as j; print(j.__file__, j.jars_dir())"
    shown = subprocess.run([str(bin_dir / "python"), "-c", where], cwd=root, env=env, capture_output=True, text=True)
    module, jars_dir = map(Path, shown.stdout.split())
    package = module.parents[1]
    assert package.is_relative_to(bin_dir.parent) and package.name == "sessions_assets", shown
    assert (package / "engine" / "channel_rules.json").is_file() and (package / "defs" / "defs.yaml").is_file()
    assert jars_dir == bin_dir.parent / "share" / "sessions-assets" / "jars"  # where fetch-jars puts them
    # The installed copy reads the jars a folder holds already (no resolution): the command works from it.
    fetched = subprocess.run(
        [str(bin_dir / "sessions-assets"), "fetch-jars"], cwd=root, env={**env, "SPARK_JARS_DIR": str(jars.jars_dir())}
    )
    assert fetched.returncode == 0

    # Two instances, scaffolded by dg, each edited to its own data root (from the environment) and layout.
    listed = dg_command(bin_dir, root, env, "list", "components")
    assert "sessions_assets.SessionsComponent" in listed.stdout, listed.stdout + listed.stderr
    files = {}
    for prefix in PREFIXES:
        scaffold = ["scaffold", "defs", "sessions_assets.SessionsComponent", prefix, "--key-prefix", prefix]
        done = dg_command(bin_dir, root, env, *scaffold, "--data-root", f"{{{{ env.{prefix.upper()}_DATA_ROOT }}}}")
        assert done.returncode == 0, done.stdout + done.stderr
        files[prefix] = root / "host" / "defs" / prefix / "defs.yaml"
        text = files[prefix].read_text() + f'  landing_layout: "{LAYOUTS[prefix]}"\n  time_zone: "{ZONES[prefix]}"\n'
        files[prefix].write_text(
            text.replace('# spark_remote: "{{ env.SPARK_REMOTE }}"', 'spark_remote: "{{ env.SPARK_REMOTE }}"')
        )
    checked = dg_command(bin_dir, root, env, "check", "defs")
    assert checked.returncode == 0 and "All definitions loaded successfully" in checked.stdout + checked.stderr, (
        checked.stdout + checked.stderr
    )
    # The installed command says a bad attribute in one line, whether Dagster's schema refuses it (a name it does
    # not know) or the component does (a value): every other attribute's line is proven in-process
    # (pipeline/test_component.py).
    app = files["app"].read_text()
    assert_check_fails_in_one_line(bin_dir, root, env, files["app"], app + "  session_gap: 45\n", "session_gap")
    assert_check_fails_in_one_line(
        bin_dir, root, env, files["app"], app.replace("Asia/Tokyo", "Asia/Atlantis"), "time_zone"
    )

    # Each landing zone's days, generated apart and dropped in: the web's first, then the app's, then both at once.
    staged = {}
    for n, prefix in enumerate(PREFIXES):
        staging = tmp_path / f"{prefix}-staging"
        generate_landing_zone(str(staging), days=4, users=12, seed=5 + n, layout=LAYOUTS[prefix])
        staged[prefix] = _day_folders(staging)
        (data[prefix] / "landing").mkdir(parents=True)
    storages = {p: Storage(str(data[p])) for p in PREFIXES}
    home.mkdir()
    shutil.copy(PROJECT / "dagster.yaml", home / "dagster.yaml")
    sensors = tuple(f"{p}_{s}" for p in PREFIXES for s in ("landing_sensor", "late_data_sensor"))
    command = [str(bin_dir / "dg"), "dev", "--use-active-venv"]
    with (
        DagsterDev(home, env, command, tmp_path / "dagster-dev.log", cwd=root, sensors=sensors) as dev,
        dg.DagsterInstance.from_config(str(home)) as instance,
    ):
        for name in sensors:
            dev.start_sensor(name)
        for prefix in PREFIXES:
            _drop(staged[prefix], data[prefix], days=2)
            dev.wait_until_settled(storages[prefix], timeout=TIMEOUT)
        for prefix in PREFIXES:
            _drop(staged[prefix], data[prefix])
        dev.wait_until_settled(list(storages.values()), timeout=TIMEOUT)
        runs = dev.runs()
        materialized = {
            run["runId"]: {
                record.event_log_entry.dagster_event.asset_key.path[0]
                for record in instance.get_records_for_run(
                    run["runId"], of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
                ).records
            }
            for run in runs
        }

    for prefix in PREFIXES:
        assert_tables_match_oracle(Warehouse(spark, storages[prefix]), data[prefix], time_zone=ZONES[prefix])
    # Every run is one instance's: its job, what it materialized and its refresh tag are that instance's.
    by_prefix = {p: [r for r in runs if r["jobName"].startswith(f"{p}_")] for p in PREFIXES}
    assert sum(map(len, by_prefix.values())) == len(runs) and all(by_prefix.values()), runs
    for prefix, own in by_prefix.items():
        for run in own:
            assert materialized[run["runId"]] <= {prefix}, run
            assert tag(run, REFRESH_TAG) in (None, as_uri(str(data[prefix]))), run
        # Every commit to an instance's tables was made while one of its own runs ran.
        windows = [(r["startTime"] - 1, r["endTime"] + 1) for r in own]
        for table in ALL:
            log = DeltaLog(storages[prefix], table)
            for version in log.versions():
                at = log.commit_info(version)["timestamp"] / 1000
                assert any(start <= at <= end for start, end in windows), (prefix, table.name, version, at)

    # The installed command line on the same Dagster instance, told an instance's key prefix, reads that instance's
    # attributes from its defs.yaml (its data root from the environment, its layout and time zone) and finds nothing
    # to do.
    for prefix in PREFIXES:
        args = ["status", "--key-prefix", prefix]
        status = subprocess.run(
            [str(bin_dir / "sessions-assets"), *args],
            cwd=root,
            env={**env, "DAGSTER_HOME": str(home)},
            capture_output=True,
            text=True,
        )
        assert f"as {files[prefix]} declares it" in status.stderr, status
        assert "received days to ingest: none" in status.stdout and "refresh due: no" in status.stdout, status


def _day_folders(staging: Path) -> list[tuple[str, Path]]:
    """The landing folders of a staged landing zone, oldest received day first: (its received day, its path)."""
    found = [(f.day.isoformat(), Path(f.uri.removeprefix("file:"))) for f in Storage(str(staging)).landing_folders()]
    return sorted(found)


def _drop(folders: list[tuple[str, Path]], data_root: Path, days: int | None = None) -> None:
    """Move the first ``days`` received days' folders still staged (all of them: None) into ``data_root``'s
    landing zone, each to its place there."""
    left = [(day, path) for day, path in folders if path.exists()]
    chosen = sorted({day for day, _ in left})[:days]
    for day, path in left:
        if day in chosen:
            target = data_root / "landing" / path.relative_to(_landing(path))
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, target)
    time.sleep(1)


def _landing(path: Path) -> Path:
    return next(p for p in path.parents if p.name == "landing")
