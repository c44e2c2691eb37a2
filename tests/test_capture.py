"""Capturing from running jobs (app/capture.py, server/capture_api.py, storage/profiler_client.py)
against real JAX jobs: ``profscope.testing.profiler_job`` starts ``jax.profiler.start_server``
in a subprocess running a jitted training step, and every capture here talks gRPC to it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from profscope.app.queries import XprofTraceQuery
from profscope.app.capture import CaptureDir, CaptureSettings, TargetPolicy, parse_duration, parse_targets
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.errors import BadRequest, Forbidden, ProfscopeError
from profscope.formats.protos import xplane_pb2
from profscope.server import create_app
from profscope.storage import LogDir
from profscope.storage.mounted import MountedLogDir
from profscope.storage.profiler_client import ProfilerClient, TargetError
from profscope.testing.profiler_job import free_port, profiler_job


@pytest.fixture(scope="module")
def job():
    with profiler_job() as address:
        yield address


@pytest.fixture(scope="module")
def job2():
    with profiler_job() as address:
        yield address


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file below ``root`` with its size and mtime: what 'nothing changed' compares."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            st = p.stat()
            out[p.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def logdir(demo_logdir, tmp_path) -> Path:
    """A copy of the demo log directory, so a test can compare it file by file."""
    import shutil

    dst = tmp_path / "logdir"
    shutil.copytree(demo_logdir, dst)
    return dst


@pytest.fixture
def capture_ws(logdir, tmp_path):
    ws = Workspace(LogDir(str(logdir), listing_ttl=60), DiskCache(tmp_path / "cache"),
                   capture_dir=tmp_path / "captures")
    return ws


@pytest.fixture
def client(capture_ws) -> TestClient:
    return TestClient(create_app(capture_ws))


def _wait(client: TestClient, job_id: str, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = client.get(f"/api/capture/job/{job_id}").json()
        if state["done"]:
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.1)


def _names(ws: Workspace, run_name: str, host: str) -> set[str]:
    """Event names of one host's trace, through the trace viewer's own answer."""
    run = ws.run(run_name)
    payload = json.loads(b"".join(ws.trace_xprof_stream(run, XprofTraceQuery(host=host, resolution=0))))
    return {e.get("name") for e in payload["traceEvents"]}


def _recording_start_ns(xspace: bytes) -> int:
    """When the job's session began (wall clock): the 'Task Environment' plane's
    profile_start_time stat (the lines' own timestamps are relative to it)."""
    space = xplane_pb2.XSpace.FromString(xspace)
    plane = next(p for p in space.planes if p.name == "Task Environment")
    names = {k: m.name for k, m in plane.stat_metadata.items()}
    return next(st.uint64_value or st.int64_value for st in plane.stats if names[st.metadata_id] == "profile_start_time")


# -- one capture, as the page makes it -----------------------------------------------------


def test_a_capture_becomes_a_run_with_the_jobs_ops_and_module(job, client, capture_ws, logdir, tmp_path):
    before = _tree(logdir)
    stages = []
    answer = client.post("/api/capture", json={"targets": job, "durationMs": 1000})
    assert answer.status_code == 202, answer.text
    started = answer.json()
    assert started["stage"] in ("probing", "recording") and not started["done"]
    deadline = time.monotonic() + 90
    while not (state := client.get(f"/api/capture/job/{started['id']}").json())["done"]:
        if not stages or stages[-1] != state["stage"]:
            stages.append(state["stage"])
        if state["stage"] == "recording":
            assert 0 <= state["remainingS"] <= 1.0
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert state["stage"] == "saved", state
    assert "recording" in stages
    host = job.replace(":", "_")
    assert state["hosts"] == [{"address": job, "state": "saved", "error": None, "code": None,
                               "bytes": state["hosts"][0]["bytes"],
                               "file": f"captures/plugins/profile/{state['session']}/{host}.xplane.pb"}]
    assert state["hosts"][0]["bytes"] > 10_000

    # listed at once (not after the listing's 60 s), with the job's host
    runs = {r["name"]: r for r in client.get("/api/runs").json()["runs"]}
    run = runs[state["run"]]
    assert run["hosts"] == [host] and run["kind"] == "profile"
    # the trace shows the job's loop; the memory viewer its jitted module
    names = _names(capture_ws, state["run"], host)
    assert "train_loop_step" in names
    assert any("train_step" in (n or "") for n in names)
    detail = client.get("/api/run", params={"run": state["run"]}).json()
    assert any(m.startswith("jit_train_step") for m in detail["modules"]), detail["modules"]
    module = next(m for m in detail["modules"] if m.startswith("jit_train_step"))
    mv = client.get("/data/plugin/profile/data", params={"run": state["run"], "tag": "memory_viewer",
                                                          "host": host, "module_name": module})
    assert mv.status_code == 200 and json.loads(mv.content)["moduleName"].startswith("jit_train_step")

    # the file is a whole XSpace, written atomically (no temporary left)
    folder = tmp_path / "captures" / "plugins" / "profile" / state["session"]
    assert sorted(p.name for p in folder.iterdir()) == [f"{host}.xplane.pb"]
    space = xplane_pb2.XSpace.FromString((folder / f"{host}.xplane.pb").read_bytes())
    assert "/host:metadata" in [p.name for p in space.planes]
    # nothing was written into the log directory
    assert _tree(logdir) == before


def test_two_live_targets_and_a_dead_one(job, job2, client, capture_ws):
    dead = f"localhost:{free_port()}"
    t0 = time.monotonic()
    started = client.post("/api/capture", json={"targets": f"{job},{dead},{job2}", "durationMs": 800}).json()
    state = _wait(client, started["id"])
    assert state["stage"] == "saved"
    by = {h["address"]: h for h in state["hosts"]}
    assert by[job]["state"] == by[job2]["state"] == "saved"
    assert by[dead]["state"] == "failed" and by[dead]["code"] == "UNAVAILABLE"
    assert by[dead]["error"] == ("no profiler server answers (connection refused); is the job running, and did it "
                                 f"call jax.profiler.start_server({dead.rsplit(':', 1)[1]})?")
    assert f"{dead} failed" in state["summary"]
    run = capture_ws.run(state["run"])
    assert sorted(run.hosts) == sorted([job.replace(":", "_"), job2.replace(":", "_")])
    assert time.monotonic() - t0 < 120  # a backstop: the dead host must not hold the others up for good
    # both hosts were asked to start at one instant (start_timestamp_ns): their sessions
    # began within milliseconds of each other
    starts = [_recording_start_ns(capture_ws.logdir.read_bytes(h["file"])) for h in (by[job], by[job2])]
    assert abs(starts[0] - starts[1]) < 20e6, starts


def test_stop_early_keeps_what_was_recorded(job, client, capture_ws):
    started = client.post("/api/capture", json={"targets": job, "durationMs": 20000}).json()
    while client.get(f"/api/capture/job/{started['id']}").json()["stage"] != "recording":
        time.sleep(0.05)
    time.sleep(1.0)
    # while it records, the run list shows no half-made capture (it is staged elsewhere)
    capture_ws.logdir.refresh("captures")
    assert [r.name for r in capture_ws.runs() if r.name.startswith("captures/")] == []
    t0 = time.monotonic()
    stopped = client.post(f"/api/capture/job/{started['id']}/stop").json()
    assert stopped["stopped"] is True
    state = _wait(client, started["id"])
    # before the 20 s asked for were over (a busy machine may take a few seconds to save)
    assert time.monotonic() - t0 < 18, "Terminate did not end the 20 s recording"
    assert state["stage"] == "saved" and state["stopped"] and "(stopped early)" in state["summary"]
    assert state["hosts"][0]["bytes"] > 10_000


def test_a_second_capture_of_a_busy_target_is_refused(job, client):
    started = client.post("/api/capture", json={"targets": job, "durationMs": 2500}).json()
    # profscope's own check: one capture per target at a time
    second = client.post("/api/capture", json={"targets": job, "durationMs": 500})
    assert second.status_code == 409
    assert second.json()["error"] == f"{job} is already being captured (capture {started['id']}); wait for it to finish or stop it"
    # another client of the same job (a second profscope, XProf): the job's own refusal
    while client.get(f"/api/capture/job/{started['id']}").json()["stage"] != "recording":
        time.sleep(0.05)
    time.sleep(0.3)
    with ProfilerClient(job) as other, pytest.raises(TargetError) as err:
        other.profile(CaptureSettings(duration_ms=300))
    assert err.value.code == "INTERNAL" and "already recording a profile" in err.value.message
    assert _wait(client, started["id"])["stage"] == "saved"


def test_continuous_mode_two_snapshots(job, client, capture_ws):
    session = client.post("/api/capture/continuous", json={"targets": job})
    assert session.status_code == 201, session.text
    sid = session.json()["id"]
    assert session.json()["state"] == "running"
    runs = []
    for _ in range(2):
        time.sleep(1.0)
        snap = client.post(f"/api/capture/continuous/{sid}/snapshot").json()
        assert snap["stage"] == "saved", snap
        assert snap["hosts"][0]["bytes"] > 10_000
        runs.append(snap["run"])
    assert len(set(runs)) == 2
    # a one-shot capture of a target in continuous mode is refused while it runs
    assert client.post("/api/capture", json={"targets": job, "durationMs": 300}).status_code == 409
    stopped = client.post(f"/api/capture/continuous/{sid}/stop").json()
    assert stopped["state"] == "stopped" and [s["run"] for s in stopped["snapshots"]] == runs
    assert client.post(f"/api/capture/continuous/{sid}/snapshot").status_code == 409
    listed = {r["name"] for r in client.get("/api/runs").json()["runs"]}
    assert set(runs) <= listed
    for run in runs:
        assert "train_loop_step" in _names(capture_ws, run, job.replace(":", "_"))


def test_xprof_route_captures_and_reports_failures(job, client, tmp_path):
    assert client.get("/data/plugin/profile/config").json()["hideCaptureProfileButton"] is False
    ok = client.get("/data/plugin/profile/capture_profile",
                    params={"service_addr": job, "duration": "700", "num_retry": "0", "host_tracer_level": "2",
                            "device_tracer_level": "1", "python_tracer_level": "0", "delay": "0",
                            "is_tpu_name": "false", "worker_list": ""})
    assert ok.status_code == 200
    body = ok.json()
    assert body["result"].startswith("Captured 1 host(s) into run captures/") and body["run"] in body["result"]
    assert body["run"] in client.get("/data/plugin/profile/runs").json()
    dead = client.get("/data/plugin/profile/capture_profile", params={"service_addr": f"localhost:{free_port()}"})
    assert dead.status_code == 200 and "no profiler server answers" in dead.json()["error"]
    tpu = client.get("/data/plugin/profile/capture_profile", params={"service_addr": "my-tpu", "is_tpu_name": "true"})
    assert tpu.status_code == 400 and "TPU names" in tpu.json()["error"]


def test_nothing_is_written_outside_the_capture_folder(job, logdir, tmp_path):
    """A capture through the whole CLI: the log directory, the cache's own entries and
    the working directory are as before; only the capture folder gained files."""
    cache = tmp_path / "cache"
    out = tmp_path / "mine"
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    before = {p: _tree(p) for p in (logdir, workdir)}
    res = subprocess.run([sys.executable, "-m", "profscope", "capture", job, "--duration", "500ms", "--dir", str(out),
                          "--cache-dir", str(cache)], capture_output=True, text=True, timeout=120, cwd=workdir)
    assert res.returncode == 0, res.stderr
    folder = Path(res.stdout.strip())
    assert folder.parent == out / "plugins" / "profile"
    assert [p.name for p in folder.iterdir()] == [f"{job.replace(':', '_')}.xplane.pb"]
    assert f"{job}: saved " in res.stderr
    assert set(_tree(out)) == {f"plugins/profile/{folder.name}/{job.replace(':', '_')}.xplane.pb"}
    assert {p: _tree(p) for p in (logdir, workdir)} == before
    assert not cache.exists()  # --dir given: the cache folder is not even made


def test_cli_exit_status_and_messages(job, tmp_path):
    dead = f"localhost:{free_port()}"
    run = lambda *a: subprocess.run([sys.executable, "-m", "profscope", "capture", *a, "--dir", str(tmp_path / "c")],
                                    capture_output=True, text=True, timeout=120)
    res = run(dead, "--duration", "200ms")
    assert res.returncode == 2 and res.stdout == ""
    assert f"{dead}: FAILED: no profiler server answers" in res.stderr
    assert "profscope: error: nothing was captured" in res.stderr
    res = run(f"{job},{dead}", "--duration", "300ms")
    assert res.returncode == 1 and Path(res.stdout.strip()).is_dir()
    res = run("no-port-here")
    assert res.returncode == 2 and "is not a profiler address: give HOST:PORT" in res.stderr
    res = run(job, "--duration", "2 weeks")
    assert res.returncode == 2 and "is not a duration" in res.stderr
    res = run(job, "--duration", "300ms", "--snapshots", "2", "--every", "500ms")
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.split()) == 2 and res.stderr.count("snapshot ") == 2


# -- the rules: where files go, whom the server dials, bad requests ------------------------


def test_only_loopback_targets_unless_allowed(client):
    for target in ("10.1.2.3:9999", "example.com:9999", "[2001:db8::1]:9999"):
        res = client.post("/api/capture", json={"targets": f"localhost:1,{target}", "durationMs": 100})
        assert res.status_code == 403, res.text
        assert f"refused to capture from {target}" in res.json()["error"] and "--capture-allow" in res.json()["error"]
        assert client.get("/data/plugin/profile/capture_profile", params={"service_addr": target}).status_code == 403
    # names that match no name pattern are resolved (10.0.* is an address pattern): here
    # by a resolver that knows none of them, so nothing goes to the network
    policy = TargetPolicy(["10.0.*", "*.internal", "gpu7:8466"], resolve=lambda host: [])
    for ok in ("127.0.0.1:1", "[::1]:1", "localhost:1", "10.0.3.4:9999", "w-3.internal:9999", "gpu7:8466"):
        policy.check(ok)
    for refused in ("10.1.0.1:1", "internal:1", "gpu7:9999", "127.example.com:1"):
        with pytest.raises(Forbidden):
            policy.check(refused)


def test_bad_requests_are_4xx_naming_the_problem(client):
    cases = [
        ({"targets": ""}, 400, "no profiler address given"),
        ({}, 400, "missing field 'targets'"),
        ({"targets": "localhost"}, 400, "is not a profiler address"),
        ({"targets": "localhost:99999"}, 400, "is not a profiler address"),
        ({"targets": "localhost:1", "durationMs": "soon"}, 400, "is not a duration"),
        ({"targets": "localhost:1", "durationMs": 7_200_000}, 400, "over an hour"),
        ({"targets": "localhost:1", "hostTracerLevel": 9}, 400, "host_tracer_level must be a whole number from 0 to 3"),
        ({"targets": "localhost:1", "pythonTracerLevel": True}, 400, "pythonTracerLevel must be a whole number"),
        ({"targets": "localhost:1", "bogus": 1}, 400, "unknown field(s) bogus"),
        ({"targets": [1, 2]}, 400, "targets must be HOST:PORT strings"),
    ]
    for body, status, words in cases:
        res = client.post("/api/capture", json=body)
        assert res.status_code == status and words in res.json()["error"], (body, res.text)
    res = client.post("/api/capture", content=b"{not json", headers={"content-type": "application/json"})
    assert res.status_code == 400 and "not JSON" in res.json()["error"]
    assert client.get("/api/capture/job/nope").status_code == 404
    assert client.post("/api/capture/continuous/nope/snapshot").status_code == 404
    res = client.get("/data/plugin/profile/capture_profile", params={"service_addr": "localhost:1", "duration": "x"})
    assert res.status_code == 400 and "duration must be a whole number" in res.json()["error"]


def test_capturing_off(demo_logdir, tmp_path):
    ws = Workspace(LogDir(str(demo_logdir)), DiskCache(tmp_path / "cache"))
    client = TestClient(create_app(ws))
    assert client.get("/data/plugin/profile/config").json()["hideCaptureProfileButton"] is True
    assert client.get("/api/capture").json() == {"enabled": False, "jobs": [], "continuous": []}
    res = client.post("/api/capture", json={"targets": "localhost:1"})
    assert res.status_code == 404 and "capturing is off" in res.json()["error"]


def test_the_capture_folder_is_never_inside_the_log_directory(logdir, tmp_path):
    with pytest.raises(BadRequest, match="inside the log directory"):
        Workspace(LogDir(str(logdir)), DiskCache(tmp_path / "cache"), capture_dir=logdir / "captures")


def test_a_log_directory_folder_named_captures_stays_visible(logdir, tmp_path):
    (logdir / "captures" / "plugins" / "profile" / "mine").mkdir(parents=True)
    src = next(logdir.glob("mlp/plugins/profile/*/*.xplane.pb"))
    (logdir / "captures" / "plugins" / "profile" / "mine" / src.name).write_bytes(src.read_bytes())
    ws = Workspace(LogDir(str(logdir)), DiskCache(tmp_path / "cache"), capture_dir=tmp_path / "cap")
    assert ws.capture.mount == "captures-profscope"
    assert "captures/mine" in {r.name for r in ws.runs()}


def test_mounted_paths_stay_inside_their_roots(logdir, tmp_path):
    cap = CaptureDir(tmp_path / "cap")
    staging = cap.stage("job1")
    cap.write(staging, "localhost:1", b"")
    mounted = MountedLogDir(LogDir(str(tmp_path / "cap")), {})
    assert mounted.files() == {".staging/job1/localhost_1.xplane.pb": mounted.files()[".staging/job1/localhost_1.xplane.pb"]}
    assert Workspace(mounted.base, DiskCache(tmp_path / "c2")).runs() == []  # staged: not a run yet
    assert cap.publish(staging, "s") == "s"
    mounted = MountedLogDir(LogDir(str(logdir)), {"captures": cap.logdir})
    assert "captures/plugins/profile/s/localhost_1.xplane.pb" in mounted.files()
    assert mounted.display_path("captures/plugins/profile/s/localhost_1.xplane.pb") == \
        str(tmp_path / "cap") + "/plugins/profile/s/localhost_1.xplane.pb"
    for bad in ("captures/../../etc/passwd", "/etc/passwd", "captures/..", "../x"):
        with pytest.raises(ProfscopeError):
            mounted.open(bad)
    # a session name the clock gives twice in one second gets a suffix
    again = cap.stage("job2")
    cap.write(again, "localhost:1", b"x")
    assert cap.publish(again, "s") == "s_2"
    assert not (tmp_path / "cap" / ".staging" / "job2").exists()


def test_parsers():
    assert parse_targets(" localhost:1, grpc://h:2 ;[::1]:3,localhost:1") == ["localhost:1", "h:2", "[::1]:3"]
    assert [parse_duration(x) for x in ("2s", "1500ms", "1m", "2000", 250, "0.5s")] == [2000, 1500, 60000, 2000, 250, 500]
    assert CaptureSettings(duration_ms=1000).request(start_timestamp_ns=5, session_id="s").opts.duration_ms == 1000
    req = CaptureSettings(duration_ms=1000, host_tracer_level=3).request()
    assert req.emit_xspace and req.opts.version == 1 and req.opts.enable_hlo_proto and req.opts.host_tracer_level == 3


class _RecordingProfilerServer:
    """A gRPC server on a free loopback port that keeps every call's raw request bytes
    and answers each with an empty message: what a capture puts on the wire, which a real
    job's profiler server does not show. Empty bytes parse as every answer message (an
    empty ProfileResponse: an XSpace of 0 bytes, an empty run)."""

    def __init__(self):
        import grpc
        from concurrent.futures import ThreadPoolExecutor

        self.calls: list[tuple[str, bytes]] = []
        calls = self.calls

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                method = details.method
                return grpc.unary_unary_rpc_method_handler(lambda request, context: calls.append((method, request)) or b"")

        self.server = grpc.server(ThreadPoolExecutor(max_workers=4), handlers=[Handler()])
        self.address = f"localhost:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def profile_requests(self):
        from profscope.storage.protos import profiler_service_pb2 as pb

        return [pb.ProfileRequest.FromString(raw) for method, raw in self.calls if method.endswith("/Profile")]

    def close(self):
        self.server.stop(grace=None)


def test_the_request_asks_for_dataset_ops_as_xprofs_capture_does(tmp_path):
    """XProf's capture (profile_plugin.py capture_route_impl) passes include_dataset_ops=True
    to _pywrap_profiler_plugin.trace, which sets ProfileOptions.include_dataset_ops on the
    request; docs/capture.md says the request mirrors XProf's. The bytes `profscope capture`
    sends, read back with the messages whose field numbers test_protos.py checks against
    jaxlib's own descriptors."""
    server = _RecordingProfilerServer()
    try:
        res = subprocess.run([sys.executable, "-m", "profscope", "capture", server.address, "--duration", "300ms",
                              "--dir", str(tmp_path / "c")], capture_output=True, text=True, timeout=120)
        requests = server.profile_requests()
    finally:
        server.close()
    assert len(requests) == 1, (server.calls, res.stderr)
    opts = requests[0].opts
    assert opts.include_dataset_ops, opts
    assert (opts.version, opts.host_tracer_level, opts.device_tracer_level, opts.python_tracer_level,
            opts.duration_ms, requests[0].emit_xspace) == (1, 2, 1, 0, 300, True)


def test_a_duration_over_the_hour_names_the_limit(client, tmp_path):
    """`--duration 2h` (and the API's duration "2h") is refused for being over the one-hour
    limit, not as "not a duration"; 1h is the longest accepted."""
    assert parse_duration("1h") == parse_duration("60m") == 3_600_000
    res = subprocess.run([sys.executable, "-m", "profscope", "capture", "localhost:1", "--duration", "2h",
                          "--dir", str(tmp_path / "c")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--duration '2h' is over an hour, the limit of one capture" in res.stderr, res.stderr
    assert "not a duration" not in res.stderr
    for body in ({"targets": "localhost:1", "duration": "2h"}, {"targets": "localhost:1", "durationMs": "2 h"}):
        answer = client.post("/api/capture", json=body)
        assert answer.status_code == 400 and "is over an hour, the limit of one capture (3,600,000 ms)" in answer.json()["error"], answer.text


def test_a_big_answer_passes_grpcs_default_4_mib_limit(job):
    """10 s of the job with every Python call traced is far over 4 MiB: without the
    raised limit the capture fails after recording (RESOURCE_EXHAUSTED)."""
    with ProfilerClient(job) as c:
        data = c.profile(CaptureSettings(duration_ms=3000, python_tracer_level=1, host_tracer_level=3))
    assert len(data) > 4 << 20, len(data)
    assert xplane_pb2.XSpace.FromString(data).planes


def test_a_hung_stage_thread_never_outlives_its_job(job, client):
    """Each job's stage follower ends with the job (no thread per capture left behind)."""
    before = threading.active_count()
    for _ in range(2):
        _wait(client, client.post("/api/capture", json={"targets": job, "durationMs": 200}).json()["id"])
    time.sleep(0.3)
    assert threading.active_count() <= before + 1


def test_serve_captures_only_with_the_guards_protections(tmp_path):
    """Bound beyond loopback with no token, anyone who reaches the port could make the
    server dial its own loopback ports: capturing is then off, and the page says so."""
    import urllib.request

    from profscope.testing.local_server import profscope_server

    with profscope_server("serve", "--demo", "--port", "0", "--host", "0.0.0.0", "--no-token",
                          "--cache-dir", str(tmp_path / "c")) as (url, lines):
        assert any("capturing is off" in line for line in lines), lines
        config = json.load(urllib.request.urlopen(url + "data/plugin/profile/config", timeout=30))
        assert config["hideCaptureProfileButton"] is True
    with profscope_server("serve", "--demo", "--port", "0", "--cache-dir", str(tmp_path / "c")) as (url, lines):
        assert any(line.startswith(f"captures: {tmp_path / 'c' / 'captures'} (from loopback only") for line in lines), lines
        state = json.load(urllib.request.urlopen(url + "api/capture", timeout=30))
        assert state["enabled"] and state["captureDir"] == str(tmp_path / "c" / "captures")


def test_a_zero_length_capture_is_an_empty_run_every_tool_answers(job, client, capture_ws):
    """duration 0 is allowed: the job answers an XSpace with its planes and no events, or
    only those in flight at that instant (PjRt's "Wait for usage holds" was caught once
    while both cores were busy), and every tool answers."""
    state = _wait(client, client.post("/api/capture", json={"targets": job, "durationMs": 0}).json()["id"])
    assert state["stage"] == "saved"
    host = job.replace(":", "_")
    events = _names(capture_ws, state["run"], host) - {"process_name", "thread_name", "process_sort_index",
                                                         "thread_sort_index", None}
    for tag in ("memory_profile", "oom_risk"):
        res = client.get("/data/plugin/profile/data", params={"run": state["run"], "tag": tag, "host": host})
        assert res.status_code == 200, (tag, res.text)
    window = client.get("/api/trace/window", params={"run": state["run"], "host": host})
    assert window.status_code == 200
    start, end = window.json()["fullTimespan"]
    if not events:
        assert (start, end) == (0.0, 0.0)
    assert end - start < 500, (start, end, events)  # an instant, not a default-length recording (ms)


def test_a_delay_waits_before_recording(job, client, capture_ws):
    """The delay is a start time in the future (ProfileOptions.start_timestamp_ns): the
    job records nothing before it, and the job's stage says how long is left to wait."""
    asked_ns = time.time_ns()
    started = client.post("/api/capture", json={"targets": job, "durationMs": 500, "delayMs": 1500}).json()
    waits = []
    while not (state := client.get(f"/api/capture/job/{started['id']}").json())["done"]:
        if state["stage"] == "waiting":
            waits.append(state["startsInS"])
        time.sleep(0.05)
    assert state["stage"] == "saved" and waits and 0 < max(waits) <= 1.5 and waits == sorted(waits, reverse=True)
    began = _recording_start_ns(capture_ws.logdir.read_bytes(state["hosts"][0]["file"]))
    assert 1.4e9 < began - asked_ns < 2.5e9, (began - asked_ns) / 1e9


def test_another_page_cannot_start_a_capture(client, capture_ws):
    """The guard's Origin and Sec-Fetch-Site checks stand in front of the capture routes:
    a page on another site (a form, a fetch, an <img>) starts nothing."""
    body = {"targets": "localhost:1", "durationMs": 100}
    for headers in ({"origin": "http://evil.example"}, {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors"}):
        res = client.post("/api/capture", json=body, headers=headers)
        assert res.status_code == 403 and "refused" in res.json()["error"], res.text
        res = client.get("/data/plugin/profile/capture_profile", params={"service_addr": "localhost:1"}, headers=headers)
        assert res.status_code == 403
    assert capture_ws.capture.jobs() == []


def test_a_job_whose_test_runner_was_killed_ends_by_itself():
    """A test runner killed in the middle (SIGKILL, a CI timeout) cannot kill its profiler
    job: the job notices it was reparented and stops, instead of spinning on the machine
    (two such jobs once took a quarter of a core from the next test runs)."""
    code = ("import time\nfrom profscope.testing.profiler_job import profiler_job\n"
            "with profiler_job() as address:\n    print(address, flush=True)\n    time.sleep(600)\n")
    runner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert runner.stdout.readline().startswith("localhost:")
        with open(f"/proc/{runner.pid}/task/{runner.pid}/children") as f:
            [job] = [int(p) for p in f.read().split()]
    finally:
        runner.kill()
        runner.wait()
        runner.stdout.close()
    deadline = time.monotonic() + 60
    while _running(job):
        assert time.monotonic() < deadline, f"profiler job {job} still running after its runner was killed"
        time.sleep(0.1)


def _running(pid: int) -> bool:
    """A live process (not gone, not a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- issue 32: hostile profilers, odd input, stop, the allow-list, capture-off messages ----

# A hang bound (no speed is asserted): far beyond what each wait takes on a busy machine.
BACKSTOP_S = 90


def _until_done(client: TestClient, job_id: str) -> dict:
    return _wait(client, job_id, timeout=BACKSTOP_S)


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_an_answer_over_the_limit_is_refused_and_nothing_is_written(logdir, tmp_path):
    """Issue 32.2: gRPC's answer limit was lifted (-1), so a profiler could make the
    server hold any answer (256 MiB took it to 925 MB). Now an answer over
    ``--capture-max-bytes`` is refused from its length prefix: the job says which target
    and which limit, XProf's route is a 413 in the one error shape, `profscope capture`
    exits 2, and the capture folder gets no file; an answer under the limit is saved
    whole."""
    from profscope.testing.hostile_profiler import HostileProfiler

    limit = 1 << 20
    captures = tmp_path / "captures"
    ws = Workspace(LogDir(str(logdir)), DiskCache(tmp_path / "cache"), capture_dir=captures, capture_max_bytes=limit)
    client = TestClient(create_app(ws))
    with HostileProfiler(answer_bytes=8 << 20) as big:
        state = _until_done(client, client.post("/api/capture", json={"targets": big.address, "durationMs": 100}).json()["id"])
        assert state["stage"] == "failed", state
        [host] = state["hosts"]
        assert host["state"] == "failed" and host["code"] == "RESOURCE_EXHAUSTED" and host["bytes"] == 0
        assert f"over the limit of {limit:,} bytes" in host["error"] and "--capture-max-bytes" in host["error"], host
        assert big.address in state["summary"]
        res = client.get("/data/plugin/profile/capture_profile", params={"service_addr": big.address, "duration": "100"})
        body = res.json()
        assert res.status_code == 413 and body["ok"] is False and body["status"] == 413, res.text
        assert big.address in body["error"] and f"{limit:,} bytes" in body["error"]
        assert _files(captures) == []  # not a byte of it, not even in the staging folder
        cli = subprocess.run([sys.executable, "-m", "profscope", "capture", big.address, "--duration", "100ms",
                              "--dir", str(tmp_path / "cli"), "--capture-max-bytes", "1MiB"],
                             capture_output=True, text=True, timeout=120)
        assert cli.returncode == 2 and cli.stdout == "", cli.stderr
        assert f"{big.address}: FAILED: its answer is " in cli.stderr and f"over the limit of {limit:,} bytes" in cli.stderr
        assert _files(tmp_path / "cli") == []
    with HostileProfiler(answer_bytes=limit // 2) as small:
        state = _until_done(client, client.post("/api/capture", json={"targets": small.address, "durationMs": 100}).json()["id"])
        assert state["stage"] == "saved", state
        saved = ws.logdir.read_bytes(state["hosts"][0]["file"])
        assert len(saved) == state["hosts"][0]["bytes"] and limit // 4 < len(saved) <= limit // 2
        [plane] = xplane_pb2.XSpace.FromString(saved).planes  # the XSpace as it was sent
        assert set(plane.name) == {"x"}


def test_the_answer_limit_is_checked_where_it_is_given(logdir, tmp_path):
    """A limit over what gRPC and protobuf take (2 GiB), or none, is refused at start,
    naming the flag."""
    for value in ("3GiB", "0"):
        for command in (["capture", "localhost:1", "--dir", str(tmp_path / "c")],
                        ["serve", "--demo", "--port", "0", "--cache-dir", str(tmp_path / "cache")]):
            res = subprocess.run([sys.executable, "-m", "profscope", *command, "--capture-max-bytes", value],
                                 capture_output=True, text=True, timeout=120)
            assert res.returncode == 2 and "--capture-max-bytes must be from 1 byte to 2,147,483,647" in res.stderr, \
                (command, res.stderr)
    with pytest.raises(ProfscopeError, match="--capture-max-bytes"):
        Workspace(LogDir(str(logdir)), DiskCache(tmp_path / "cache"), capture_dir=tmp_path / "cap",
                  capture_max_bytes=1 << 31)


def test_odd_ports_and_deep_bodies_are_400s_naming_the_field(client, tmp_path):
    """Issue 32.4: a port written '²' (str.isdigit() is true for it, int() refuses it)
    was a 500 on both capture routes, and '١' (Arabic-Indic one, which int() reads) was
    taken as port 1; a POST body nested 20,000 levels deep was a 500 (RecursionError in
    json.loads). Each is a 400 that names the field."""
    for port in ("²", "١", "１", "99999", "0" * 30):
        target = f"localhost:{port}"
        res = client.post("/api/capture", json={"targets": target, "durationMs": 100})
        assert res.status_code == 400 and res.json()["error"].startswith("targets: ") \
            and "is not a profiler address" in res.json()["error"], (port, res.text)
        res = client.post("/api/capture/continuous", json={"targets": [target]})
        assert res.status_code == 400 and res.json()["error"].startswith("targets: "), (port, res.text)
        res = client.get("/data/plugin/profile/capture_profile", params={"service_addr": target})
        assert res.status_code == 400 and res.json()["error"].startswith("service_addr: "), (port, res.text)
        assert res.json() == {"ok": False, "status": 400, "error": res.json()["error"], "file": None}
    deep = 20_000
    bodies = {
        b'{"targets": ' + b"[" * deep + b"]" * deep + b"}": "field 'targets'",
        # objects in objects: 10,000 of them fit the 64 KiB a body may have
        b'{"targets": "localhost:1", "durationMs": ' + b'{"a":' * 10_000 + b"1" + b"}" * 10_000 + b"}": "field 'durationMs'",
        b"[" * deep + b"]" * deep: "the request body",
        # brackets inside strings are text, not nesting
        b'{"targets": "localhost:1", "duration": "' + b"[" * 50 + b'"}': None,
    }
    for route in ("/api/capture", "/api/capture/continuous"):
        for body, where in bodies.items():
            res = client.post(route, content=body, headers={"content-type": "application/json"})
            if where is None:
                assert res.status_code == 400 and "is not a duration" in res.json()["error"], res.text
                continue
            assert res.status_code == 400, (route, where, res.text[:300])
            assert res.json()["error"].startswith(f"{where} is nested over 8 levels deep"), res.text[:300]
    res = client.post("/api/capture", json={"targets": "localhost:1", "hostTracerLevel": [[1]]})
    assert res.status_code == 400 and res.json()["error"] == "hostTracerLevel must be a number or a string, not list"
    cli = subprocess.run([sys.executable, "-m", "profscope", "capture", "localhost:²", "--dir", str(tmp_path / "c")],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 2 and "profscope: error: targets: 'localhost:²' is not a profiler address" in cli.stderr, \
        cli.stderr


def _stop_when(client: TestClient, job_id: str, stage: str, profiler) -> dict:
    """Stop the job once it is at ``stage`` and its Profile call reached ``profiler`` (the
    stage says "recording" a moment before the call is made)."""
    deadline = time.monotonic() + BACKSTOP_S
    while (state := client.get(f"/api/capture/job/{job_id}").json())["stage"] != stage or not profiler.profile_calls():
        assert not state["done"] and time.monotonic() < deadline, state
        time.sleep(0.05)
    return client.post(f"/api/capture/job/{job_id}/stop").json()


@pytest.mark.parametrize("stage", ["recording", "collecting"])
def test_stop_ends_a_capture_whose_profiler_never_answers(client, stage):
    """Issue 32.5: Stop sent Terminate and nothing else, and did nothing at all once the
    job was "collecting": a profiler that never answers kept the job until the gRPC
    deadline (4 minutes for this 60 s recording, 63 s for the 1 s one, hours for an hour).
    Now the calls still open a few seconds after Stop are cancelled and the job says
    "stopped"; the target is free for the next capture."""
    from profscope.testing.hostile_profiler import HostileProfiler

    duration = 60_000 if stage == "recording" else 1000
    with HostileProfiler(silent=True) as silent:
        started = client.post("/api/capture", json={"targets": silent.address, "durationMs": duration}).json()
        stopped = _stop_when(client, started["id"], stage, silent)
        assert stopped["stopped"] is True and not stopped["done"]
        state = _until_done(client, started["id"])
        assert state["stage"] == "stopped", state
        assert state["error"] == "the capture was stopped before any host answered; nothing was kept"
        assert state["hosts"] == [{"address": silent.address, "state": "stopped", "code": None, "bytes": 0, "file": None,
                                   "error": "the capture was stopped before it answered"}]
        assert state["summary"] == f"capture stopped: {state['error']}"
        assert silent.profile_calls() == 1
        again = client.post("/api/capture", json={"targets": silent.address, "durationMs": 100})
        assert again.status_code == 202, again.text  # no longer "already being captured"
        client.post(f"/api/capture/job/{again.json()['id']}/stop")
        assert _until_done(client, again.json()["id"])["stage"] == "stopped"


def test_xprofs_blocking_capture_answers_when_stopped_or_the_server_stops(client, capture_ws):
    """XProf's capture route blocks until the capture is done: with a profiler that never
    answers, until the gRPC deadline. Stop (from the page), and the server stopping
    (Capturer.shutdown, what Ctrl+C calls), answer it with the one error shape, a 503;
    the server then refuses new captures with a 503 too."""
    from profscope.testing.hostile_profiler import HostileProfiler

    def blocking(address: str, answers: list) -> threading.Thread:
        def ask():
            answers.append(client.get("/data/plugin/profile/capture_profile",
                                      params={"service_addr": address, "duration": "60000"}))
        t = threading.Thread(target=ask, daemon=True)
        t.start()
        return t

    with HostileProfiler(silent=True) as silent:
        answers: list = []
        asking = blocking(silent.address, answers)
        deadline = time.monotonic() + BACKSTOP_S
        while not [j for j in capture_ws.capture.jobs() if j.stage == "recording"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [job] = capture_ws.capture.jobs()
        client.post(f"/api/capture/job/{job.id}/stop")
        asking.join(BACKSTOP_S)
        [res] = answers
        assert res.status_code == 503 and res.json() == {
            "ok": False, "status": 503, "file": None,
            "error": f"capture {job.id} of {silent.address}: the capture was stopped before any host answered; "
                     "nothing was kept"}, res.text

        answers.clear()
        asking = blocking(silent.address, answers)
        while len(capture_ws.capture.jobs()) < 2 or capture_ws.capture.jobs()[0].stage != "recording":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        job = capture_ws.capture.jobs()[0]
        capture_ws.capture.shutdown()
        asking.join(BACKSTOP_S)
        [res] = answers
        assert res.status_code == 503 and res.json()["error"] == \
            f"capture {job.id} of {silent.address}: the server stopped before any host answered; nothing was kept"
        refused = client.post("/api/capture", json={"targets": silent.address})
        assert refused.status_code == 503 and "the server is stopping" in refused.json()["error"]


def test_ctrl_c_answers_a_blocking_capture_and_the_server_exits(tmp_path):
    """Ctrl+C on `profscope serve` while XProf's capture route waits on a profiler that
    never answers: before, uvicorn cut the request after its 5 s graceful-shutdown timeout
    with a plain-text 500; now the capture ends at once, the request gets the one error
    shape (503), and the server exits."""
    import signal
    import urllib.error
    import urllib.request

    from profscope.testing.hostile_profiler import HostileProfiler

    with HostileProfiler(silent=True) as silent:
        proc = subprocess.Popen([sys.executable, "-m", "profscope", "serve", "--demo", "--port", "0",
                                 "--cache-dir", str(tmp_path / "cache")],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            url = next(m.group(1) for line in proc.stdout if (m := re.search(r"serving at (http://\S+)", line)))
            answers = []

            def ask():
                try:
                    with urllib.request.urlopen(url + f"data/plugin/profile/capture_profile?service_addr={silent.address}"
                                                "&duration=60000", timeout=BACKSTOP_S) as r:
                        answers.append((r.status, r.headers["Content-Type"], r.read()))
                except urllib.error.HTTPError as e:
                    answers.append((e.code, e.headers["Content-Type"], e.read()))

            asking = threading.Thread(target=ask, daemon=True)
            asking.start()
            deadline = time.monotonic() + BACKSTOP_S
            while silent.profile_calls() == 0:  # the capture is recording
                assert time.monotonic() < deadline
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            asking.join(BACKSTOP_S)
            proc.wait(timeout=BACKSTOP_S)  # it exits (130: main() answers the re-raised SIGINT)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            proc.stdout.close()
    [(status, kind, body)] = answers
    assert (status, kind) == (503, "application/json"), (status, kind, body)
    assert json.loads(body)["error"].endswith(f"of {silent.address}: the server stopped before any host answered; "
                                              "nothing was kept")


def test_address_patterns_match_addresses_and_name_patterns_names():
    """Issue 32.6: `--capture-allow '10.0.*'`, the docs' own example, let the name
    `10.0.evil.example` through (a shell pattern matched against the text of the host).
    Now an address pattern matches addresses only: one given as such, or every address a
    name resolves to, and the capture then dials the address it checked; a name pattern
    matches names only. The resolver is the policy's seam; `localhost` goes through the
    system's real one (it resolves here without a network)."""
    from profscope.app.capture import _resolve

    local = _resolve("localhost")
    assert local and all(ipaddress.ip_address(a).is_loopback for a in local)
    table = {"10.0.evil.example": ["203.0.113.7"], "trainer.example": ["10.0.4.2"],
             "split.example": ["10.0.4.2", "203.0.113.7"], "v6.example": ["fd00::7"],
             "job.test": local}
    asked = []

    def resolve(host: str) -> list[str]:
        asked.append(host)
        return table.get(host, [])

    policy = TargetPolicy(["10.0.*", "fd00::/16", "*.internal", "198.51.100.0/24:8466"], resolve=resolve)
    routes = {
        "10.0.3.4:9999": "10.0.3.4:9999",           # an address, by an address pattern
        "trainer.example:9999": "10.0.4.2:9999",   # a name, by the address it resolves to: dialled there
        "v6.example:1": "[fd00::7]:1",
        "[fd00::1]:1": "[fd00::1]:1",
        "w-3.internal:1": "w-3.internal:1",         # a name, by a name pattern: dialled by name
        "198.51.100.9:8466": "198.51.100.9:8466",   # a network with a port
        "job.test:1": f"{local[0]}:1",              # resolves to loopback, which is always allowed
    }
    for target, dialled in routes.items():
        assert policy.route(target) == dialled, target
    assert "w-3.internal" not in asked  # a name a name pattern allows is not looked up
    refusals = {
        "10.0.evil.example:1": "(10.0.evil.example resolves to 203.0.113.7)",
        "split.example:1": "(split.example resolves to 10.0.4.2, 203.0.113.7)",  # every address must match
        "nowhere.example:1": "(nowhere.example does not resolve here)",
        "198.51.100.9:1": "refused to capture from 198.51.100.9:1:",             # the network's port only
        "10.0.3.4.internal.evil:1": "(10.0.3.4.internal.evil does not resolve here)",
    }
    for target, words in refusals.items():
        with pytest.raises(Forbidden) as err:
            policy.route(target)
        assert words in err.value.message and "--capture-allow" in err.value.message, err.value.message
    # a name pattern never matches an address, nor an address pattern a name's text
    names_only = TargetPolicy(["*.internal", "gpu*"], resolve=resolve)
    for refused in ("10.0.3.4:1", "[fd00::1]:1"):
        with pytest.raises(Forbidden):
            names_only.route(refused)
    asked.clear()
    with pytest.raises(Forbidden):
        names_only.route("10.0.evil.example:1")
    assert asked == []  # no address pattern: nothing to resolve for
    with pytest.raises(BadRequest, match="is not a network"):
        TargetPolicy(["10.0.0.0/99"])



def test_the_capture_routes_refuse_a_name_by_where_it_resolves(client, capture_ws):
    """The same rule through both capture routes (the policy's resolver seam: no network)."""
    capture_ws.capture.policy = TargetPolicy(["10.0.*"], resolve=lambda host: {"10.0.evil.example": ["203.0.113.7"]}.get(host, []))
    res = client.post("/api/capture", json={"targets": "10.0.evil.example:9999", "durationMs": 100})
    assert res.status_code == 403 and res.json()["error"].startswith(
        "refused to capture from 10.0.evil.example:9999 (10.0.evil.example resolves to 203.0.113.7)"), res.text
    res = client.get("/data/plugin/profile/capture_profile", params={"service_addr": "10.0.evil.example:9999"})
    assert res.status_code == 403 and "resolves to 203.0.113.7" in res.json()["error"]
    assert capture_ws.capture.jobs() == []


def test_capture_off_messages_name_the_flag_that_turns_capturing_on(tmp_path):
    """Issue 32.7: with capturing off because the server asks no token of requests others
    can send, the capture routes said it "was started with --no-capture", and with
    `--allow-host '*'` on loopback the start line blamed --no-token, which was not given.
    Each message now names what turned capturing off and the flag that turns it on."""
    import urllib.error
    import urllib.request

    from profscope.testing.local_server import profscope_server

    cases = {
        ("--host", "0.0.0.0", "--no-token"): ("it listens on 0.0.0.0 and asks no token (--no-token)",
                                              "start it without --no-token (it then makes a token) or with --token VALUE"),
        ("--allow-host", "*"): ("it answers requests for any Host name (--allow-host '*') and asks no token",
                                "start it with --token VALUE (or without --allow-host '*')"),
        ("--no-capture",): ("it was started with --no-capture", "start it without --no-capture"),
    }
    for flags, (why, how) in cases.items():
        with profscope_server("serve", "--demo", "--port", "0", "--cache-dir", str(tmp_path / "c"), *flags) as (url, lines):
            if "--no-capture" not in flags:
                [line] = [line for line in lines if "capturing is off" in line]
                assert why in line and how in line, line
                assert "--no-token" in flags or "--no-token" not in line, line
            req = urllib.request.Request(url + "api/capture", data=b'{"targets": "localhost:1"}', method="POST",
                                         headers={"content-type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req, timeout=30)
            error = json.loads(err.value.read())["error"]
            assert err.value.code == 404 and error.startswith("capturing is off on this server: ") \
                and why in error and how in error, (flags, error)
            assert "--no-capture" not in error or "--no-capture" in flags, error


def test_a_stopped_long_recording_is_given_time_and_a_second_stop_cuts_it_off(client, monkeypatch):
    """Stop while recording gives the job time to send what it recorded (3 s plus
    SERIALISE_S_PER_RECORDED_S per recorded second: a long recording stopped late is not
    lost), and says how long in cutOffInS; Stop again cuts the wait to 3 s."""
    import profscope.app.capture as capture
    from profscope.testing.hostile_profiler import HostileProfiler

    monkeypatch.setattr(capture, "SERIALISE_S_PER_RECORDED_S", 10_000.0)  # as if hours had been recorded
    with HostileProfiler(silent=True) as silent:
        started = client.post("/api/capture", json={"targets": silent.address, "durationMs": 60_000}).json()
        time.sleep(0.3)  # some of it recorded: minutes to send it, at this rate
        first = _stop_when(client, started["id"], "recording", silent)
        assert first["stopped"] and first["cutOffInS"] > 30, first
        second = client.post(f"/api/capture/job/{started['id']}/stop").json()
        assert second["cutOffInS"] <= capture.STOP_GRACE_S, second
        state = _until_done(client, started["id"])
        assert state["stage"] == "stopped" and state["cutOffInS"] is None, state
