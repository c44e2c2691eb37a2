"""The memory profile through the data API: PyTorch traces and xplane allocator events."""

from __future__ import annotations

import gzip
import json

import pytest

from profscope.app.queries import MemoryProfileQuery

TORCH = "torch/{}.pt.trace.json.gz"


def _data(client, run, **params):
    return client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_profile", **params})


def _native(client, run):
    """profscope's own payload of a trace run (the dashboard's; XProf's data API answers
    XProf's schema)."""
    return client.get("/api/memory_profile", params={"run": run})


def _max_total_allocated(path) -> int:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return max(e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]")


@pytest.mark.parametrize("name", ["mlp_train", "transformer_train", "leak"])
def test_torch_trace_peak_is_the_files_max_total_allocated(demo_client, demo_logdir, name):
    run = TORCH.format(name)
    assert demo_client.get("/data/plugin/profile/run_tools", params={"run": run}).json() == ["trace_viewer@", "memory_profile"]
    body = _native(demo_client, run).json()
    device = body["devices"][0]
    assert device["summary"]["peakAllocatedBytes"] == _max_total_allocated(demo_logdir / run)
    assert body["categoryTimeline"]["categories"]  # the memory-timeline JSON beside it was read
    # XProf's schema of the same run: the highest-peak device first, with the same peak.
    xp = _data(demo_client, run).json()
    first = max(body["devices"], key=lambda d: d["summary"]["peakAllocatedBytes"])
    assert xp["memoryIds"][0] == first["device"]
    summary = xp["memoryProfilePerAllocator"][first["device"]]["profileSummary"]
    assert int(summary["peakStats"]["heapAllocatedBytes"]) == first["summary"]["peakAllocatedBytes"]


def test_torch_leak_is_found(demo_client):
    hints = _native(demo_client, TORCH.format("leak")).json()["devices"][0]["leakHints"]
    growth = [h for h in hints if h["kind"] == "stepGrowth"]
    assert growth and growth[0]["evidence"]["bytesPerStep"] == 65536
    assert not _native(demo_client, TORCH.format("mlp_train")).json()["devices"][0]["leakHints"] or all(
        h["severity"] != "warning" for h in _native(demo_client, TORCH.format("mlp_train")).json()["devices"][0]["leakHints"]
    )


@pytest.mark.parametrize(
    "content",
    [b"", b'{"foo": 1}', b"a,b,c\n1,2,3\n", b'{"traceEvents": [{"name": "[memory]", "ph": "i", "ts": 1'],
)
def test_bad_traces_get_a_4xx_naming_the_file(make_client, tmp_path, content):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    (logdir / "bad.pt.trace.json").write_bytes(content)
    (logdir / "good.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    client = make_client(logdir)
    res = _data(client, "bad.pt.trace.json")
    assert res.status_code == 422, res.text
    assert res.json()["file"].endswith("bad.pt.trace.json")
    assert _data(client, "good.pt.trace.json.gz").status_code == 200  # others undisturbed


def test_truncated_gzip_trace(make_client, tmp_path, demo_logdir):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    data = (demo_logdir / TORCH.format("mlp_train")).read_bytes()
    (logdir / "cut.pt.trace.json.gz").write_bytes(data[: len(data) // 2])
    res = _data(make_client(logdir), "cut.pt.trace.json.gz")
    assert res.status_code == 422 and "cut.pt.trace.json.gz" in res.json()["error"]


TF_RUN = "tf_bfc/2026_11_29_18_51_13"


def test_xplane_allocator_events_match_the_fixture_facts(demo_client):
    """Numbers from the TF fixture's README (computed there from the raw events)."""
    assert demo_client.get("/data/plugin/profile/run_tools", params={"run": TF_RUN}).json() == ["overview_page", "trace_viewer@", "op_profile", "memory_profile", "hlo_stats"]
    body = _data(demo_client, TF_RUN, host="vm").json()
    assert body["memoryIds"] == ["bfc_cpu_allocator_for_gpu"]
    allocator = body["memoryProfilePerAllocator"]["bfc_cpu_allocator_for_gpu"]
    assert int(allocator["profileSummary"]["peakBytesUsageLifetime"]) == 16_014_592
    assert int(allocator["profileSummary"]["peakStats"]["heapAllocatedBytes"]) == 15_857_920
    summary = body["profscope"]["allocators"]["bfc_cpu_allocator_for_gpu"]["summary"]
    assert (summary["allocations"], summary["deallocations"]) == (295, 295)
    assert _data(demo_client, TF_RUN).json() == body  # the only host is the default


def test_xplane_memory_profile_errors(demo_client, make_client, demo_copy):
    _bad = _data(demo_client, TF_RUN, host="nope")
    assert _bad.status_code == 404 and "no host" in _bad.json()["error"]
    xplane = next((demo_copy / "tf_bfc").rglob("vm.xplane.pb"))
    xplane.write_bytes(xplane.read_bytes()[:5000])
    res = _data(make_client(demo_copy), TF_RUN, host="vm")
    assert res.status_code == 422 and res.json()["file"].endswith("vm.xplane.pb")


def test_a_cold_profile_is_converted_once_with_or_without_its_host(demo_client):
    """Issue 32.7: no host means the run's first; before, ``host`` omitted (OOM risk of a
    one-host run asks so) and ``host=vm`` (the page, XProf) were two cache keys, and a
    cold memory profile converted the same xplane twice."""
    ws = demo_client.app.state.workspace
    run = next(r for r in ws.runs() if r.name.startswith("tf_bfc/"))
    tool = ws.tool_named("memory_profile")
    implicit, explicit = MemoryProfileQuery(), MemoryProfileQuery(host=run.hosts[0])
    assert not ws.cache.has(ws.tool_data_key(run, tool, explicit))
    assert demo_client.get("/data/plugin/profile/data", params={"run": run.name, "tag": "oom_risk"}).status_code == 200
    # OOM risk read the memory profile without a host: the page's request (with it) is cached
    assert ws.cache.has(ws.tool_data_key(run, tool, explicit))
    assert ws.tool_data_key(run, tool, implicit) == ws.tool_data_key(run, tool, explicit)
    assert _data(demo_client, run.name).content == _data(demo_client, run.name, host=run.hosts[0]).content
