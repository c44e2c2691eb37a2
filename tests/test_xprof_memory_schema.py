"""XProf clients on runs XProf itself cannot read: PyTorch snapshots and traces get XProf's
``memory_profile`` schema, unreadable runs list no tool, and the memory viewer's
allocation-timeline link opens an offline HTML page.

The schema reference is XProf 2.24.2's own converter output on xplanes, as recorded in
tests/golden/memory_profile/ (tests/test_memory_profile.py replays it): every key path it
emits, with its JSON type, must be in our answers for the public snapshot and trace.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden" / "memory_profile"
# XProf-recorded answers of profiles with allocator events (one allocator, several,
# special rows, a sampled timeline).
SCHEMA_GOLDENS = ("tf_bfc_cpu.json.gz", "multi_allocator.json.gz", "sampled_timeline.json.gz")
SNAPSHOT = "niu_fwd_bwd_200_mixed.pickle"
TRACE = "tracelens_h100_bert_small.trace.json.gz"
# 2021 format (no Addr, no totals), 8,220 CUDA:0 and 4,618 CPU events: XProf's sampling
# keeps 1,000 of each; profscope's own time-binned timeline has 499 / 648 points.
OLD_TRACE = "kineto_resnet50_v100.pt.trace.json.gz"
LFS = "kbjiang_memory_256_lfs_pointer.pickle"
CORRUPT = "tpu_inference_corrupt"


@pytest.fixture(scope="module")
def public_logdir(shared_fixtures, tmp_path_factory) -> Path:
    src = shared_fixtures / "public_profiles"
    logdir = tmp_path_factory.mktemp("public_logdir")
    shutil.copyfile(src / "snapshots" / SNAPSHOT, logdir / SNAPSHOT)
    shutil.copyfile(src / "snapshots" / LFS, logdir / LFS)
    shutil.copyfile(src / "traces" / TRACE, logdir / TRACE)
    shutil.copyfile(src / "traces" / OLD_TRACE, logdir / OLD_TRACE)
    for f in (src / "xplane" / CORRUPT).rglob("*"):
        if f.is_file():
            dest = logdir / CORRUPT / f.relative_to(src / "xplane" / CORRUPT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
    return logdir


@pytest.fixture(scope="module")
def client(public_logdir, tmp_path_factory):
    from fastapi.testclient import TestClient

    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.server import create_app
    from profscope.storage import LogDir

    ws = Workspace(LogDir(str(public_logdir), listing_ttl=0), DiskCache(tmp_path_factory.mktemp("cache")))
    return TestClient(create_app(ws))


def _get(client, route: str, **params):
    return client.get(f"/data/plugin/profile/{route}", params=params)


def _paths(value, prefix: str = "") -> dict[str, str]:
    """Key path -> JSON type; allocators become ``*``, list items ``[]`` (all merged)."""
    out: dict[str, str] = {prefix or "$": type(value).__name__}
    if isinstance(value, dict):
        for k, v in value.items():
            key = "*" if prefix.endswith("memoryProfilePerAllocator") else k
            out.update(_paths(v, f"{prefix}.{key}"))
    elif isinstance(value, list):
        for v in value:
            out.update(_paths(v, f"{prefix}[]"))
    return out


def _xprof_paths() -> dict[str, str]:
    ref: dict[str, str] = {}
    for name in SCHEMA_GOLDENS:
        ref.update(_paths(json.loads(gzip.decompress((GOLDEN / name).read_bytes()))))
    return ref


def _rows_bytes(profile: dict) -> int:
    """The bytes of XProf's breakdown rows, read as XProf's page reads them: each active
    allocation points at a snapshot (snapshotIndex >= 0) or a special row."""
    total = 0
    for row in profile["activeAllocations"]:
        i = int(row["snapshotIndex"])
        meta = (profile["memoryProfileSnapshots"][i]["activityMetadata"] if i >= 0
                else profile["specialAllocations"][int(row["specialIndex"])])
        total += int(meta["allocationBytes"]) * int(row["numOccurrences"])
    return total


def _run(client, name: str) -> str:
    runs = _get(client, "runs").json()
    return next(r for r in runs if r.startswith(name))


def _xprof_answer(client, run: str) -> dict:
    hosts = _get(client, "hosts", run=run, tag="memory_profile").json()
    assert hosts, "XProf's page needs a host to select"
    res = _get(client, "data", run=run, tag="memory_profile", host=hosts[0]["hostname"])
    assert res.status_code == 200, res.text[:500]
    return res.json()


@pytest.mark.parametrize("name", [SNAPSHOT, TRACE])
def test_every_key_xprof_emits_is_in_our_answer(client, name):
    run = _run(client, name)
    assert "memory_profile" in _get(client, "run_tools", run=run).json()
    ours = _paths(_xprof_answer(client, run))
    ref = _xprof_paths()
    assert len(ref) > 40
    # Items of a list that is empty in our answer cannot be checked there (XProf's
    # lists may be empty too: no special row without memory from before the recording).
    empty = {p for p, t in ours.items() if t == "list" and f"{p}[]" not in ours}
    missing = sorted(p for p in set(ref) - set(ours) if not any(p.startswith(f"{e}[]") for e in empty))
    assert empty <= {".hloModules", ".memoryProfilePerAllocator.*.specialAllocations"}, empty
    assert not missing, f"keys XProf's converter emits that {name} lacks: {missing}"
    wrong = {p: (ref[p], ours[p]) for p in ref if p in ours and ours[p] != ref[p] and {ref[p], ours[p]} != {"int", "float"}}
    assert not wrong, f"JSON types differ from XProf's (XProf, ours): {wrong}"


def test_snapshot_numbers_are_profscopes(client):
    """The summary XProf's page prints is the overview's peak (the dashboard's numbers)."""
    run = _run(client, SNAPSHOT)
    answer = _xprof_answer(client, run)
    host = _get(client, "hosts", run=run, tag="memory_profile").json()[0]["hostname"]
    assert answer["memoryIds"] == [host] == ["cuda:0"]
    overview = client.get("/api/snapshot/overview", params={"run": run, "host": host}).json()
    profile = answer["memoryProfilePerAllocator"][host]
    summary, peak = profile["profileSummary"], profile["profileSummary"]["peakStats"]
    assert int(peak["heapAllocatedBytes"]) == int(peak["peakBytesInUse"]) == overview["summary"]["peak"]["bytes"]
    assert int(summary["peakBytesUsageLifetime"]) == overview["summary"]["peak"]["bytes"]
    # The sampled timeline keeps the peak (XProf's max box filter) and holds allocations.
    timeline = profile["sampledTimelineSnapshots"]
    assert len(timeline) == 1000
    assert max(int(s["aggregationStats"]["heapAllocatedBytes"]) for s in timeline) == overview["summary"]["peak"]["bytes"]
    assert any(s["activityMetadata"]["memoryActivity"] == "ALLOCATION" for s in timeline)
    # The rows live at the peak add up to it.
    assert _rows_bytes(profile) == overview["summary"]["peak"]["bytes"]
    assert profile["memoryProfileSnapshots"]  # rows that point at their allocation


@pytest.mark.parametrize("name", [TRACE, OLD_TRACE])
def test_trace_numbers_are_profscopes(client, public_logdir, name):
    from profscope.formats import chrome_trace
    from profscope.tools.memory_profile_allocator import _sample  # XProf's rule, replayed on its goldens

    run = _run(client, name)
    assert _get(client, "hosts", run=run, tag="memory_profile").json() == [{"hostname": name}]
    bad = _get(client, "data", run=run, tag="memory_profile", host="other.trace.json")
    assert bad.status_code == 404 and name in bad.json()["error"]
    answer = _xprof_answer(client, run)
    native = client.get("/api/memory_profile", params={"run": run}).json()
    devices = {d["device"]: d for d in native["devices"]}
    assert set(answer["memoryIds"]) == set(devices)
    # Both pages open on their first device: the one with the highest peak (CUDA:0; the
    # CPU holds 16 B on the H100 trace, 55 MiB on the V100 one).
    assert answer["memoryIds"][0] == native["devices"][0]["device"] == "CUDA:0"
    # XProf's capacity is the device the trace states, the one the OOM risk rates against.
    risk = _get(client, "data", run=run, tag="oom_risk").json()
    assert risk["capacitySource"] == "trace_device"
    assert int(answer["memoryProfilePerAllocator"]["CUDA:0"]["profileSummary"]["memoryCapacity"]) == risk["capacityBytes"]
    with gzip.open(public_logdir / name) as f:
        mem = chrome_trace.memory_events(f, name)
    for mid, profile in answer["memoryProfilePerAllocator"].items():
        dev = devices[mid]
        s = dev["summary"]
        summary = profile["profileSummary"]
        assert int(summary["peakStats"]["heapAllocatedBytes"]) == s["peakAllocatedBytes"]
        assert int(summary["peakBytesUsageLifetime"]) == s["peakAllocatedBytes"]
        if mid == "CPU":  # no device memory stated: the reserved bytes, at least the peak
            assert int(summary["memoryCapacity"]) == max(s["peakReservedBytes"] or 0, s["peakAllocatedBytes"])
        # XProf's SampleMemoryProfileTimeline over every event of the device: all of them
        # up to 1,000, else a max box filter of 1,000 rows.
        timeline = profile["sampledTimelineSnapshots"]
        events = (mem.device_type == dev["deviceType"]) & (mem.device_id == dev["deviceIndex"])
        totals = mem.total_allocated[events]
        assert len(timeline) == min(1000, s["numEvents"])
        assert [int(x["aggregationStats"]["heapAllocatedBytes"]) for x in timeline] == totals[_sample(totals, 1000)].tolist()
        acts = [x["activityMetadata"]["memoryActivity"] for x in timeline]
        if s["numEvents"] <= 1000:  # every event is a row: XProf's page counts them all
            assert acts.count("ALLOCATION") == s["numAllocations"] and acts.count("DEALLOCATION") == s["numDeallocations"]
        bd = dev["breakdownAtPeak"]
        # Without addresses (2021) no block is known live at the peak: no rows.
        assert _rows_bytes(profile) == (bd["totalBytes"] if bd["byAllocation"] else 0)


def test_unreadable_runs_list_no_tool_and_data_names_the_problem(client):
    """XProf answers run_tools 200 [] for a run it cannot read; data stays a 4xx."""
    run = _run(client, CORRUPT)
    res = _get(client, "run_tools", run=run)
    assert res.status_code == 200 and res.json() == []
    body = _get(client, "data", run=run, tag="memory_profile").json()
    assert body["ok"] is False and 400 <= body["status"] < 500
    assert body["file"].endswith(".xplane.pb") and "truncated" in body["error"]


def test_a_git_lfs_pointer_is_named_as_such(client):
    run = _run(client, LFS)
    res = _get(client, "run_tools", run=run)
    assert res.status_code == 200 and res.json() == []
    res = _get(client, "data", run=run, tag="memory_profile")
    body = res.json()
    assert res.status_code == 422 and body["file"].endswith(LFS)
    assert "a git-LFS pointer, not a snapshot" in body["error"]
    assert "4,494,887 bytes" in body["error"]  # the size the pointer names


def test_allocation_timeline_is_an_offline_html_page(demo_client):
    run = next(r for r in _get(demo_client, "runs").json() if r.startswith("mlp/"))
    module = next(m for m in _get(demo_client, "module_list", run=run).text.split(",") if m.startswith("jit_train_step"))
    params = {"run": run, "tag": "memory_viewer", "module_name": module, "memory_space": "0"}
    payload = _get(demo_client, "data", **params).json()
    res = _get(demo_client, "data", **params, view_memory_allocation_timeline="true")
    assert res.status_code == 200 and res.headers["content-type"].startswith("text/html")
    html = res.text
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    assert not re.search(r"https?://", html), "the page must open offline"
    assert "<script" not in html
    buffers = [b for b in payload["bufferBlocks"] if b.get("logicalBufferId", 0) != -1]
    assert len(buffers) > 10
    assert html.count('<rect class="buffer"') == len(buffers)
    biggest = max(buffers, key=lambda b: b.get("size", 0))
    assert biggest["name"] in html
    assert module in html
    # A bad module is still the JSON 4xx.
    bad = _get(demo_client, "data", **{**params, "module_name": "nope"}, view_memory_allocation_timeline="true")
    assert bad.status_code == 404 and bad.json()["ok"] is False
