"""Conversions on a real Dask LocalCluster (app/scale_out.py; issue 18, first part): a
16-host session made of copies of the demo's real xplane, converted by 2 worker
processes into the same cache entries as a serial build, the viewed host first, each
host built once by two clients and by two clusters on one cache folder, the page API
and ``profscope serve --dask-workers``."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

from profscope.app.scale_out import DaskConversions, convert_host, host_line, local_cluster  # noqa: E402
from profscope.app.workspace import Workspace  # noqa: E402
from profscope.cache.store import DiskCache  # noqa: E402
from profscope.cache.worker import WorkerPool  # noqa: E402
from profscope.storage import LogDir  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "src/profscope/demo/logdir/mlp/plugins/profile"
HOSTS = [f"host{i:02d}" for i in range(16)]
TIMEOUT = 60  # seconds for any one wait on the cluster


def _copies(logdir: Path, xplane: Path) -> Path:
    """``logdir`` with one session ``s`` of the 16 HOSTS, each a copy of ``xplane``."""
    folder = logdir / "plugins/profile/s"
    folder.mkdir(parents=True)
    for host in HOSTS:
        shutil.copy(xplane, folder / f"{host}.xplane.pb")
    return logdir


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    """A log dir with one session of 16 hosts, each a copy of the demo's real xplane."""
    (xplane,) = DEMO.glob("*/demo-host.xplane.pb")
    return _copies(tmp_path_factory.mktemp("pod") / "logs", xplane)


@pytest.fixture(scope="module")
def gpu_session(tmp_path_factory, shared_fixtures) -> Path:
    """16 hosts, each a copy of a real 3 MB TensorFlow GPU xplane (~0.3 s to index, long
    enough for progress events between a build's first and last)."""
    (xplane, *_) = sorted(shared_fixtures.glob("public_profiles/xplane/tf_gpu/plugins/profile/*/*.xplane.pb"))
    return _copies(tmp_path_factory.mktemp("gpu-pod") / "logs", xplane)


@pytest.fixture(scope="module")
def cluster():
    c = local_cluster(2)
    try:
        yield c
    finally:
        c.close(timeout=20)


def _workspace(logdir: Path, cache: Path) -> Workspace:
    return Workspace(LogDir(str(logdir)), DiskCache(cache, workers=WorkerPool(enabled=False)))


def _wait_all(conv: DaskConversions, ws: Workspace, run) -> list[dict]:
    deadline = time.monotonic() + TIMEOUT
    while True:
        states = conv.status(ws, run)
        if all(s["state"] in ("done", "error") for s in states):
            return states
        assert time.monotonic() < deadline, states
        time.sleep(0.1)


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_16_host_session_converts_on_2_workers_to_the_serial_cache_entries(session, cluster, tmp_path):
    ws = _workspace(session, tmp_path / "dask-cache")
    conv = DaskConversions(client=distributed.Client(cluster, timeout=TIMEOUT))
    try:
        (run,) = ws.runs()
        assert run.hosts == HOSTS
        first = "host11"  # not the first in name order
        assert len(conv.submit_run(ws, run, first_host=first)) == 16
        results = {host: conv.wait(key, TIMEOUT) for host, key in conv._host_keys(ws, run)}
        states = _wait_all(conv, ws, run)
        # local_cluster unset the nanny's MALLOC_TRIM_THRESHOLD_=65536 (distributed.yaml)
        env = conv.client.run(lambda: __import__("os").environ.get("MALLOC_TRIM_THRESHOLD_"))
        assert list(env.values()) == [None, None], env
    finally:
        conv.client.close()
        conv.close()
    assert [s["state"] for s in states] == ["done"] * 16
    assert all(r["built"] for r in results.values())
    assert len({r["pid"] for r in results.values()}) == 2, "both worker processes converted"
    # the viewed host went first: submitted first, with the higher priority, so it was
    # among the first tasks the 2 workers started (the two start together)
    starts = sorted(results, key=lambda h: results[h]["started"])
    assert first in starts[:2], [(h, results[h]["started"]) for h in starts]

    serial = _workspace(session, tmp_path / "serial-cache")
    for host, info in serial.trace_sources(run):
        serial.trace_index(run, host, info, tiers=True)  # (the cluster's build makes them)
    for host, info in ws.trace_sources(run):
        key = ws._trace_index_key(host, info)
        assert results[host]["key"] == key
        dask_dir, serial_dir = ws.cache.built_dir(key), serial.cache.built_dir(key)
        assert dask_dir is not None and serial_dir is not None
        hashes = _hashes(dask_dir)
        assert hashes and hashes == _hashes(serial_dir), host


def test_two_clients_and_two_clusters_build_each_host_once(session, cluster, tmp_path):
    cache = tmp_path / "shared-cache"
    ws1, ws2 = _workspace(session, cache), _workspace(session, cache)
    (run,) = ws1.runs()
    c1, c2 = distributed.Client(cluster, timeout=TIMEOUT), distributed.Client(cluster, timeout=TIMEOUT)
    a, b = DaskConversions(client=c1), DaskConversions(client=c2)
    try:
        # two server replicas on one scheduler: the cache key is the task key, so the
        # second submission joins the first's task
        a.submit_run(ws1, run)
        b.submit_run(ws2, run, first_host="host05")
        for host, key in a._host_keys(ws1, run):
            ra, rb = a.wait(key, TIMEOUT), b.wait(key, TIMEOUT)
            assert ra == rb and ra["built"] is True, host  # one task, one build
    finally:
        for conv in (a, b):
            conv.client.close()
            conv.close()

    # a second cluster (a second server's) over the same cache folder builds nothing
    other = local_cluster(1)
    try:
        with distributed.Client(other, timeout=TIMEOUT) as client:
            futures = [client.submit(convert_host, str(session), str(cache), "s", h, key=f"again-{h}") for h in HOSTS]
            again = client.gather(futures)
        assert [r["built"] for r in again] == [False] * 16
        conv = DaskConversions(client=distributed.Client(other, timeout=TIMEOUT))
        try:
            assert conv.submit_run(ws1, run) == []  # every index is in the cache already
            assert [s["state"] for s in conv.status(ws1, run)] == ["done"] * 16
        finally:
            conv.client.close()
            conv.close()
    finally:
        other.close(timeout=20)


def test_two_clusters_converting_one_cache_at_once_build_each_host_once(session, cluster, tmp_path):
    """Two schedulers know nothing of each other: the cache's file lock
    (cache/store.py ``_single_flight``) keeps their workers from building a host twice."""
    cache = tmp_path / "contended-cache"
    other = local_cluster(1)
    try:
        with distributed.Client(cluster, timeout=TIMEOUT) as c1, distributed.Client(other, timeout=TIMEOUT) as c2:
            f1 = [c1.submit(convert_host, str(session), str(cache), "s", h, key=f"a-{h}") for h in HOSTS]
            f2 = [c2.submit(convert_host, str(session), str(cache), "s", h, key=f"b-{h}") for h in reversed(HOSTS)]
            r1, r2 = c1.gather(f1), c2.gather(f2)
    finally:
        other.close(timeout=20)
    built = {h: 0 for h in HOSTS}
    for r in r1 + r2:
        built[r["host"]] += r["built"]
    assert built == {h: 1 for h in HOSTS}


def test_the_trace_index_of_a_workspace_with_dask_is_built_on_the_cluster(session, cluster, tmp_path):
    ws = _workspace(session, tmp_path / "cache")
    conv = DaskConversions(client=distributed.Client(cluster, timeout=TIMEOUT))
    ws.scale_out = conv
    try:
        (run,) = ws.runs()
        host, info = ws.trace_sources(run)[7]
        index = ws.trace_index(run, host, info)  # submits the run, host07 first, waits for it
        assert index is not None
        key = ws._trace_index_key(host, info)
        assert conv.wait(key, TIMEOUT)["built"] is True  # the cluster built it, not this process
        assert ws.cache.progress.snapshot() == []
        _wait_all(conv, ws, run)
    finally:
        conv.client.close()
        conv.close()


def test_the_convert_api(session, cluster, tmp_path):
    from fastapi.testclient import TestClient

    from profscope.server import create_app

    ws = _workspace(session, tmp_path / "cache")
    with TestClient(create_app(ws)) as client:
        res = client.post("/api/convert?run=s&host=host03")
        assert res.status_code == 404 and "--dask-workers N or --dask ADDRESS" in res.json()["error"]
        assert client.get("/api/convert?run=s").status_code == 404

    conv = DaskConversions(client=distributed.Client(cluster, timeout=TIMEOUT))
    ws.scale_out = conv
    try:
        with TestClient(create_app(ws)) as client:
            assert client.post("/api/convert?run=s&host=nope").status_code == 404
            assert client.post("/api/convert?run=nope").status_code == 404
            res = client.post("/api/convert?run=s&host=host03")
            assert res.status_code == 202, res.text
            body = res.json()
            assert body["submitted"] == 16 and body["total"] == 16
            assert {h["state"] for h in body["hosts"]} <= {"pending", "processing", "done"}
            deadline = time.monotonic() + TIMEOUT
            while (body := client.get("/api/convert?run=s").json())["done"] < 16:
                assert time.monotonic() < deadline, body
                time.sleep(0.1)
            assert all(h["built"] and h["seconds"] > 0 and h["error"] is None for h in body["hosts"])
            assert client.post("/api/convert?run=s").json()["submitted"] == 0
    finally:
        conv.client.close()
        conv.close()


def test_serve_with_a_local_dask_cluster(tmp_path):
    import httpx

    from profscope.testing.local_server import profscope_server

    started = time.monotonic()
    with profscope_server("serve", "--demo", "--dask-workers", "1", "--port", "0", "--no-capture",
                          "--cache-dir", str(tmp_path / "cache")) as (url, lines):
        line = next(x for x in lines if x.startswith("conversions:"))
        assert "local Dask cluster at tcp://" in line and "1 worker" in line, line
        base = url.rstrip("/")
        runs = httpx.get(f"{base}/api/runs", timeout=30).json()["runs"]
        profile = next(r for r in runs if r["kind"] == "profile" and r["hosts"])
        res = httpx.post(f"{base}/api/convert", params={"run": profile["name"], "host": profile["hosts"][0]}, timeout=30)
        assert res.status_code == 202, res.text
        deadline = time.monotonic() + TIMEOUT
        while (body := httpx.get(f"{base}/api/convert", params={"run": profile["name"]}, timeout=30).json())["done"] < body["total"]:
            assert time.monotonic() < deadline, body
            time.sleep(0.2)
        stopping = time.monotonic()
    # profscope_server sends SIGTERM and waits at most 20 s for the exit
    assert time.monotonic() - stopping < 20
    assert time.monotonic() - started < 90


# -- progress events (worker events to every subscribed client) ------------------------


def _subscribed(client, *ids) -> None:
    """Waits until the scheduler lists every client of ``ids`` as a subscriber of the
    progress topic (a subscription travels on its client's stream: another client's
    tasks may start before it arrives)."""
    from profscope.app.scale_out import PROGRESS_TOPIC

    def subscribers(dask_scheduler):
        return sorted(dask_scheduler._broker._topics[PROGRESS_TOPIC].subscribers)

    deadline = time.monotonic() + TIMEOUT
    while not set(ids) <= set(client.run_on_scheduler(subscribers)):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_progress_events_reach_every_replica(gpu_session, cluster, tmp_path):
    """Two servers (two clients of one scheduler): one submits the run, both get every
    host's progress events, in the same order, from start to done; the one that did not
    submit reports the hosts as processing with their fraction, then done."""
    cache = tmp_path / "cache"
    ws1, ws2 = _workspace(gpu_session, cache), _workspace(gpu_session, cache)
    (run,) = ws1.runs()
    c1, c2 = distributed.Client(cluster, timeout=TIMEOUT), distributed.Client(cluster, timeout=TIMEOUT)
    # 50 ms between events instead of 250: these hosts index in about 0.3 s each
    a, b = DaskConversions(client=c1, report_every=0.05), DaskConversions(client=c2)
    seen = {"a": [], "b": []}
    a.add_listener(seen["a"].append)
    b.add_listener(seen["b"].append)
    watched = []  # what b's status said while a's tasks ran
    try:
        _subscribed(c1, c1.id, c2.id)
        a.submit_run(ws1, run, first_host="host05")
        keys = dict(a._host_keys(ws1, run))
        deadline = time.monotonic() + TIMEOUT
        while sum(e["state"] == "done" for e in seen["b"]) < 16:
            watched += [s for s in b.status(ws2, run) if s["state"] == "processing"]
            assert time.monotonic() < deadline, seen["b"][-3:]
            time.sleep(0.01)
        results = {host: a.wait(key, TIMEOUT) for host, key in keys.items()}
        later = b.status(ws2, run)
    finally:
        for conv in (a, b):
            conv.client.close()
            conv.close()

    def strip(events):
        return [{k: v for k, v in e.items() if k not in ("received", "run_done", "run_total")} for e in events]

    assert strip(seen["a"]) == strip(seen["b"])  # the same events, in the same order
    latencies = sorted(e["received"] - e["sent"] for e in seen["a"] + seen["b"])
    print(f"\n{len(seen['a'])} events per client; latency p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, "
          f"max {latencies[-1] * 1000:.1f} ms")
    assert latencies[-1] < 5, latencies[-5:]
    intermediate = 0
    for host, key in keys.items():
        events = [e for e in seen["b"] if e["key"] == key]
        assert {e["host"] for e in events} == {host} and {e["run"] for e in events} == {"s"}
        assert events[0]["state"] == "processing" and events[0]["fraction"] == 0 and events[0]["stage"] == "starting"
        assert events[-1]["state"] == "done" and events[-1]["fraction"] == 1.0
        assert [e["state"] for e in events[1:-1]] == ["processing"] * (len(events) - 2)
        fractions = [e["fraction"] for e in events]
        assert fractions == sorted(fractions), (host, fractions)
        assert events[-1]["built"] is True and events[-1]["pid"] == results[host]["pid"]
        assert events[-1]["seconds"] == results[host]["seconds"]
        intermediate += sum(0 < e["fraction"] < 1 and bool(e["stage"]) for e in events)
        gaps = [y["sent"] - x["sent"] for x, y in zip(events[1:-1], events[2:-1])]
        assert all(g >= 0.045 for g in gaps), (host, gaps)  # rate-limited
    assert intermediate > 0, "no event between the start and the end"
    # b submitted nothing, yet saw a's hosts processing with their fractions, then done
    assert {s["host"] for s in watched} and all(0 <= s["fraction"] < 1 and s["pid"] for s in watched)
    assert any(s["fraction"] > 0 and s["stage"] for s in watched), watched[-5:]
    assert [s["state"] for s in later] == ["done"] * 16
    assert [s["seconds"] for s in later] == [results[h]["seconds"] for h in keys]
    # the CLI's lines count the run's hosts as they finish
    lines = [line for e in seen["a"] if (line := host_line(e))]
    assert len(lines) == 16 and lines[-1].endswith("(16/16)"), lines
    # host05 went first, with the highest priority: on 2 worker threads it is one of the two
    # hosts started before any other (the order they finish in is the machine's: on a busy
    # one the other thread finished two hosts while host05 ran)
    started = [e["host"] for e in seen["a"] if e["state"] == "processing" and e["stage"] == "starting"]
    assert len(started) == 16 and "host05" in started[:2], started[:3]
    assert all(" s on worker pid " in x for x in lines), lines


def test_serve_prints_a_line_per_host_the_cluster_converts(session, tmp_path):
    """``profscope serve --dask-workers 2`` on the 16-host session: a line per host as
    its worker finishes it, counted against the run, from the workers' events."""
    import re
    import subprocess
    import sys
    import threading

    import httpx

    proc = subprocess.Popen([sys.executable, "-m", "profscope", "serve", str(session), "--dask-workers", "2",
                             "--port", "0", "--no-capture", "--cache-dir", str(tmp_path / "cache")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (m := re.search(r"serving at (http://\S+)", "".join(lines))):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        base = m.group(1).rstrip("/")
        res = httpx.post(f"{base}/api/convert", params={"run": "s", "host": "host09"}, timeout=30)
        assert res.status_code == 202, res.text
        while len(done := [x for x in list(lines) if " converted in " in x]) < 16:
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        body = httpx.get(f"{base}/api/convert", params={"run": "s"}, timeout=30).json()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    pattern = re.compile(r"\[profscope\] (host\d\d) converted in (\d+\.\d) s on worker pid (\d+) \((\d+)/16\)$")
    parsed = [pattern.match(x.strip()) for x in done]
    assert all(parsed), done
    assert sorted(p.group(1) for p in parsed) == HOSTS
    assert [int(p.group(4)) for p in parsed] == list(range(1, 17))  # counted as they finish
    pids = {int(p.group(3)) for p in parsed}
    assert len(pids) == 2 and proc.pid not in pids  # the two worker processes, not the server
    assert {h["pid"] for h in body["hosts"]} == pids
    assert {(h["host"], h["pid"]) for h in body["hosts"]} == {(p.group(1), int(p.group(3))) for p in parsed}


# -- access: the server reads each host's file itself before it submits work for it ----


def _unreadable_session(root: Path, unreadable: str = "host02") -> Path:
    """A 4-host session that others may read (the folders 0755), ``unreadable`` 0000."""
    (xplane,) = DEMO.glob("*/demo-host.xplane.pb")
    logdir = root / "logs"
    folder = logdir / "plugins/profile/s"
    folder.mkdir(parents=True)
    for host in HOSTS[:4]:
        shutil.copy(xplane, folder / f"{host}.xplane.pb")
    for d in (root, logdir, logdir / "plugins", logdir / "plugins/profile", folder):
        d.chmod(0o755)
    (folder / f"{unreadable}.xplane.pb").chmod(0)
    return logdir


def _check_refusal(res, logdir: Path, events: list, keys: dict, cache: Path) -> None:
    assert res.status_code == 403, res.text
    body = res.json()
    shown = f"{logdir}/plugins/profile/s/host02.xplane.pb"
    assert set(body) == {"ok", "status", "error", "file"} and body["ok"] is False and body["status"] == 403
    assert body["file"] == shown and "cannot read" in body["error"] and shown in body["error"], body
    # never submitted: no worker event and no cache entry for it, while the others converted
    ws = _workspace(logdir, cache)
    deadline = time.monotonic() + TIMEOUT
    while {e["host"] for e in events if e["state"] == "done"} != {"host00", "host01", "host03"}:
        assert time.monotonic() < deadline, events
        time.sleep(0.05)
    assert not [e for e in events if e["key"] == keys["host02"]]
    assert ws.cache.built_dir(keys["host02"]) is None
    assert all(ws.cache.built_dir(keys[h]) is not None for h in ("host00", "host01", "host03"))


def _keys(logdir: Path) -> dict:
    ws = _workspace(logdir, Path("/nonexistent"))
    (run,) = ws.runs()
    return dict(DaskConversions._host_keys(None, ws, run))


@pytest.mark.skipif(hasattr(__import__("os"), "geteuid") and __import__("os").geteuid() == 0,
                    reason="root reads a chmod 000 file; test_a_server_as_another_user_... covers it as nobody")
def test_the_convert_api_refuses_a_host_the_server_cannot_read(cluster, tmp_path):
    from fastapi.testclient import TestClient

    from profscope.server import create_app

    logdir = _unreadable_session(tmp_path)
    ws = _workspace(logdir, tmp_path / "cache")
    conv = DaskConversions(client=distributed.Client(cluster, timeout=TIMEOUT))
    ws.scale_out = conv
    events = []
    conv.add_listener(events.append)
    try:
        with TestClient(create_app(ws)) as client:
            res = client.post("/api/convert?run=s&host=host02")
            _check_refusal(res, logdir, events, _keys(logdir), tmp_path / "cache")
            states = {h["host"]: h for h in client.get("/api/convert?run=s").json()["hosts"]}
            assert states["host02"]["state"] == "error" and "cannot read" in states["host02"]["error"]
    finally:
        conv.client.close()
        conv.close()


def test_a_server_as_another_user_refuses_what_it_cannot_read(cluster, tmp_path):
    """The workers (this test's user) can read every file; a ``profscope serve --dask``
    running as ``nobody``, a client of the same scheduler, cannot read host02: it answers
    403 naming the file and submits no work for it. Runs where this test is root."""
    import os
    import subprocess
    import sys
    import tempfile

    import httpx

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run the server as nobody")
    root = Path(tempfile.mkdtemp(prefix="profscope-access-"))
    proc = None
    watcher = DaskConversions(client=distributed.Client(cluster, timeout=TIMEOUT))
    events = []
    watcher.add_listener(events.append)
    try:
        logdir = _unreadable_session(root)
        cache = root / "cache"
        cache.mkdir(mode=0o777)
        cache.chmod(0o777)
        home = root / "home"
        home.mkdir(mode=0o777)
        home.chmod(0o777)
        env = {**os.environ, "HOME": str(home)}
        proc = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                                 "-m", "profscope", "serve", str(logdir), "--dask", cluster.scheduler_address,
                                 "--port", "0", "--no-capture", "--cache-dir", str(cache)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=root)
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "serving at" in line:
                break
        else:
            raise AssertionError("".join(lines))
        base = line.split("serving at ")[1].split()[0].rstrip("/")
        # a run name outside the log directory is refused as any unknown run, submitting nothing
        for name in ("../../etc", "/etc/passwd", "s/../../x"):
            res = httpx.post(f"{base}/api/convert", params={"run": name}, timeout=30)
            assert res.status_code in (400, 404) and res.json()["ok"] is False, res.text
        assert events == []
        res = httpx.post(f"{base}/api/convert", params={"run": "s", "host": "host02"}, timeout=30)
        _check_refusal(res, logdir, events, _keys(logdir), cache)
        states = {h["host"]: h for h in httpx.get(f"{base}/api/convert", params={"run": "s"}, timeout=30).json()["hosts"]}
        assert states["host02"]["state"] == "error" and "cannot read" in states["host02"]["error"], states
        assert {states[h]["state"] for h in ("host00", "host01", "host03")} == {"done"}
        # the trace viewer of the unreadable host: the same 403, not a conversion here
        res = httpx.get(f"{base}/api/trace/window", params={"run": "s", "host": "host02"}, timeout=30)
        assert res.status_code == 403 and res.json()["file"].endswith("host02.xplane.pb"), res.text
        assert not [e for e in events if e["host"] == "host02"]
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        watcher.client.close()
        watcher.close()
        shutil.rmtree(root, ignore_errors=True)


def _with_a_truncated_host(gpu_session: Path, shared_fixtures: Path, tmp_path: Path) -> Path:
    """The 16-host GPU session plus host16, a truncated real TPU xplane."""
    logdir = tmp_path / "logs"
    shutil.copytree(gpu_session, logdir)
    (bad,) = shared_fixtures.glob("public_profiles/xplane/tpu_inference_corrupt/plugins/profile/*/*.xplane.pb")
    shutil.copy(bad, logdir / "plugins/profile/s/host16.xplane.pb")
    return logdir


def test_the_memory_roll_up_and_oom_risk_of_a_pod_session_run_on_the_cluster(gpu_session, cluster, tmp_path,
                                                                             shared_fixtures):
    """``/api/memory_hosts`` and OOM risk of a whole run (rated by its worst host) need
    every host's memory profile: with a cluster those are Dask tasks (Workspace.fan_out),
    and the server forks no conversion of its own for the roll-up (one for the run's
    OOM assessment, which reads the hosts' back). Same answers as a serial server; a
    truncated host is its own error row, as serially."""
    from profscope.app.queries import OomRiskQuery
    from profscope.app import tool_table

    import gzip
    import orjson

    logdir = _with_a_truncated_host(gpu_session, shared_fixtures, tmp_path)

    def answers(ws):
        """The roll-up, the run's OOM risk, and the conversions each forked here."""
        (run,) = ws.runs()
        start = ws.cache.workers.stats["runs"]
        rows = ws.memory_hosts(run)
        middle = ws.cache.workers.stats["runs"]
        oom = orjson.loads(gzip.decompress(ws.tool_data(run, tool_table.get("oom_risk"), OomRiskQuery())))
        return rows, oom, middle - start, ws.cache.workers.stats["runs"] - middle

    serial = Workspace(LogDir(str(logdir)), DiskCache(tmp_path / "serial", workers=WorkerPool(concurrency=2)))
    rows, oom, forks, oom_forks = answers(serial)
    assert forks == 17 and oom_forks == 1  # a worker per host, one after another (2 slots: no spare one)
    assert rows["rollup"]["hosts"] == 16 and rows["hosts"][0]["memoryId"] == "GPU_6_bfc"
    assert {r["host"]: r["status"] for r in rows["hosts"]}["host16"] == "error"

    ws = Workspace(LogDir(str(logdir)), DiskCache(tmp_path / "dask", workers=WorkerPool(concurrency=2)))
    ws.scale_out = DaskConversions(client=distributed.Client(cluster, timeout=TIMEOUT))
    try:
        rows_d, oom_d, forks_d, oom_forks_d = answers(ws)
        assert rows_d == rows and oom_d == oom
        # the truncated host too: its error, met on a worker, is remembered in the cache
        assert forks_d == 0 and oom_forks_d == 1
        assert ws.cache.progress.snapshot() == []  # the "... on the Dask cluster" job ended
        tasks = [f.result() for f in ws.scale_out._futures.values() if f.status == "finished"]
        assert len(tasks) == 34  # 17 memory rows + 17 hosts' assessments
        errors = [t for t in tasks if t["error"]]
        assert [t["host"] for t in errors] == ["host16", "host16"] and "truncated" in errors[0]["error"]
        worker_pids = set(ws.scale_out.client.run(os.getpid).values())
        assert {t["pid"] for t in tasks} <= worker_pids and os.getpid() not in worker_pids
        # asked again: nothing is submitted, nothing converted
        before = len(ws.scale_out._futures)
        assert answers(ws)[2:] == (0, 0) and len(ws.scale_out._futures) == before
    finally:
        ws.scale_out.client.close()
        ws.scale_out.close()


def test_the_all_hosts_trace_overview_of_a_pod_session_runs_on_the_cluster(gpu_session, cluster, tmp_path,
                                                                           shared_fixtures):
    """``/api/trace_hosts`` reads one pass of every host's xplane: with a cluster each host
    is a Dask task (run_host_jobs, ("trace_host", host)) and the server forks nothing and
    reads no xplane, only the rows the workers keep in the cache. Same answer as a serial
    server; a truncated host is its own error row, as serially."""
    logdir = _with_a_truncated_host(gpu_session, shared_fixtures, tmp_path)

    def answer(ws):
        (run,) = ws.runs()
        start = ws.cache.workers.stats["runs"]
        out = ws.trace_hosts(run)
        return out, ws.cache.workers.stats["runs"] - start

    serial = Workspace(LogDir(str(logdir)), DiskCache(tmp_path / "serial", workers=WorkerPool(concurrency=2)))
    rows, forks = answer(serial)
    assert forks >= 1 and len(rows["hosts"]) == 17
    assert {r["host"]: r["status"] for r in rows["hosts"]}["host16"] == "error"

    ws = Workspace(LogDir(str(logdir)), DiskCache(tmp_path / "dask", workers=WorkerPool(concurrency=2)))
    ws.scale_out = DaskConversions(client=distributed.Client(cluster, timeout=TIMEOUT))
    try:
        rows_d, forks_d = answer(ws)
        assert rows_d == rows
        assert forks_d == 0  # every host's pass ran on a worker, the bad one's error too
        tasks = [f.result() for f in ws.scale_out._futures.values() if f.status == "finished"]
        assert sorted(t["host"] for t in tasks) == sorted(f"host{i:02d}" for i in range(17))
        assert [t["host"] for t in tasks if t["error"]] == ["host16"]
        worker_pids = set(ws.scale_out.client.run(os.getpid).values())
        assert {t["pid"] for t in tasks} <= worker_pids and os.getpid() not in worker_pids
        # asked again: nothing submitted, nothing read
        before = len(ws.scale_out._futures)
        assert answer(ws) == (rows, 0) and len(ws.scale_out._futures) == before
    finally:
        ws.scale_out.client.close()
        ws.scale_out.close()
