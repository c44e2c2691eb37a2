"""The trace viewer's links to the other tools (issue 37 "From the trace";
app/trace_viewer_links.py), on the real profiles of ``shared/fixtures/public_profiles``:

* a counter point of an allocator (xplane ``<allocator> heap allocated``, a PyTorch
  trace's ``memory allocated (device N)``) opens the memory profile of that allocator at
  the same event: the memory profile's event nearest the link's ``t`` (as the page's
  ``selectTime`` picks it) holds the counter's value, and the peak is the counter's max;
* an XLA op links to its instruction's HLO view and to its buffers in the memory viewer,
  a PyTorch kernel to its device's memory profile at its start;
* a target that is not in the run gets no link (the TPU's counter names no allocator,
  the TF GPU ops no module, the B200 trace has no [memory] events)."""

from __future__ import annotations

import bisect

import pytest

from profscope.formats import hlo_proto, xplane
from tests.test_trace_accelerator import public  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def ws(public, tmp_path_factory):  # noqa: F811
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.storage import LogDir

    return Workspace(LogDir(str(public), listing_ttl=0), DiskCache(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def client(ws):
    from fastapi.testclient import TestClient

    from profscope.server import create_app

    return TestClient(create_app(ws), raise_server_exceptions=False)

TF_GPU = ("xplane/tf_gpu/GPU-multi-worker", "34.83.195.179_6003")
MI300_CONV = ("xplane/mi300_jax_conv_xprof_touched/jax_conv_minimal", None)
MI300_GEMM = ("xplane/mi300_jax08_gemm/jax08_gemm", None)
TPU = ("xplane/tpu_inference/2025_12_10_tpu", None)
H100 = ("traces/tracelens_h100_bert_small.trace.json.gz", None)
B200 = ("traces/tracelens_b200_eager.trace.json.gz", None)
KINETO = ("traces/kineto_resnet50_v100.pt.trace.json.gz", None)


def _p(run_host) -> dict:
    run, host = run_host
    return {"run": run, **({"host": host} if host else {})}


def _window(client, rh, **extra) -> dict:
    r = client.get("/api/trace/window", params={**_p(rh), "resolution": 4000, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _timeline(client, rh, memory_id: str) -> tuple[list[float], list[float]]:
    """The memory profile page's timeline of ``memory_id``: (times in ms, bytes counted
    as the counter counts them), from the answers the page itself reads."""
    run, _ = rh
    if run.startswith("traces/"):
        d = client.get("/api/memory_profile", params={"run": run}).json()
        dev = next(x for x in d["devices"] if x["device"] == memory_id)
        return dev["timeline"]["timeMs"], dev["timeline"]["allocatedBytes"]
    d = client.get("/data/plugin/profile/data", params={**_p(rh), "tag": "memory_profile"}).json()
    snaps = d["memoryProfilePerAllocator"][memory_id]["sampledTimelineSnapshots"]
    return ([int(s["timeOffsetPs"]) / 1e9 for s in snaps],
            [float(s["aggregationStats"]["heapAllocatedBytes"]) for s in snaps])


def _nearest(ts: list[float], t: float) -> int:
    """memory_profile_timeline.js nearestIndex: the page's selected event for ``t``."""
    i = bisect.bisect_left(ts, t)
    if i == 0:
        return 0
    if i == len(ts):
        return len(ts) - 1
    return i if ts[i] - t < t - ts[i - 1] else i - 1


def _lands_on_same_event(client, rh, point: dict) -> None:
    link = point["memoryProfile"]
    assert link is not None, point.get("why")
    ts, vals = _timeline(client, rh, link["memory_id"])
    i = _nearest(ts, float(link["t"]))
    # the selected event is the counter's event: same time (to the ns t is written to),
    # and the counter's value is that event's, or a neighbour's at the same time (within
    # one event)
    assert abs(ts[i] - float(link["t"])) < 2e-6, (ts[i], link["t"])
    near = [vals[j] for j in range(max(0, i - 1), min(len(ts), i + 2)) if abs(ts[j] - ts[i]) < 2e-6]
    assert point["value"] in near, (point, near)


def _heap_counters(w) -> list[dict]:
    return [c for c in w["counters"] if c["name"].endswith("heap allocated") or c["name"].startswith("memory allocated")]


@pytest.mark.parametrize("rh", [TF_GPU, MI300_CONV, MI300_GEMM, H100], ids=["tf_gpu", "mi300_conv", "mi300_gemm", "h100"])
def test_a_counter_point_opens_the_memory_profile_at_the_same_event(client, rh):
    """MI300 conv's host lines start at two different times (16,204 ns and
    1,632,920,073 ns): one shift per allocator would put its events 1.63 s off."""
    w = _window(client, rh)
    counters = _heap_counters(w)
    assert counters
    checked = 0
    for c in counters:
        # every sample of small counters, a spread of a large one's
        picks = sorted(set(c["t"][:: max(1, len(c["t"]) // 12)]))
        for t in picks:
            r = client.get("/api/trace/counter", params={**_p(rh), "track": c["track"], "t": t})
            assert r.status_code == 200, r.text
            point = r.json()
            assert point["time"] <= t + 1e-9 and point["name"] == c["name"]
            _lands_on_same_event(client, rh, point)
            checked += 1
    assert checked >= 10


@pytest.mark.parametrize("rh", [TF_GPU, MI300_GEMM, H100], ids=["tf_gpu", "mi300_gemm", "h100"])
def test_the_peak_of_a_counter_opens_the_memory_profile_at_it(client, rh):
    w = _window(client, rh)
    for c in _heap_counters(w):
        whole = client.get("/api/trace/counter", params={**_p(rh), "track": c["track"], "peak": "all"}).json()
        assert whole["value"] == max(c["v"])  # the window at 4000 px keeps each bucket's max
        _lands_on_same_event(client, rh, whole)
        # the window's peak: the largest sample in the window's first half
        a, b = w["fullTimespan"][0], (w["fullTimespan"][0] + w["fullTimespan"][1]) / 2
        half = [v for t, v in zip(c["t"], c["v"]) if a <= t <= b]
        r = client.get("/api/trace/counter", params={**_p(rh), "track": c["track"], "peak": "window", "start_ms": a, "end_ms": b})
        if not half:
            assert r.status_code == 404
            continue
        got = r.json()
        assert got["value"] == max(half) and a <= got["time"] <= b


def test_a_counter_of_the_second_host_on_a_merged_timeline(client):
    """``hosts=a,b``: the window's times are from the earlier host's origin; a counter of
    the other host still opens that host's memory profile at its own event."""
    run, first = TF_GPU
    second = "34.83.195.180_6003"
    both = {"run": run, "hosts": f"{first},{second}"}
    w = client.get("/api/trace/window", params={**both, "resolution": 4000}).json()
    mine = [c for c in _heap_counters(w) if c["track"] >> 20 == 1]  # the second host's (TRACK_ID_SHIFT)
    assert mine
    for c in mine:
        for t in c["t"][:: max(1, len(c["t"]) // 5)]:
            point = client.get("/api/trace/counter", params={**both, "track": c["track"], "t": t}).json()
            assert point["host"] == second and point["memoryProfile"]["host"] == second
            _lands_on_same_event(client, (run, second), point)


def test_a_counter_that_names_no_allocator_gets_no_link(client):
    """TPU: the allocator events name no ``allocator_name`` (their memory ids are the
    devices' ordinals, 0..3), so the trace's "allocator heap allocated" mixes the four:
    no allocator's memory profile is that counter."""
    w = _window(client, TPU)
    c = next(c for c in w["counters"] if c["name"] == "allocator heap allocated")
    point = client.get("/api/trace/counter", params={**_p(TPU), "track": c["track"], "t": c["t"][5]}).json()
    assert point["memoryProfile"] is None and "no allocator 'allocator'" in point["why"]
    ids = client.get("/data/plugin/profile/data", params={**_p(TPU), "tag": "memory_profile"}).json()["memoryIds"]
    assert "allocator" not in ids and ids


def test_counter_requests_are_checked(client):
    w = _window(client, TF_GPU)
    track = w["counters"][0]["track"]
    assert client.get("/api/trace/counter", params={**_p(TF_GPU), "t": 1}).status_code == 400
    assert client.get("/api/trace/counter", params={**_p(TF_GPU), "track": track}).status_code == 400
    assert client.get("/api/trace/counter", params={**_p(TF_GPU), "track": track, "peak": "most"}).status_code == 400
    r = client.get("/api/trace/counter", params={**_p(TF_GPU), "track": 999_999, "t": 1})
    assert r.status_code == 404 and "no counter track" in r.json()["error"]


def _search(client, rh, q: str) -> list[dict]:
    return client.get("/api/trace/search", params={**_p(rh), "q": q, "limit": 200}).json()["matches"]


def _event(client, rh, eid) -> dict:
    r = client.get("/api/trace/event", params={**_p(rh), "id": eid})
    assert r.status_code == 200, r.text
    return r.json()


def _instructions(logdir, run: str, module: str) -> set[str]:
    """The module's instruction names, read straight from the xplane's HloProto."""
    path = next((logdir / run.rsplit("/", 1)[0]).rglob("*.xplane.pb"))
    with open(path, "rb") as f:
        proto = hlo_proto.parse(xplane.hlo_proto_bytes(f, str(path), module), str(path))
    return {i.name for c in proto.hlo_module.computations for i in c.instructions}


@pytest.mark.parametrize("rh", [MI300_GEMM, TPU], ids=["mi300_gemm", "tpu"])
def test_an_xla_op_links_to_its_hlo_and_its_buffers(client, public, rh):  # noqa: F811
    """GPU ops name their op (``hlo_op``) and module; TPU ops only their program id (the
    op is the slice's name, the module the ``XLA Modules`` slice of that id)."""
    run, _ = rh
    modules = client.get("/data/plugin/profile/module_list", params={"run": run}).text.split(",")
    w = _window(client, rh, resolution=2000)
    ops_tracks = {t["id"] for t in w["tracks"] if t["name"].startswith("XLA Ops")}
    ops = [eid for eid, tk in zip(w["slices"]["id"], w["slices"]["track"]) if tk in ops_tracks]
    linked = 0
    for eid in ops[:: max(1, len(ops) // 30)]:
        ev = _event(client, rh, eid)
        links = ev["links"]
        assert ev["module"] in modules
        op = ev["hloOp"] or ev["name"]
        assert links["memoryViewer"]["module_name"] == ev["module"]
        if op in _instructions(public, run, ev["module"]):
            assert links["hlo"] == {"host": ev["track"]["host"], "module_name": ev["module"], "instr": op}
            assert links["memoryViewer"]["hlo_op"] == op
            # the targets answer: the HLO view has the instruction, the memory viewer the module
            hlo = client.get("/api/hlo", params={"run": run, "module_name": ev["module"], "instr": op})
            assert hlo.status_code == 200 and hlo.json()["instruction"]["name"] == op
            mv = client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_viewer", "module_name": ev["module"]})
            assert mv.status_code == 200
            linked += 1
        else:
            assert "hlo" not in links and links["memoryViewer"]["hlo_op"] == ""
    assert linked >= 5


def test_an_xla_module_slice_has_no_instruction_to_link(client):
    mods = [m for m in _search(client, MI300_GEMM, "jit_") if m.get("track") is not None][:20]
    seen = 0
    for m in mods:
        ev = _event(client, MI300_GEMM, m["id"])
        if ev["track"]["name"].startswith("XLA Modules"):  # on GPU: "XLA Modules - from #16"
            assert "hlo" not in ev["links"] and ev["links"]["memoryViewer"]["hlo_op"] == ""
            seen += 1
    assert seen


def test_tf_gpu_ops_name_no_module_so_no_compiler_link(client):
    """TF GPU's kernels carry no hlo_module: the run's memory viewer has no module."""
    # XProf's module_list answers NO_MODULE for a run without one
    assert client.get("/data/plugin/profile/module_list", params={"run": TF_GPU[0]}).text == "NO_MODULE"
    w = _window(client, TF_GPU, resolution=200)
    for eid in w["slices"]["id"][:50]:
        links = _event(client, TF_GPU, eid)["links"]
        assert "hlo" not in links and "memoryViewer" not in links


def _kernel_ids(client, rh, n=30) -> list[int]:
    w = _window(client, rh, resolution=400)
    names = w["names"]
    out = [eid for eid, name in zip(w["slices"]["id"], w["slices"]["name"])
           if names[name].startswith(("void ", "ampere_", "sm80_", "sm90_", "Memcpy", "Memset")) or "kernel" in names[name]]
    return out[:n]


@pytest.mark.parametrize("rh", [H100, KINETO], ids=["h100", "resnet50_v100_old_memory_events"])
def test_a_torch_kernel_opens_its_device_memory_at_its_start(client, rh):
    """The 2021 resnet50 trace's [memory] events have no ``Total Allocated`` (no counter
    to click) and epoch-µs timestamps: its kernels still open the memory profile."""
    ids = _kernel_ids(client, rh)
    assert ids
    dev = client.get("/api/memory_profile", params={"run": rh[0]}).json()["devices"]
    got = 0
    for eid in ids:
        ev = _event(client, rh, eid)
        device = ev["args"].get("device")
        if not isinstance(device, int):
            continue
        link = ev["links"]["memoryProfile"]
        assert link["memory_id"] == f"CUDA:{device}" and link["memory_id"] in [d["device"] for d in dev]
        # the same clock: the memory profile's ms are the trace page's ms (both from the
        # file's earliest event; a few ps of float rounding on epoch µs)
        assert abs(float(link["t"]) - ev["start"]) < 2e-6
        got += 1
    assert got


def test_a_trace_without_memory_events_links_no_memory_profile(client):
    assert client.get("/api/memory_profile", params={"run": B200[0]}).json()["devices"] == []
    ids = _kernel_ids(client, B200)
    assert ids
    for eid in ids:
        ev = _event(client, B200, eid)
        assert "memoryProfile" not in ev["links"]


def test_allocator_clock_maps_both_ways(client, ws):
    """The other way (memory profile → trace), per event: MI300 conv's allocator events sit
    on host lines that start 1.63 s apart; the event of the link's ``t`` is back at the
    counter point's time."""
    run = ws.run(MI300_CONV[0])
    w = _window(client, MI300_CONV)
    for c in _heap_counters(w):
        point = client.get("/api/trace/counter", params={**_p(MI300_CONV), "track": c["track"], "t": c["t"][3]}).json()
        link = point["memoryProfile"]
        ps = ws.allocator_event_in_trace_ps(run, run.hosts[0], link["memory_id"], float(link["t"]))
        assert abs((ps - w["originNs"] * 1000) / 1e9 - point["time"]) < 2e-6


# -- on profiles made by the repo's builders (no shared fixtures needed) --------------------


def _two_clocks_xspace() -> bytes:
    """Two BFC allocators writing on two host lines whose ``timestamp_ns`` are 5 ms apart
    (as on the public MI300 profiles): the same ``offset_ps`` is two different times."""
    from profscope.testing.allocator_xplane import MS, US, Bfc, Space

    sp = Space("host0")
    host = sp.plane("/host:CPU")
    early, late = host.line("pjrt_a", 1, timestamp_ns=1_000), host.line("pjrt_b", 2, timestamp_ns=5_001_000)
    bfcs = [Bfc(host, f"GPU_{i}_bfc", 16 << 30, seed=30 + i, base_addr=0x7F10_0000_0000 + (i << 36)) for i in range(2)]
    live: list[list] = [[], []]
    t = 1 * MS
    for k in range(60):
        which, line = k % 2, (early, late)[(k // 2) % 2]
        t += 7 * US
        if live[which] and k % 5 == 4:
            bfcs[which].free(line, t, live[which].pop(0))
        else:
            live[which].append(bfcs[which].alloc(line, t, (k + 1) * 4096, op="jit(step)/dot"))
    return sp.to_bytes()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A log directory of builder profiles: ``multi_allocator`` (three allocators on four
    lines) and ``two_clocks`` (host lines 5 ms apart)."""
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.server import create_app
    from profscope.storage import LogDir
    from profscope.testing.timelines import builder_logdir

    root = builder_logdir(tmp_path_factory.mktemp("built"), {"multi_allocator": "host0"})
    folder = root / "two_clocks" / "plugins" / "profile" / "2026_01_01_00_00_00"
    folder.mkdir(parents=True)
    (folder / "host0.xplane.pb").write_bytes(_two_clocks_xspace())
    ws = Workspace(LogDir(str(root), listing_ttl=0), DiskCache(tmp_path_factory.mktemp("cache")))
    return TestClient(create_app(ws), raise_server_exceptions=False)


@pytest.mark.parametrize("run", ["multi_allocator/2026_01_01_00_00_00", "two_clocks/2026_01_01_00_00_00"])
def test_every_counter_point_of_a_built_profile_opens_its_event(built, run):
    rh = (run, None)
    w = _window(built, rh)
    counters = _heap_counters(w)
    assert len(counters) >= 2
    for c in counters:
        for t in c["t"]:
            point = built.get("/api/trace/counter", params={**_p(rh), "track": c["track"], "t": t}).json()
            assert point["time"] == t and point["memoryProfile"]["memory_id"] == c["name"].removesuffix(" heap allocated")
            _lands_on_same_event(built, rh, point)
