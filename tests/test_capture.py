"""Capturing from running jobs (app/capture.py, server/capture_api.py, storage/profiler_client.py)
against real JAX jobs: ``profscope.testing.profiler_job`` starts ``jax.profiler.start_server``
in a subprocess running a jitted training step, and every capture here talks gRPC to it.
"""

from __future__ import annotations

import json
import os
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
    policy = TargetPolicy(["10.0.*", "*.internal", "gpu7:8466"])
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
