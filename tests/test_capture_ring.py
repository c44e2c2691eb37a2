"""The last N seconds (issue 39 item 2, app/capture_ring.py, formats/xspace_merge.py):
back-to-back pieces of a real JAX job, the oldest dropped, a snapshot that holds the last
N seconds ending when it was asked for, one XSpace per host that every tool reads."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from profscope.app.capture import CaptureDir, read_capture_meta
from profscope.app.capture_ring import RingRecorder
from profscope.app.queries import XprofTraceQuery
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.errors import BadRequest
from profscope.formats.protos import xplane_pb2
from profscope.formats.xspace_merge import TASK_ENVIRONMENT, merge_xspaces, recording_window
from profscope.server import create_app
from profscope.storage import LogDir
from profscope.storage.profiler_client import CaptureSettings, ProfilerClient
from profscope.testing.processes import free_port, interruptible
from profscope.testing.profiler_job import profiler_jobs


@pytest.fixture(scope="module")
def jobs():
    with profiler_jobs([free_port(), free_port()]) as addresses:
        yield addresses


@pytest.fixture
def ws(demo_logdir, tmp_path):
    return Workspace(LogDir(str(demo_logdir)), DiskCache(tmp_path / "cache"), capture_dir=tmp_path / "captures")


def _span_s(xspace: bytes, name: str) -> tuple[int, float, float]:
    """How many ``name`` events a host's XSpace holds and when the first starts and the
    last ends, in seconds from its profile_start_time (its lines are relative to it)."""
    space = xplane_pb2.XSpace.FromString(xspace)
    plane = next(p for p in space.planes if p.name == "/host:CPU")
    ids = {k for k, m in plane.event_metadata.items() if m.name == name}
    times = [(line.timestamp_ns * 1000 + ev.offset_ps, line.timestamp_ns * 1000 + ev.offset_ps + ev.duration_ps)
             for line in plane.lines for ev in line.events if ev.metadata_id in ids]
    return len(times), min(t[0] for t in times) / 1e12, max(t[1] for t in times) / 1e12


def test_a_snapshot_holds_the_last_5_seconds_ending_when_asked(jobs, ws, tmp_path):
    """Issue 39's bar: with N = 5 s on a job running 30 s, a snapshot holds 5 ± 1 s ending
    at the trigger; the gap per piece is measured, and two hosts' pieces start together."""
    client = TestClient(create_app(ws))
    started = client.post("/api/capture/ring", json={"targets": ",".join(jobs), "window": "5s", "piece": "1s"})
    assert started.status_code == 201, started.text
    rid = started.json()["id"]
    ring = ws.capture.rings[rid]
    try:
        snaps = []
        for at in (12.0, 24.0):  # two snapshots across the job's 30 s, the ring running between
            while time.time() - ring.created < at:
                time.sleep(0.2)
            asked = time.time_ns()
            snap = client.post(f"/api/capture/ring/{rid}/snapshot")
            assert snap.status_code == 200 and snap.json()["stage"] == "saved", snap.text
            snaps.append((asked, snap.json()))
            state = client.get(f"/api/capture/ring/{rid}").json()
            # the oldest are dropped: a 5 s window of 1 s pieces holds at most 6 (+1 just ended)
            assert state["state"] == "running" and all(2 <= h["pieces"] <= 7 for h in state["hosts"]), state
        assert state["startSpreadMs"] is not None and state["startSpreadMs"] < 50, state  # one start_timestamp_ns
        for h in state["hosts"]:
            assert h["gapMs"]["count"] >= 15 and 0 < h["gapMs"]["mean"] < 1000, h
        print("\nring gaps (ms) per 1 s piece, 2 hosts:", [h["gapMs"] for h in state["hosts"]],
              "start spread ms:", state["startSpreadMs"])
    finally:
        stopped = client.post(f"/api/capture/ring/{rid}/stop").json()
    assert stopped["state"] == "stopped" and all(h["pieces"] == 0 for h in stopped["hosts"])
    assert not ring._thread.is_alive()  # noqa: SLF001 - nothing left running after stop

    for asked, snap in snaps:
        folder = ws.capture.folder.sessions / snap["session"]
        meta = read_capture_meta(folder)
        assert meta["mode"] == "ring" and meta["window"]["requested_s"] == 5.0
        for host in snap["hosts"]:
            data = (folder / host["file"].rsplit("/", 1)[1]).read_bytes()
            window = recording_window(data)
            held = (window.stop_ns - window.start_ns) / 1e9
            assert 4.0 <= held <= 6.0, (held, meta)
            assert abs(window.stop_ns - asked) < 1e9, (window.stop_ns - asked) / 1e9  # ends at the trigger
            # the job's steps fill the window: the first within a second of its start, the last of its end
            count, first, last = _span_s(data, "train_loop_step")
            assert count > 20 and first < 1.0 and last > held - 1.0, (count, first, last, held)
            print(f"snapshot {snap['session']} {host['address']}: held {held:.3f} s, ends "
                  f"{(window.stop_ns - asked) / 1e6:.1f} ms after asked, gaps {meta['gaps_ms'][host['address']]}")
        # a run like any capture: listed, and the trace viewer reads the merged XSpace
        run = ws.run(snap["run"])
        host = snap["hosts"][0]["address"].replace(":", "_")
        payload = json.loads(b"".join(ws.trace_xprof_stream(run, XprofTraceQuery(host=host, resolution=0))))
        names = {e.get("name") for e in payload["traceEvents"]}
        assert "train_loop_step" in names and any("train_step" in (n or "") for n in names)


def test_merging_keeps_every_event_at_its_time_and_drops_what_began_before_the_window(jobs):
    """Three recordings of one job merged: the event counts add up, the module metadata is
    kept once, every event keeps its wall-clock time, and since_ns cuts what began before."""
    with ProfilerClient(jobs[0]) as c:
        pieces = [bytes(c.profile(CaptureSettings(duration_ms=400), session_id=f"merge-{i}")) for i in range(3)]
    windows = [recording_window(p) for p in pieces]
    assert all(windows) and all(a.stop_ns <= b.start_ns for a, b in zip(windows, windows[1:]))

    def events(data: bytes) -> list[tuple[str, int, int]]:
        """(name, wall-clock start ns, duration ps) of every /host:CPU event."""
        space = xplane_pb2.XSpace.FromString(data)
        start = recording_window(data).start_ns
        plane = next(p for p in space.planes if p.name == "/host:CPU")
        names = {k: m.name for k, m in plane.event_metadata.items()}
        return sorted((names[ev.metadata_id], start + line.timestamp_ns + ev.offset_ps // 1000, ev.duration_ps)
                      for line in plane.lines for ev in line.events)

    merged, window = merge_xspaces(pieces)
    assert window == recording_window(merged) == type(window)(windows[0].start_ns, windows[-1].stop_ns)
    assert events(merged) == sorted(e for p in pieces for e in events(p))
    space = xplane_pb2.XSpace.FromString(merged)
    meta = next(p for p in space.planes if p.name == "/host:metadata")
    firsts = next(p for p in xplane_pb2.XSpace.FromString(pieces[0]).planes if p.name == "/host:metadata")
    assert sorted(m.name for m in meta.event_metadata.values()) == sorted(m.name for m in firsts.event_metadata.values())
    assert [p.name for p in space.planes].count(TASK_ENVIRONMENT) == 1

    since = windows[1].start_ns + 100_000_000
    cut, held = merge_xspaces(pieces, since_ns=since)
    assert held.start_ns == since
    assert events(cut) == [e for e in events(merged) if e[1] >= since]


def test_a_byte_limit_keeps_the_newest_pieces_under_it(jobs, ws):
    """"The last N seconds (or bytes)": with a limit of 1.2 MB the ring keeps the newest
    pieces that fit (one per host at least), however long its window."""
    client = TestClient(create_app(ws))
    started = client.post("/api/capture/ring", json={"targets": jobs[0], "window": "20s", "piece": "500ms",
                                                      "maxBytes": "1.2MB"})
    assert started.status_code == 201 and started.json()["maxBytes"] == 1_200_000, started.text
    ring = ws.capture.rings[started.json()["id"]]
    try:
        assert ring.wait_round(7, 90)
        host = ring.status()["hosts"][0]
        assert host["pieces"] >= 1 and (host["bytes"] <= 1_200_000 or host["pieces"] == 1), host
        piece = host["bytes"] / host["pieces"]
        assert host["pieces"] >= min(8, int(1_200_000 // piece)), host  # as many as fit are kept
        snap = ring.snapshot()
        assert snap.stage == "saved"
        data = (ws.capture.folder.sessions / snap.session / CaptureDir.host_file(jobs[0])).read_bytes()
        held = recording_window(data)
        assert (held.stop_ns - held.start_ns) / 1e9 < 0.5 * (host["pieces"] + 1) + 0.5
    finally:
        ring.stop()


def test_bad_ring_settings_are_400s_naming_them(ws):
    client = TestClient(create_app(ws))
    for body, words in (({"targets": "localhost:1", "window": "0s"}, "the ring's window must be more than 0 s"),
                        ({"targets": "localhost:1", "window": "2h"}, "is over an hour"),
                        ({"targets": "localhost:1", "window": "5s", "piece": "10s"}, "a ring's piece must be"),
                        ({"targets": "localhost:1", "windw": "5s"}, "unknown field(s) windw"),
                        ({"targets": "localhost:1", "maxBytes": "lots"}, "maxBytes: 'lots' is not a size"),
                        ({"targets": "localhost:1", "maxBytes": 0}, "the ring's byte limit must be a size over 0")):
        res = client.post("/api/capture/ring", json=body)
        assert res.status_code == 400 and words in res.json()["error"], res.text
    dead = client.post("/api/capture/ring", json={"targets": f"localhost:{free_port()}"})
    assert dead.status_code == 201 and dead.json()["state"] == "failed", dead.text
    assert "no profiler server answers" in dead.json()["error"]
    assert client.get("/api/capture/ring/nope").status_code == 404
    with pytest.raises(BadRequest):
        RingRecorder(ws.capture, "localhost:1", 5.0, piece_s=0.01)
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "profscope", "capture", "localhost:1", "--last", "5s", "--last-bytes",
                          "lots"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--last-bytes: 'lots' is not a size" in res.stderr, res.stderr
    res = subprocess.run([sys.executable, "-m", "profscope", "capture", "localhost:1", "--last", "5s", "--snapshots",
                          "3"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--last keeps the last seconds in profscope and --snapshots" in res.stderr, res.stderr


def test_cli_last_saves_on_enter_and_on_ctrl_c(jobs, tmp_path):
    """`profscope capture TARGET --last 3s`: Enter saves the last 3 s as a run (its folder
    on stdout), Ctrl+C saves them once more and exits 0; the job is free again after."""
    import signal
    import subprocess
    import sys

    from pathlib import Path

    proc = subprocess.Popen([sys.executable, "-m", "profscope", "capture", jobs[0], "--last", "3s", "--piece", "1s",
                             "--dir", str(tmp_path / "c")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    try:
        time.sleep(8)  # the interpreter's start, then more than the window
        proc.stdin.write("\n")
        proc.stdin.flush()
        first = proc.stdout.readline().strip()
        assert first, proc.stderr.read() if proc.poll() is not None else "no run printed"
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    runs = [Path(first), *map(Path, out.split())]
    assert len(runs) == 2 and "ring: asked: captured 1 host(s)" in err and "ring: stopped:" in err, err
    for run in runs:
        (data,) = [f.read_bytes() for f in run.glob("*.xplane.pb")]
        window = recording_window(data)
        assert 2.0 <= (window.stop_ns - window.start_ns) / 1e9 <= 4.0
    with ProfilerClient(jobs[0]) as c:  # the ring ended its recording: the job takes another
        assert len(c.profile(CaptureSettings(duration_ms=100))) > 0


def test_a_job_that_dies_fails_the_ring_with_the_reason_and_frees_the_address(ws):
    """The job is killed while the ring records: its host fails with the reason, the ring
    ends "failed" (nothing left running), and the address can be captured again."""
    from profscope.testing.profiler_job import profiler_job

    with profiler_job() as address:
        ring = RingRecorder(ws.capture, address, 3.0, 0.5).start()
        assert ring.state == "running"
        assert ring.wait_round(1, 60)  # two pieces in
    deadline = time.monotonic() + 90
    while ring.state == "running":
        assert time.monotonic() < deadline, ring.status()
        time.sleep(0.1)
    state = ring.status()
    assert state["state"] == "failed" and "no profiler server answers" in state["error"], state
    assert state["hosts"][0]["state"] == "failed" and state["hosts"][0]["pieces"] == 0
    ring._thread.join(10)  # noqa: SLF001
    assert not ring._thread.is_alive()  # noqa: SLF001
    # freed: another capture of the address is not refused as busy (it fails: nobody listens)
    job = ws.capture.start(address, CaptureSettings(duration_ms=100))
    job.done.wait(30)
    assert job.stage == "failed" and "no profiler server answers" in job.error


def _canonical(data: bytes) -> dict:
    """Everything of an XSpace by name, never by id: per plane its stats, its event
    metadata (name -> stats, child names) and per line every event as (name, absolute ps,
    duration, occurrences, stats); a stat's ref_value as the name it refers to."""
    from collections import Counter

    out = {}
    for plane in xplane_pb2.XSpace.FromString(data).planes:
        stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        ev_names = {k: m.name for k, m in plane.event_metadata.items()}

        def stats(items):
            return tuple(sorted((stat_names[s.metadata_id], stat_names[s.ref_value] if s.WhichOneof("value") == "ref_value"
                                 else getattr(s, s.WhichOneof("value") or "int64_value")) for s in items))

        metas = {(m.name, m.display_name): (stats(m.stats), tuple(sorted(ev_names[c] for c in m.child_id)))
                 for m in plane.event_metadata.values()}
        lines = {(line.id, line.name): Counter(
            (ev_names[ev.metadata_id], line.timestamp_ns * 1000 + ev.offset_ps, ev.duration_ps, ev.num_occurrences,
             stats(ev.stats)) for ev in line.events) for line in plane.lines}
        out[plane.name] = (stats(plane.stats), metas, lines)
    return out


def _renumbered(data: bytes, by: int = 1000) -> bytes:
    """``data`` with every stat and event metadata id moved by ``by``, and every reference
    to one (metadata_id, ref_value, child_id) with it: the same recording, other ids."""
    space = xplane_pb2.XSpace.FromString(data)
    for plane in space.planes:
        def move(stats):
            for st in stats:
                st.metadata_id += by
                if st.WhichOneof("value") == "ref_value":
                    st.ref_value += by
        for table in (plane.stat_metadata, plane.event_metadata):
            items = [(k, type(m)()) for k, m in table.items()]
            for (k, copy) in items:
                copy.CopyFrom(table[k])
            table.clear()
            for k, m in items:
                m.id = k + by
                if hasattr(m, "child_id"):
                    m.child_id[:] = [c + by for c in m.child_id]
                    move(m.stats)
                table[k + by].CopyFrom(m)
        move(plane.stats)
        for line in plane.lines:
            for ev in line.events:
                ev.metadata_id += by
                move(ev.stats)
    return space.SerializeToString()


@pytest.mark.parametrize("rel", ["mi300_jax08_gemm", "tpu_inference", "tf_gpu"])
def test_merging_real_recordings_loses_and_moves_nothing(shared_fixtures, rel):
    """The merge on real GPU/TPU xplanes (device planes, interned string stats, metadata
    children): one recording merged alone is itself, by name and time; with a copy whose
    metadata ids are all different (as a second recording's are), every event is there
    twice at the same times, with the same stats."""
    path = sorted((shared_fixtures / "public_profiles" / "xplane" / rel).rglob("*.xplane.pb"))[0]
    data = path.read_bytes()
    alone, _ = merge_xspaces([data])
    assert _canonical(alone) == _canonical(data)
    for pair in ([data, _renumbered(data)], [_renumbered(data), data]):
        twice = _canonical(merge_xspaces(pair)[0])
        for name, (pstats, metas, lines) in _canonical(data).items():
            assert twice[name][:2] == (pstats, metas)
            assert twice[name][2] == {k: c + c for k, c in lines.items()}, name


def test_a_host_that_never_answers_is_dropped_and_the_others_record_on(jobs, ws):
    """Every round waits for its slowest host: one whose Profile call never answers is
    dropped when its piece's deadline passes (piece x 3 + 10 s), with the reason, and the
    live host records on (its rounds go on after)."""
    from profscope.testing.hostile_profiler import HostileProfiler

    with HostileProfiler(silent=True) as silent:
        ring = RingRecorder(ws.capture, [jobs[1], silent.address], 3.0, 0.5).start()
        try:
            assert ring.state == "running"
            deadline = time.monotonic() + 90
            while ring.hosts[silent.address].state.state != "failed":
                assert time.monotonic() < deadline and ring.state == "running", ring.status()
                time.sleep(0.2)
            dropped = ring.status()
            assert "did not answer in time" in ring.hosts[silent.address].state.error, dropped
            assert ring.wait_round(dropped["rounds"] + 3, 60)  # the live host's rounds go on
            live = next(h for h in ring.status()["hosts"] if h["address"] == jobs[1])
            assert live["state"] == "recording" and live["pieces"] >= 3, live
            snap = ring.snapshot()
            assert [h["address"] for h in snap.to_json()["hosts"]] == [jobs[1]] and snap.stage == "saved"
        finally:
            ring.stop()
