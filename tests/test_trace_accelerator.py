"""The trace viewer on the real accelerator profiles and PyTorch CUDA traces of
``shared/fixtures/public_profiles`` (GPU, TPU, ROCm): every endpoint answers, Chrome-trace
flows are paired whatever their order in the file, epoch timestamps work, and XProf's
own requests (whole answer, event details) get XProf's shape.

(Every event and flow against XProf's own answers: test_trace_golden_public.py.)"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from profscope.formats import chrome_trace

TRACES = ("tracelens_h100_bert_small", "tracelens_b200_eager", "kineto_resnet50_v100", "hta_alexnet",
          "hta_mi250_rocm62")
XPROF_KEYS = ("displayTimeUnit", "metadata", "codeLink", "useNewBackend", "details", "returnedEventsSize",
              "filteredByVisibility", "fullTimespan", "stackFrames", "traceEvents", "showCounterMessage",
              "totalCounterEvents")


@pytest.fixture(scope="module")
def public(shared_fixtures) -> Path:
    return shared_fixtures / "public_profiles"


@pytest.fixture(scope="module")
def client(public, tmp_path_factory):
    from fastapi.testclient import TestClient

    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.server import create_app
    from profscope.storage import LogDir

    ws = Workspace(LogDir(str(public), listing_ttl=0), DiskCache(tmp_path_factory.mktemp("cache")))
    return TestClient(create_app(ws), raise_server_exceptions=False)


def _trace_runs(client) -> list[tuple[str, str]]:
    """(run, host) of every readable profile and trace in the folder."""
    out = []
    for run in client.get("/data/plugin/profile/runs").json():
        if run.startswith("snapshots/") or "corrupt" in run:
            continue
        hosts = client.get("/data/plugin/profile/hosts", params={"run": run, "tag": "trace_viewer@"}).json()
        names = [h["hostname"] for h in hosts if h["hostname"] != "ALL_HOSTS"] or [""]
        out += [(run, h) for h in names]
    return out


def _independent_pairs(path: Path) -> int:
    """Flow arrows counted straight from the file: per (cat, id), its s/t/f points in
    time order, each point after an ``s`` joined to the one before it."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    points: dict = {}
    for e in doc["traceEvents"]:
        if e.get("ph") in ("s", "t", "f") and "id" in e:
            points.setdefault((str(e.get("cat")), str(e["id"])), []).append((e["ts"], "stf".index(e["ph"])))
    n = 0
    for pts in points.values():
        open_ = False
        for _, ph in sorted(pts):
            if ph == 0:
                open_ = True
            elif open_:
                n += 1
                open_ = ph != 2
    return n


def test_every_trace_endpoint_answers_on_every_fixture(client):
    runs = _trace_runs(client)
    assert len(runs) >= 10  # 4 xplane sessions (tf_gpu: 2 hosts) and 5 traces
    for run, host in runs:
        p = {"run": run, **({"host": host} if host else {})}
        w = client.get("/api/trace/window", params=p)
        assert w.status_code == 200, (run, w.text)
        w = w.json()
        assert w["slices"]["id"], run
        ev = client.get("/api/trace/event", params={**p, "id": w["slices"]["id"][0]})
        assert ev.status_code == 200, (run, ev.text)
        name = w["names"][w["slices"]["name"][0]]
        found = client.get("/api/trace/search", params={**p, "q": name[:8] or "a"})
        assert found.status_code == 200, (run, found.text)
        ex = client.get("/api/trace/export", params={**p, "start_ms": 0, "end_ms": w["fullTimespan"][1] / 10})
        assert ex.status_code == 200 and json.loads(ex.content)["traceEvents"], run
        x = client.get("/data/plugin/profile/data", params={**p, "tag": "trace_viewer@", "resolution": 4040})
        assert x.status_code == 200, (run, x.text)
        body = x.json()
        # every key XProf 2.24.2 sends: its UI reads showCounterMessage.length
        assert all(k in body for k in XPROF_KEYS), (run, sorted(set(XPROF_KEYS) - set(body)))
        assert body["returnedEventsSize"] == sum(e["ph"] == "X" for e in body["traceEvents"]) > 0


@pytest.mark.parametrize("name", TRACES)
def test_chrome_flows_are_paired_whatever_their_order(public, name):
    path = public / "traces" / f"{name}.trace.json.gz"
    if not path.exists():
        path = public / "traces" / f"{name}.pt.trace.json.gz"
    with path.open("rb") as f:
        ev = chrome_trace.trace_columns(f, str(path))
    want = _independent_pairs(path)
    assert len(ev.flows) == want
    # kineto writes the GPU end of each launch before its CPU start: those are paired too
    assert want >= {"tracelens_h100_bert_small": 61, "tracelens_b200_eager": 929,
                    "kineto_resnet50_v100": 9096}.get(name, 1)
    for _, t0, ts0, t1, ts1 in ev.flows:
        assert ts1 >= ts0


@pytest.mark.parametrize("name", TRACES)
def test_chrome_flows_reach_xprofs_answer(public, client, name):
    """XProf's trace_viewer@ answer carries every flow of a PyTorch trace as XProf's own
    answers carry an xplane's (FlowV2: ``bind_id``, ``flow_out`` on one slice, ``flow_in``
    on another): one pair per arrow of the page, the ``flow_out`` slice holding the flow's
    ``s`` point on its thread (the CPU launch) and the ``flow_in`` one its ``f`` point
    (the GPU kernel). Threads compared as Chrome's viewer keys them: 25738 and "25738" are
    one thread (kineto's 2021 sample writes both)."""
    path = public / "traces" / f"{name}.trace.json.gz"
    if not path.exists():
        path = public / "traces" / f"{name}.pt.trace.json.gz"
    run = f"traces/{path.name}"
    body = client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@", "resolution": 0}).json()
    pairs: dict = {}
    for e in body["traceEvents"]:
        if "bind_id" in e:
            pairs.setdefault(e["bind_id"], []).append(e)
    assert len(pairs) == _independent_pairs(path)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    # each thread of the answer is the file's thread of its slices (a tid "stream 7" is a
    # number in the answer)
    where = {(e.get("name"), round(e["ts"], 3)): (str(e["pid"]), str(e["tid"])) for e in doc["traceEvents"]
             if e.get("ph") == "X"}
    by_id = {(e["pid"], e["tid"]): where[(e["name"], round(e["ts"], 3))] for e in body["traceEvents"]
             if e.get("ph") == "X" and (e["name"], round(e["ts"], 3)) in where}
    points: dict = {}
    for e in doc["traceEvents"]:
        if e.get("ph") in ("s", "f"):
            points.setdefault((e["ph"], str(e["pid"]), str(e["tid"])), []).append(e["ts"])

    def holds(ev, ph) -> bool:
        key = by_id[(ev["pid"], ev["tid"])]
        return any(ev["ts"] - 1e-3 <= t <= ev["ts"] + ev["dur"] + 1e-3 for t in points.get((ph, *key), ()))

    for bid, evs in pairs.items():
        kinds = sorted(("out" if e.get("flow_out") else "") + ("in" if e.get("flow_in") else "") for e in evs)
        assert kinds == ["in", "out"], (bid, evs)
        out = next(e for e in evs if e.get("flow_out"))
        end = next(e for e in evs if e.get("flow_in"))
        assert holds(out, "s") and holds(end, "f"), (out, end)
        assert end["ts"] >= out["ts"]


def test_flow_arrows_reach_the_page_api(client):
    w = client.get("/api/trace/window", params={"run": "traces/tracelens_b200_eager.trace.json.gz"}).json()
    f = w["flows"]
    assert len(f["name"]) == 929
    kinds = {t["id"]: w["processes"] for t in w["tracks"]}
    assert kinds
    # CPU launch -> GPU kernel: the arrows cross from one process to another
    pid = {t["id"]: t["pid"] for t in w["tracks"]}
    assert sum(pid[a] != pid[b] for a, b in zip(f["fromTrack"], f["toTrack"])) >= 900


def test_epoch_timestamps_show_the_same_events_as_the_rebased_trace(public, tmp_path, make_client):
    src = public / "traces" / "kineto_resnet50_v100.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    t0 = min(e["ts"] for e in doc["traceEvents"] if isinstance(e.get("ts"), (int, float)))
    assert t0 > 1.5e15  # µs since 1970, no baseTimeNanoseconds
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] -= t0
    (tmp_path / "logdir").mkdir()
    (tmp_path / "logdir" / "epoch.trace.json.gz").write_bytes(src.read_bytes())
    (tmp_path / "logdir" / "rebased.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    c = make_client(tmp_path / "logdir")

    def events(run):
        w = c.get("/api/trace/window", params={"run": run, "resolution": 100000})
        assert w.status_code == 200, w.text
        w = w.json()
        s = w["slices"]
        return w, Counter((w["names"][s["name"][i]], round(s["start"][i] * 1e6), round(s["dur"][i] * 1e6))
                          for i in range(len(s["id"])))

    (we, a), (wr, b) = events("epoch.trace.json.gz"), events("rebased.trace.json.gz")
    assert len(a) > 3000 and a == b
    assert we["originNs"] == wr["originNs"] + t0 * 1000
    assert len(we["flows"]["name"]) == len(wr["flows"]["name"]) > 0
    x = c.get("/data/plugin/profile/data", params={"run": "epoch.trace.json.gz", "tag": "trace_viewer@"})
    assert x.status_code == 200
    assert x.json()["fullTimespan"][0] == pytest.approx(t0 / 1000, abs=1)


def test_xprof_event_details_request_answers_that_one_event(client):
    run = "traces/tracelens_h100_bert_small.trace.json.gz"
    whole = client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@"}).json()
    xs = [e for e in whole["traceEvents"] if e["ph"] == "X"]
    assert len(xs) > 1000
    ops = [e for e in xs if e["name"].startswith("aten::")]  # torch ops carry args (shapes, ids)
    for e in (xs[0], ops[0], ops[len(ops) // 2], xs[-1]):
        # what XProf's UI sends on a click (uid from the event's args)
        r = client.get("/data/plugin/profile/data", params={
            "run": run, "tag": "trace_viewer@", "event_name": e["name"], "start_time_ms": str(e["ts"] / 1e3),
            "duration_ms": str(e["dur"] / 1e3), "unique_id": str(e["args"]["uid"])})
        assert r.status_code == 200, r.text
        one = [x for x in r.json()["traceEvents"] if x["ph"] == "X"]
        assert len(one) == 1 and one[0]["name"] == e["name"] and one[0]["ts"] == e["ts"]
        if e["name"].startswith("aten::"):
            assert len(one[0]["args"]) > 1  # the event's own args, not only its uid
    # an unknown event: no event, not an error
    r = client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@", "event_name": "nope",
                                                       "start_time_ms": "1", "duration_ms": "1", "unique_id": "3"})
    assert r.status_code == 200 and not [x for x in r.json()["traceEvents"] if x["ph"] == "X"]
    bad = client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@", "event_name": "x",
                                                         "start_time_ms": "soon"})
    assert bad.status_code == 400 and "start_time_ms" in bad.json()["error"]


def test_xprof_span_leaves_out_allocator_counters(client):
    """tf_gpu's allocator events start 1.7 s before its first slice: XProf's
    fullTimespan (and so its opening view) starts at the first slice."""
    run = "xplane/tf_gpu/GPU-multi-worker"
    body = client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@", "resolution": 4040}).json()
    xs = [e for e in body["traceEvents"] if e["ph"] == "X"]
    first = min(e["ts"] for e in xs) / 1e3
    last = max(e["ts"] + e["dur"] for e in xs) / 1e3
    # printed as XProf prints them: six significant digits
    assert body["fullTimespan"] == [float(f"{first:.6g}"), float(f"{last:.6g}")]
    assert body["fullTimespan"][1] != pytest.approx(last, abs=1e-6)  # rounded, as XProf's
    w = client.get("/api/trace/window", params={"run": run}).json()
    assert w["counters"]  # the allocator's counters are still on our own page
