"""The cross-host trace overview (``GET /api/trace_hosts``, tools/trace_hosts.py,
formats/xplane_activity.py) on multi-host sessions of real, different profiles, no mocks:
the demo's JAX CPU programs (MLP, convnet, transformer: ``StepTraceAnnotation`` steps and
XLA CPU op events) and TF CPU BFC profile (steps, no device ops), the public TF GPU profile
(an XProf-touched file with derived ``Steps`` lines on 3 GPUs), the JAX TPU profile (4
TensorCores, no step markers), the ROCm MI300 one, and a corrupt TPU file; and the
16-host pod session (testing/pod_session.py).

Every number is checked against a second, independent reading of each file: the whole
XSpace parsed with protobuf and walked in plain Python (no wire-level decoding, no numpy),
and the steps against the trace viewer's own step list (``/api/trace/window``)."""

from __future__ import annotations

import random
import shutil
import statistics
from pathlib import Path

import numpy as np
import pytest

from profscope.formats.protos import xplane_pb2
from profscope.testing.pod_session import build_pod_session
from profscope.tools import trace_hosts

DEMO = Path(__file__).resolve().parents[1] / "src" / "profscope" / "demo" / "logdir"
DERIVED_MIN, DERIVED_MAX = 0xDEADBEEF - (1 << 32), 0xDEADBEEF - (1 << 32) + 49 + 240 + 1 + 99  # tsl trace_utils.h


def build_mixed_session(root: Path, shared: Path, *, corrupt: bool = True) -> tuple[str, dict[str, Path]]:
    """``root/mixed/plugins/profile/s/<host>.xplane.pb`` from real profiles."""
    public = shared / "public_profiles" / "xplane"
    session = root / "mixed" / "plugins" / "profile" / "s"
    session.mkdir(parents=True)
    sources = {
        "host01": next(DEMO.glob("mlp/plugins/profile/*/demo-host.xplane.pb")),
        "host02": next(DEMO.glob("convnet/plugins/profile/*/demo-host.xplane.pb")),
        "host03": next(DEMO.glob("transformer/plugins/profile/*/demo-host.xplane.pb")),
        "host04": next(DEMO.glob("tf_bfc/plugins/profile/*/vm.xplane.pb")),
        "host05": next(public.glob("tf_gpu/plugins/profile/*/34.83.195.179_6003.xplane.pb")),
        "host06": next(public.glob("tpu_inference/plugins/profile/*/tpu_inference_2.xplane.pb")),
        "host07": next(public.glob("mi300_jax08_gemm/plugins/profile/*/tw003.xplane.pb")),
    }
    if corrupt:  # every byte >= 0x80 became U+FFFD upstream: truncated messages
        sources["host08"] = next(public.glob("tpu_inference_corrupt/plugins/profile/*/tpu_inference_2.xplane.pb"))
    for host, src in sources.items():
        shutil.copyfile(src, session / f"{host}.xplane.pb")
    return "mixed/s", sources


# -- the independent reading ----------------------------------------------------------------


def _union(intervals) -> int:
    total, cur_b, cur_e = 0, None, None
    for b, e in sorted(intervals):
        if cur_e is None or b > cur_e:
            if cur_e is not None:
                total += cur_e - cur_b
            cur_b, cur_e = b, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_b if cur_e is not None else 0)


def independent(path: Path) -> dict:
    """Span, steps by name, and per-device busy time of one xplane, from the whole proto."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    hosts = [p for p in space.planes if p.name.startswith("/host:CPU")]
    gpus = [p for p in space.planes if p.name.startswith("/device:GPU:")]
    tpus = [p for p in space.planes if p.name.startswith("/device:TPU:") and p.name[len("/device:TPU:"):].isdigit()]
    devices = gpus or tpus
    lo = hi = None
    step_num, step_line = {}, {}
    busy, cpu_ops = {}, []
    for plane in hosts + devices:
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        op_lines = set()
        if plane in tpus:
            names = {ln.name for ln in plane.lines if ln.events}
            op_lines = {"XLA Ops"} if "XLA Ops" in names else {"XLA Modules"}
        ops = []
        for line in plane.lines:
            if line.name == "_counters_":
                continue
            signed = ((line.id + (1 << 31)) % (1 << 32)) - (1 << 31)
            is_ops = (plane in gpus and not DERIVED_MIN <= signed <= DERIVED_MAX) or (plane in tpus and line.name in op_lines)
            for ev in line.events:
                t = line.timestamp_ns * 1000 + ev.offset_ps
                e = t + ev.duration_ps
                lo = t if lo is None else min(lo, t)
                hi = e if hi is None else max(hi, e)
                md = plane.event_metadata[ev.metadata_id]
                name = md.display_name or md.name
                stats = {stat_names.get(s.metadata_id): s for s in ev.stats}
                if is_ops:
                    ops.append((t, e))
                if "step_num" in stats:
                    s = stats["step_num"]
                    num = s.int64_value if s.WhichOneof("value") == "int64_value" else s.uint64_value
                    key = (f"{name} {num}", plane.name, line.id)
                    step_num[key] = (min(step_num.get(key, (t, e))[0], t), max(step_num.get(key, (t, e))[1], e))
                if (line.display_name or line.name) == "Steps":
                    key = (name, plane.name, line.id)
                    step_line[key] = (min(step_line.get(key, (t, e))[0], t), max(step_line.get(key, (t, e))[1], e))
                if plane in hosts and "hlo_op" in stats:
                    cpu_ops.append((t, e))
        if plane in devices:
            if ops:
                busy[plane.name] = _union(ops)
    if not busy and cpu_ops:
        busy["/host:CPU (XLA ops)"] = _union(cpu_ops)
    # a step: its earliest start on any line, and its longest line's extent
    steps = {}
    for (name, *_), (b, e) in (step_num or step_line).items():
        start, dur = steps.get(name, (b, e - b))
        steps[name] = (min(start, b), max(dur, e - b))
    return {"span": hi - lo, "begin": lo, "steps": {k: (b - lo, d) for k, (b, d) in steps.items()},
            "source": "step_num events" if step_num else "Steps line" if step_line else None, "busy": busy}


# -- tests ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, shared_fixtures):
    root = tmp_path_factory.mktemp("trace-hosts")
    run, sources = build_mixed_session(root, shared_fixtures)
    return root, run, sources


def test_every_host_matches_an_independent_reading(make_client, mixed):
    root, run, sources = mixed
    client = make_client(root)
    res = client.get("/api/trace_hosts", params={"run": run})
    assert res.status_code == 200, res.text
    body = res.json()
    rows = {r["host"]: r for r in body["hosts"]}
    assert set(rows) == set(sources)
    own = {}
    for host, src in sources.items():
        if host == "host08":
            continue
        want = own[host] = independent(src)
        r = rows[host]
        assert r["status"] == "ok", (host, r)
        assert r["spanPs"] == want["span"], host
        assert r["stepSource"] == want["source"], host
        assert {s["name"]: (s["startPs"], s["durPs"]) for s in r["steps"]} == want["steps"], host
        assert {d["name"]: d["busyPs"] for d in r["devices"]} == want["busy"], host
        assert r["busyPs"] == sum(want["busy"].values())
        assert r["idlePs"] == len(want["busy"]) * want["span"] - r["busyPs"]
        if want["busy"]:
            assert r["idleShare"] == pytest.approx(r["idlePs"] / (len(want["busy"]) * want["span"]))
        durs = [d for _, d in want["steps"].values()]
        if durs:
            assert r["stepPs"] == pytest.approx(statistics.median(durs))
            assert r["stepMaxPs"] == max(durs) and r["stepTotalPs"] == sum(durs)
        else:
            assert r["stepPs"] is None and "no step markers" in r["reason"]
    # What the files are: the kinds of host the overview has to tell apart.
    assert rows["host01"]["deviceSource"] == "XLA CPU ops" and rows["host01"]["stepCount"] == 3
    assert rows["host04"]["deviceCount"] == 0 and "no device op events" in rows["host04"]["deviceReason"]
    assert rows["host05"]["stepSource"] == "Steps line" and rows["host05"]["deviceCount"] == 3
    assert len(rows["host05"]["idleDevices"]) == 5  # 8 GPU planes, 3 with ops
    assert rows["host06"]["deviceCount"] == 4 and rows["host06"]["stepCount"] == 0
    assert [d["lines"] for d in rows["host06"]["devices"]] == [["XLA Ops"]] * 4

    # Order: hosts with steps by step time, then the others by busy time, then the error.
    stepped = sorted((h for h in own if own[h]["steps"]),
                     key=lambda h: (-statistics.median(d for _, d in own[h]["steps"].values()), h))
    unstepped = sorted((h for h in own if not own[h]["steps"]), key=lambda h: (-sum(own[h]["busy"].values()), h))
    assert [r["host"] for r in body["hosts"]] == stepped + unstepped + ["host08"]
    times = [statistics.median(d for _, d in own[h]["steps"].values()) for h in stepped]
    roll = body["rollup"]
    assert roll["hostsWithSteps"] == len(stepped) == 5 and roll["hosts"] == 8 and roll["hostsRead"] == 7
    assert roll["slowestHost"] == stepped[0]
    assert roll["maxStepPs"] == pytest.approx(max(times)) and roll["minStepPs"] == pytest.approx(min(times))
    assert roll["medianStepPs"] == pytest.approx(statistics.median(times))
    assert roll["maxOverMedian"] == pytest.approx(max(times) / statistics.median(times))
    assert roll["stragglers"] == [h for h, t in zip(stepped, times) if t >= 1.10 * statistics.median(times)]
    assert roll["summary"].startswith(f"{stepped[0]} is the slowest host")
    idle = {h: rows[h]["idleShare"] for h in own if rows[h]["idleShare"] is not None}
    assert roll["mostIdleHost"] == max(idle, key=lambda h: (idle[h], h))
    assert roll["medianIdleShare"] == pytest.approx(statistics.median(idle.values()))
    # Steps several hosts share (the demo programs' "train 0..2"), with the slowest host.
    shared = {s["name"]: s for s in body["steps"]}
    t0 = [(own[h]["steps"]["train 0"][1], h) for h in own if "train 0" in own[h]["steps"]]
    assert shared["train 0"]["hosts"] == len(t0) == 4
    assert (shared["train 0"]["maxPs"], shared["train 0"]["slowestHost"]) == max(t0)
    # The corrupt file is a row with its reason; asked again, the same answer from the cache.
    assert rows["host08"]["status"] == "error" and "truncated" in rows["host08"]["reason"]
    assert rows["host08"]["file"].endswith("host08.xplane.pb")
    assert client.get("/api/trace_hosts", params={"run": run}).json() == body


def test_steps_are_the_trace_viewers_steps(make_client, mixed):
    """The step names and durations are those the trace viewer's step bands show."""
    root, run, _ = mixed
    client = make_client(root)
    rows = {r["host"]: r for r in client.get("/api/trace_hosts", params={"run": run}).json()["hosts"]}
    for host in ("host01", "host04", "host05"):
        tv = client.get("/api/trace/window", params={"run": run, "host": host}).json()["steps"]
        longest = {}
        for s in tv:  # the trace viewer lists a step once per line that has it
            longest[s["name"]] = max(longest.get(s["name"], 0), s["dur"])
        mine = {s["name"]: s["durPs"] / 1e9 for s in rows[host]["steps"]}
        assert set(mine) == set(longest), host
        for name, dur in longest.items():
            assert mine[name] == pytest.approx(dur, abs=1e-6), (host, name)


def test_pod_session_is_read_once_per_host_without_trace_indexes(tmp_path, shared_fixtures_if_any):
    """16 hosts of real profiles; each host's row is cached under its own file: a changed
    file is read again, the others are not; no trace index is built."""
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.server import create_app
    from profscope.storage import LogDir

    made = build_pod_session(tmp_path / "log", 16, public=True, fixtures=shared_fixtures_if_any)
    ws = Workspace(LogDir(str(tmp_path / "log"), listing_ttl=0), DiskCache(tmp_path / "cache"))
    client = TestClient(create_app(ws))
    body = client.get("/api/trace_hosts", params={"run": "pod"}).json()
    assert [r["host"] for r in body["hosts"]] and len(body["hosts"]) == 16
    for r in body["hosts"]:
        want = independent(made[r["host"]])
        assert r["status"] == "ok" and r["spanPs"] == want["span"]
        assert {d["name"]: d["busyPs"] for d in r["devices"]} == want["busy"]
    assert not list((tmp_path / "cache").glob("*/*.d")), "the overview built a trace index"
    # Same file content under two host names: the same numbers.
    same = [h for h in made if made[h] == made["host00"]]
    assert len(same) > 1 and len({(rows := {r["host"]: r for r in body["hosts"]})[h]["busyPs"] for h in same}) == 1

    def entries():
        return {p.name for p in (tmp_path / "cache").rglob("*.json.gz")}  # entries, not their locks

    cold = entries()
    assert client.get("/api/trace_hosts", params={"run": "pod"}).json() == body
    assert entries() == cold  # warm: every row from the cache, nothing made
    shutil.copyfile(made["host05"], tmp_path / "log" / "plugins" / "profile" / "pod" / "host00.xplane.pb")
    again = client.get("/api/trace_hosts", params={"run": "pod"}).json()
    assert len(entries() - cold) == 1  # the changed host's row, and nothing else
    new = {r["host"]: r for r in again["hosts"]}
    assert new["host00"]["spanPs"] == rows["host05"]["spanPs"] and new["host00"]["busyPs"] == rows["host05"]["busyPs"]
    assert {h: new[h] for h in new if h != "host00"} == {h: rows[h] for h in rows if h != "host00"}


def test_refusals_have_the_one_error_shape(demo_client):
    for params, status in (({"run": "nope"}, 404), ({}, 400)):
        res = demo_client.get("/api/trace_hosts", params=params)
        assert res.status_code == status
        assert set(res.json()) == {"ok", "status", "error", "file"}
    runs = demo_client.get("/api/runs").json()["runs"]
    trace = next(r["name"] for r in runs if r["kind"] == "chrome_trace")
    res = demo_client.get("/api/trace_hosts", params={"run": trace})
    assert res.status_code == 404 and "profile run" in res.json()["error"]
    # a one-host run is answered too (its one row)
    mlp = next(r["name"] for r in runs if r["name"].startswith("mlp"))
    body = demo_client.get("/api/trace_hosts", params={"run": mlp}).json()
    assert [r["host"] for r in body["hosts"]] == ["demo-host"] and body["rollup"]["stragglers"] == []


def test_union_against_brute_force():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randrange(0, 40)
        iv = [(b, b + rng.randrange(0, 50)) for b in (rng.randrange(0, 500) for _ in range(n))]
        covered = set()
        for b, e in iv:
            covered.update(range(b, e))
        begin = np.asarray([b for b, _ in iv], np.int64)
        end = np.asarray([e for _, e in iv], np.int64)
        assert trace_hosts.union_ps(begin, end) == len(covered)


def test_rollup_without_steps_or_hosts():
    out = trace_hosts.trace_hosts([trace_hosts.error_row("a", "bad file")])
    assert out["rollup"]["slowestHost"] is None and out["rollup"]["stragglers"] == []
    assert out["rollup"]["mostIdleHost"] is None and "No host has step markers" in out["rollup"]["summary"]
    assert [r["status"] for r in out["hosts"]] == ["error"]


@pytest.mark.parametrize("slots", [2, 4])
def test_a_reader_that_kills_its_worker_costs_only_that_hosts_row(tmp_path, mixed, monkeypatch, slots):
    """The uncached hosts are read in batches, one worker each (all worker slots but one:
    one batch with 2 slots, three with 4); when a worker dies (here host03's read aborts
    the process, as a reader crashing in C code would), the hosts it had not done are
    read one worker each, so only host03 is an error row."""
    import os

    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.formats import xplane_activity
    from profscope.server import create_app
    from profscope.storage import LogDir

    root, run, sources = mixed
    real = xplane_activity.host_activity

    def crashing(raw, path, hostname=None):
        if hostname == "host03":
            os.abort()  # in the forked worker: SIGABRT, no Python exception to catch
        return real(raw, path, hostname)

    monkeypatch.setattr(xplane_activity, "host_activity", crashing)
    cache = DiskCache(tmp_path / "cache", workers=WorkerPool(concurrency=slots))
    client = TestClient(create_app(Workspace(LogDir(str(root), listing_ttl=0), cache)))
    body = client.get("/api/trace_hosts", params={"run": run}).json()
    rows = {r["host"]: r for r in body["hosts"]}
    assert rows["host03"]["status"] == "error" and "SIGABRT" in rows["host03"]["reason"]
    assert rows["host08"]["status"] == "error" and "truncated" in rows["host08"]["reason"]
    for host in ("host01", "host02", "host04", "host05", "host06", "host07"):
        assert rows[host]["status"] == "ok", rows[host]
        assert rows[host]["spanPs"] == independent(sources[host])["span"]
    # the batches (1 or 3), then at least host03 again in a worker of its own, which dies too
    assert cache.workers.stats["runs"] >= (1 if slots == 2 else 3) + 1
    assert cache.workers.stats["killed"] >= 2


def test_a_merged_view_keeps_its_hosts_open_between_windows(tmp_path):
    """A merged timeline of more hosts than the open-index cache held by default (8)
    reopened every host's index on each window (32 pod hosts: a later window 100 -> 19 ms,
    docs/performance.md). Its hosts now stay open: the second window reads the same index
    objects. An index reads its flows only when an XProf answer asks."""
    from profscope.app.queries import TraceQuery, XprofTraceQuery
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.storage import LogDir

    build_pod_session(tmp_path / "log", 12)
    ws = Workspace(LogDir(str(tmp_path / "log"), listing_ttl=0), DiskCache(tmp_path / "cache"))
    run = ws.run("pod")
    query = TraceQuery(hosts=",".join(run.hosts), resolution=500)
    first = ws.trace_view(run, query)
    ws.trace_window(run, query)
    assert len(first.hosts) == 12 and all(h.index._flow is None for h in first.hosts)
    second = ws.trace_view(run, query)
    assert [h.index for h in second.hosts] == [h.index for h in first.hosts]
    assert all(a.index is b.index for a, b in zip(first.hosts, second.hosts))
    answer = ws.trace_viewer_xprof(run, XprofTraceQuery(hosts=",".join(run.hosts), resolution=500))
    flows = sum(len(h.index.flow.seq) for h in second.hosts)
    assert flows and sum("bind_id" in e for e in answer["traceEvents"]) == flows
