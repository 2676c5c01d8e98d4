"""``SessionsComponent`` in a defs folder, loaded as a ``dg`` project loads it (Dagster's own sandbox): the scaffolded
``defs.yaml`` loads, two instances live side by side with nothing shared, and a mistake in a ``defs.yaml`` stops
the load in one line naming the file and the attribute. No Spark: only the definitions are built."""

from __future__ import annotations

import re

import dagster as dg
import pytest
from dagster.components.testing import create_defs_folder_sandbox

from sessions_assets.component import SessionsComponent, description
from sessions_assets.graph.names import DERIVED, INGESTED, REFRESH_TAG
from sessions_assets.settings import Settings
from sessions_assets.warehouse import layouts
from sessions_assets.warehouse.storage import as_uri

TYPE = "sessions_assets.SessionsComponent"
PLAIN = {"ingest_job", "refresh_job", "process_job", "table_maintenance", "forget_job"}


def _yaml(attributes: dict) -> dict:
    return {"type": TYPE, "attributes": attributes}


def test_the_scaffolded_defs_yaml_names_every_attribute_and_loads_as_the_plain_graph(tmp_path):
    with create_defs_folder_sandbox() as sandbox:
        path = sandbox.scaffold_component(SessionsComponent, defs_path="sessions")
        text = (path / "defs.yaml").read_text()
        for name in ("key_prefix", "spark_remote", "spark_conf", *Settings.model_fields):
            assert f"  # {name}: " in text or f"  {name}: " in text, name
            assert description(name).split()[0] in text
        with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
            assert isinstance(component, SessionsComponent) and component.settings().data_root == "data"
            keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
            assert keys == {*INGESTED, *DERIVED}
            assert {j.name for j in defs.jobs} == PLAIN
            assert set(defs.resources) == {"spark", "pipeline"}
            defs.get_repository_def()  # resolves every job, schedule and sensor


def test_two_instances_load_side_by_side_with_nothing_shared(tmp_path):
    roots = {prefix: tmp_path / prefix for prefix in ("web", "app")}
    with create_defs_folder_sandbox() as sandbox:
        for prefix, root in roots.items():
            params = {"key_prefix": prefix, "data_root": str(root)}
            sandbox.scaffold_component(SessionsComponent, defs_path=prefix, scaffold_params=params)
        with sandbox.build_all_defs() as defs:
            repository = defs.get_repository_def()
            keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
            assert keys == {f"{p}/{a}" for p in roots for a in (*INGESTED, *DERIVED)}
            jobs = {j.name for j in repository.get_all_jobs() if not j.name.startswith("__")}
            assert jobs == {f"{p}_{j}" for p in roots for j in (*PLAIN, "checks_job")}
            sensors = {s.name for s in repository.sensor_defs}
            assert sensors == {
                f"{p}_{s}" for p in roots for s in ("landing_sensor", "late_data_sensor", "forget_sensor")
            }
            schedules = {s.name for s in repository.schedule_defs}
            assert schedules == {f"{p}_{s}" for p in roots for s in ("daily_checks", "weekly_maintenance")}
            checks = defs.resolve_asset_graph().asset_check_keys
            assert checks and all(c.name.startswith(f"{c.asset_key.path[0]}_") for c in checks)
            assert {c.asset_key.path[0] for c in checks} == set(roots)
            # Resources of their own, each instance's settings its own; every step, check and sensor asks for its
            # own instance's.
            assert set(defs.resources) == {f"{p}_{r}" for p in roots for r in ("spark", "pipeline")}
            for prefix, root in roots.items():
                assert defs.resources[f"{prefix}_pipeline"].data_root == str(root)
            own = {p: {f"{p}_spark", f"{p}_pipeline"} for p in roots}
            for assets in defs.resolve_asset_graph().assets_defs:
                [prefix] = {k.path[0] for k in assets.keys} | {c.asset_key.path[0] for c in assets.check_keys}
                assert assets.required_resource_keys - {"io_manager"} == own[prefix], assets.keys
            for job in repository.get_all_jobs():
                prefix = job.name.split("_")[0]
                if prefix in roots:
                    assert all(op.required_resource_keys <= own[prefix] for op in job.graph.node_defs), job.name
                    assert job.tags.get(REFRESH_TAG) in (None, as_uri(str(roots[prefix]))), job.name
            assert all(s.required_resource_keys == {s.name.split("_")[0] + "_pipeline"} for s in repository.sensor_defs)
            # One refresh at a time per instance: each instance's refresh jobs carry a tag value of their own.
            tags = {repository.get_job(f"{p}_process_job").tags[REFRESH_TAG] for p in roots}
            assert len(tags) == 2


@pytest.mark.parametrize(
    "attributes, attribute",
    [
        ({"session_gap_minutes": "often"}, "attributes.session_gap_minutes"),
        ({"lapsing_days": 40}, "attributes.dormant_days"),
        ({"landing_layout": "rudderstack"}, "attributes.landing_layout"),
        ({"start_date": "2024-13-01"}, "attributes.start_date"),
        ({"time_zone": "Asia/Atlantis"}, "attributes.time_zone"),
        ({"channel_rules": "/no/such/rules.json"}, "attributes.channel_rules"),
        ({"key_prefix": "web-1"}, "attributes.key_prefix"),
        ({"data_root": "{{ env.SESSIONS_TEST_UNSET_ROOT }}"}, "attributes.data_root"),
        ({"spark_remote": "sc://spark:15002/;token=hunter2"}, "attributes.spark_remote"),
        ({"spark_conf": {"spark.hadoop.fs.s3a.secret.key": "hunter2"}}, "attributes.spark_conf"),
        ({"key_prefix": "web"}, "attributes.key_prefix"),  # the other instance's
        ({"key_prefix": "app", "data_root": "{web}"}, "attributes.data_root"),  # the other instance's
    ],
    ids=["bad_int", "dormant_below_lapsing", "unknown_layout", "bad_day", "unknown_zone", "missing_rules", "bad_prefix",
         "unset_variable", "token_inline", "credential_in_spark_conf", "clashing_prefix", "shared_data_root"],
)  # fmt: skip
def test_a_bad_attribute_stops_the_load_in_one_line_naming_the_file_and_the_attribute(tmp_path, attributes, attribute):
    web = {"key_prefix": "web", "data_root": str(tmp_path / "web")}
    attributes = {"key_prefix": "app", "data_root": str(tmp_path / "app"), **attributes}
    attributes["data_root"] = attributes["data_root"].replace("{web}", web["data_root"])
    with create_defs_folder_sandbox() as sandbox:
        sandbox.scaffold_component(SessionsComponent, defs_path="web", scaffold_params=web)
        path = sandbox.scaffold_component(SessionsComponent, defs_path="app", defs_yaml_contents=_yaml(attributes))
        with pytest.raises(Exception) as stopped, sandbox.build_all_defs():
            pass
    said = str(stopped.value.__cause__)
    assert len(said.splitlines()) == 1 and said.startswith(f"{path / 'defs.yaml'}: {attribute}: "), said
    assert "hunter2" not in said  # no credential repeated


def test_an_unknown_attribute_is_named_with_its_file(tmp_path):
    with create_defs_folder_sandbox() as sandbox:
        contents = _yaml({"data_root": str(tmp_path), "session_gap": 45})
        path = sandbox.scaffold_component(SessionsComponent, defs_path="sessions", defs_yaml_contents=contents)
        with pytest.raises(Exception) as stopped, sandbox.build_all_defs():
            pass
    said = str(stopped.value.__cause__)
    assert re.search(rf"attributes\.session_gap at {re.escape(str(path / 'defs.yaml'))}:\d+", said), said


def test_a_variable_fills_an_attribute_left_out_and_a_bad_one_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("SESSIONS_SESSION_GAP_MINUTES", "45")
    monkeypatch.setenv("SPARK_SERVER_OF_WEB", "sc://spark:15002")
    attributes = {"data_root": str(tmp_path), "spark_remote": "{{ env.SPARK_SERVER_OF_WEB }}"}
    with create_defs_folder_sandbox() as sandbox:
        path = sandbox.scaffold_component(SessionsComponent, defs_path="sessions", defs_yaml_contents=_yaml(attributes))
        with sandbox.load_component_and_build_defs(defs_path=path) as (_, defs):
            assert defs.resources["pipeline"].session_gap_minutes == 45
            # The URL reaches the resource as the variable (the UI shows its name, not its value).
            assert isinstance(defs.resources["spark"].remote, dg.EnvVar)
            assert defs.resources["spark"].remote.env_var_name == "SPARK_SERVER_OF_WEB"
        monkeypatch.setenv("SESSIONS_SESSION_GAP_MINUTES", "-1")
        with pytest.raises(Exception) as stopped, sandbox.build_all_defs():
            pass
    said = str(stopped.value.__cause__)
    assert said == f"{path / 'defs.yaml'}: SESSIONS_SESSION_GAP_MINUTES: Input should be greater than 0", said


def test_the_settings_and_the_sample_writer_take_every_layout_the_warehouse_reads(capsys):
    from sessions_assets.cli.main import main

    assert Settings.model_fields["landing_layout"].default in layouts.CHOICES
    assert all(Settings(landing_layout=name).landing_layout == name for name in layouts.CHOICES)
    with pytest.raises(ValueError, match="takes auto, received_date, segment"):
        Settings(landing_layout="hourly")
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert "{received_date,segment}" in capsys.readouterr().out
