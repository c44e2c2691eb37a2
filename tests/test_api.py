"""The data API on the bundled demo: listing endpoints, error shape, path safety."""

from __future__ import annotations

import os

import pytest


def test_runs_lists_demo_runs_newest_first(demo_client, demo_expected):
    runs = demo_client.get("/data/plugin/profile/runs").json()
    profile_runs = sorted(
        (f"{p['run']}/{p['session']}" for p in demo_expected["programs"].values()), reverse=True
    )
    assert [r for r in runs if r in profile_runs] == profile_runs
    assert "dumps/mlp" in runs
    assert runs == sorted(runs, reverse=True)


def test_hosts_and_module_list_come_from_the_profile(demo_client, demo_expected):
    for program in demo_expected["programs"].values():
        run = f"{program['run']}/{program['session']}"
        assert demo_client.get("/data/plugin/profile/hosts", params={"run": run}).json() == [{"hostname": program["host"]}]
        res = demo_client.get("/data/plugin/profile/module_list", params={"run": run})
        assert res.status_code == 200 and res.headers["content-type"].startswith("text/plain")
        expected = sorted(m["name"] for m in program["metadata_modules"])
        assert res.text.split(",") == expected
        assert program["profile_module_name"] in expected


def test_dump_run_lists_its_module_under_the_profile_name(demo_client, demo_expected):
    mlp = demo_expected["programs"]["mlp"]
    assert demo_client.get("/data/plugin/profile/module_list", params={"run": "dumps/mlp"}).text == mlp["profile_module_name"]
    assert demo_client.get("/data/plugin/profile/hosts", params={"run": "dumps/mlp"}).json() == []


def test_version_and_config(demo_client):
    from profscope import __version__

    res = demo_client.get("/data/plugin/profile/version")
    assert res.text == "2.24.2" and res.headers["x-profscope-version"] == __version__
    config = demo_client.get("/data/plugin/profile/config").json()
    assert set(config) == {"enableTabNameLabel", "hideCaptureProfileButton", "srcPathPrefix"}


def _error(res, status):
    assert res.status_code == status, res.text
    assert res.headers["content-type"] == "application/json"
    body = res.json()
    assert body["ok"] is False and body["status"] == status and body["error"]
    return body


@pytest.mark.parametrize("endpoint", ["run_tools", "hosts", "module_list", "data"])
def test_unknown_or_escaping_run_is_a_json_404(demo_client, endpoint):
    for run in ["../../etc", "/etc", "nope/2026", "..", "mlp/../../../etc/passwd"]:
        body = _error(demo_client.get(f"/data/plugin/profile/{endpoint}", params={"run": run, "tag": "memory_viewer"}), 404)
        assert "no run named" in body["error"]


def test_missing_run_parameter_is_a_400(demo_client):
    assert "missing parameter 'run'" in _error(demo_client.get("/data/plugin/profile/hosts"), 400)["error"]


def test_data_is_a_clear_404_for_tools_not_built_yet(demo_client, demo_expected):
    run = "mlp/" + demo_expected["programs"]["mlp"]["session"]
    # (the trace viewer, the last tool "still to come" here, is served now: test_trace_viewer.py)
    assert demo_client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@", "host": "demo-host"}).status_code == 200
    body = _error(demo_client.get("/data/plugin/profile/data", params={"run": run, "tag": "no_such_tool"}), 404)
    assert "unknown tool" in body["error"]
    _error(demo_client.get("/data/plugin/profile/data", params={"run": run}), 404)
    # Only tools that can answer are offered to XProf clients.
    assert demo_client.get("/data/plugin/profile/run_tools", params={"run": run}).json()[:5] == [
        "overview_page", "trace_viewer@", "op_profile", "memory_profile", "memory_viewer"]


@pytest.mark.parametrize(
    "param, value, status",
    [
        ("session_path", "/etc", 400),
        ("session_path", "../..", 400),
        ("session_path", "gs://somebody-else/logs", 400),
        ("run_path", "/", 400),
        ("run_path", "../../..", 400),
    ],
)
def test_session_and_run_paths_stay_inside_the_logdir(demo_client, param, value, status):
    _error(demo_client.get("/data/plugin/profile/runs", params={param: value}), status)
    _error(demo_client.get("/data/plugin/profile/hosts", params={"run": "x", param: value}), status)


def test_session_path_inside_the_logdir_works(demo_client, demo_logdir, demo_expected):
    mlp = demo_expected["programs"]["mlp"]
    session = f"mlp/plugins/profile/{mlp['session']}"
    assert demo_client.get("/data/plugin/profile/runs", params={"session_path": session}).json() == [mlp["session"]]
    absolute = str(demo_logdir / session)
    hosts = demo_client.get("/data/plugin/profile/hosts", params={"run": mlp["session"], "session_path": absolute})
    assert hosts.json() == [{"hostname": "demo-host"}]
    runs = demo_client.get("/data/plugin/profile/runs", params={"run_path": "mlp/plugins/profile"}).json()
    assert runs == [mlp["session"]]


def test_symlink_out_of_the_root_reads_nothing(make_client, demo_copy, tmp_path):
    secret = tmp_path / "secret"
    (secret / "plugins" / "profile" / "s").mkdir(parents=True)
    (secret / "plugins" / "profile" / "s" / "evil.xplane.pb").write_bytes(b"\x0a\x00")
    os.symlink(secret, demo_copy / "linked")  # a folder link out of the root
    session = next((demo_copy / "mlp" / "plugins" / "profile").iterdir())
    os.symlink(tmp_path / "secret" / "plugins" / "profile" / "s" / "evil.xplane.pb", session / "evil.xplane.pb")
    client = make_client(demo_copy)
    runs = client.get("/data/plugin/profile/runs").json()
    assert not any(r.startswith("linked") for r in runs)
    run = f"mlp/{session.name}"
    assert client.get("/data/plugin/profile/hosts", params={"run": run}).json() == [{"hostname": "demo-host"}]
    _error(client.get("/data/plugin/profile/runs", params={"session_path": "linked/plugins/profile/s"}), 400)


def test_corrupt_profile_gets_a_4xx_naming_the_file(make_client, demo_copy):
    session = next((demo_copy / "mlp" / "plugins" / "profile").iterdir())
    xplane = session / "demo-host.xplane.pb"
    data = xplane.read_bytes()
    xplane.write_bytes(data[: len(data) // 3])  # truncated mid-plane
    client = make_client(demo_copy)
    body = _error(client.get("/data/plugin/profile/module_list", params={"run": f"mlp/{session.name}"}), 422)
    assert "truncated" in body["error"] and body["file"].endswith("demo-host.xplane.pb")
    xplane.write_bytes(b"this is not a protobuf at all")
    client = make_client(demo_copy)
    body = _error(client.get("/data/plugin/profile/module_list", params={"run": f"mlp/{session.name}"}), 422)
    assert "demo-host.xplane.pb" in body["error"]
    # Other runs are undisturbed, and the catalog never opens files (it may list thousands).
    assert client.get("/data/plugin/profile/module_list", params={"run": "dumps/mlp"}).status_code == 200
    catalog = client.get("/api/runs")
    assert catalog.status_code == 200 and f"mlp/{session.name}" in [r["name"] for r in catalog.json()["runs"]]


def test_unknown_route_uses_the_same_error_shape(demo_client):
    _error(demo_client.get("/nope"), 404)
    _error(demo_client.get("/static/..%2Fapp.py"), 404)
    _error(demo_client.get("/static/missing.js"), 404)


def test_api_catalog_and_run_details(demo_client, demo_expected):
    catalog = demo_client.get("/api/runs").json()
    kinds = {r["name"]: r["kind"] for r in catalog["runs"]}
    assert kinds["dumps/mlp"] == "xla_dump"
    run = "mlp/" + demo_expected["programs"]["mlp"]["session"]
    assert kinds[run] == "profile"
    details = demo_client.get("/api/run", params={"run": run}).json()
    assert {f["kind"] for f in details["files"]} == {"xplane", "chrome_trace"}
    assert demo_expected["programs"]["mlp"]["profile_module_name"] in details["modules"]
    assert [t["name"] for t in details["tools"]] == ["summary", "overview_page", "trace_viewer@", "op_profile",
                                                     "memory_profile", "memory_viewer", "hlo_stats", "steps_ops",
                                                     "oom_risk"]


def test_logdir_is_never_written(make_client, demo_copy):
    def snapshot():
        return sorted((str(p.relative_to(demo_copy)), p.stat().st_size, p.stat().st_mtime_ns) for p in demo_copy.rglob("*"))

    before = snapshot()
    client = make_client(demo_copy)
    for run in client.get("/data/plugin/profile/runs").json():
        for endpoint in ("run_tools", "hosts", "module_list", "data"):
            client.get(f"/data/plugin/profile/{endpoint}", params={"run": run, "tag": "memory_viewer"})
        client.get("/api/run", params={"run": run})
    assert snapshot() == before
