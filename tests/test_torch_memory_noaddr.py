"""PyTorch traces whose ``[memory]`` events have no ``Addr`` (the 2021 format: only
``Bytes``, ``Device Type``, ``Device Id``), on the real kineto ResNet-50 V100 sample of
``shared/fixtures/public_profiles``: live bytes are the running sum of ``Bytes`` per
device, and nothing is claimed per allocation (no "freed but never allocated", no
"allocated before the trace")."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import numpy as np
import pytest

from profscope.formats import chrome_trace
from profscope.tools import memory_profile_torch

NAME = "kineto_resnet50_v100.pt.trace.json.gz"


@pytest.fixture(scope="module")
def trace(shared_fixtures):
    return shared_fixtures / "public_profiles" / "traces" / NAME


@pytest.fixture(scope="module")
def expected(trace):
    """Per device, computed here from the file with json alone: the events in time order
    (ties in file order), their running sum of Bytes, its peak, counts and sums."""
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    per: dict[tuple, list] = defaultdict(list)
    n = 0
    for ev in doc["traceEvents"]:
        if ev.get("name") != "[memory]":
            continue
        args = ev["args"]
        assert "Addr" not in args and "Total Allocated" not in args  # what this fixture is
        per[(args["Device Type"], args["Device Id"])].append((ev["ts"], n, int(args["Bytes"])))
        n += 1
    out = {}
    for key, evs in per.items():
        evs.sort()
        b = [e[2] for e in evs]
        running, peak, peak_i = 0, None, 0
        for i, x in enumerate(b):
            running += x
            if peak is None or running > peak:
                peak, peak_i = running, i
        assert min(np.cumsum(b)) >= 0  # the sum never goes negative: nothing proves memory from before
        out[key] = {
            "numEvents": len(b),
            "numAllocations": sum(1 for x in b if x > 0),
            "numDeallocations": sum(1 for x in b if x < 0),
            "allocatedBytes": sum(x for x in b if x > 0),
            "freedBytes": -sum(x for x in b if x < 0),
            "peak": peak,
            "peakTs": evs[peak_i][0],
            "end": running,
        }
    return {"total": n, "devices": out}


@pytest.fixture(scope="module")
def payload(trace):
    with open(trace, "rb") as f:
        mem = chrome_trace.memory_events(f, NAME)
    return mem, memory_profile_torch.from_memory_events(mem)


def test_events_know_they_have_no_addresses(payload, expected):
    mem, _ = payload
    assert len(mem) == expected["total"] == 12_838
    assert mem.has_addr is not None and not mem.has_addr.any()
    for (dt, di), e in expected["devices"].items():
        sel = (mem.device_type == dt) & (mem.device_id == di)
        # rebuilt Total Allocated: the running sum of Bytes, starting at 0
        assert int(mem.total_allocated[sel].max()) == e["peak"]
        assert int(mem.total_allocated[sel][-1]) == e["end"]


def test_running_sum_accounting(payload, expected):
    _, out = payload
    assert out["source"]["addresses"] is False
    assert out["source"]["memoryEvents"] == expected["total"]
    devices = {(d["deviceType"], d["deviceIndex"]): d for d in out["devices"]}
    assert set(devices) == set(expected["devices"]) == {(0, -1), (1, 0)}
    for key, e in expected["devices"].items():
        d = devices[key]
        s = d["summary"]
        assert d["accounting"] == "runningSum" and d["addresses"] is False
        assert d["notes"] and "no addresses" in d["notes"][0]
        for k in ("numEvents", "numAllocations", "numDeallocations", "allocatedBytes", "freedBytes"):
            assert s[k] == e[k], k
        assert s["peakAllocatedBytes"] == e["peak"]
        assert s["peakAllocatedTimeMs"] == pytest.approx((e["peakTs"] - out["timeOriginUs"]) / 1000.0)
        assert s["liveBytesAtStart"] == 0
        assert s["liveBytesAtEnd"] == e["end"]
        # no per-allocation claims: unknown, not 0 and not the 18.8 GB of address-0 "pairs"
        for k in ("neverFreedCount", "neverFreedBytes", "freedNotAllocatedCount", "freedNotAllocatedBytes"):
            assert s[k] is None, k
        b = d["breakdownAtPeak"]
        assert b["byAllocation"] is False
        assert b["totalBytes"] == e["peak"]
        assert b["attributedBytes"] == e["peak"] and b["unattributedBytes"] == 0
        assert b["byOp"] == [] and b["byModule"] == [] and b["allocations"] == []
        assert all(st["neverFreedBytes"] is None for st in d["steps"])
        assert {h["kind"] for h in d["leakHints"]} <= {"stepGrowth"}
        assert max(d["timeline"]["allocatedBytes"]) == e["peak"]
    # the numbers of this file, for the record
    cuda = devices[(1, 0)]["summary"]
    assert (cuda["peakAllocatedBytes"], cuda["allocatedBytes"], cuda["liveBytesAtEnd"]) == (2_791_636_480, 63_689_511_936, 0)
    cpu = devices[(0, -1)]["summary"]
    assert (cpu["peakAllocatedBytes"], cpu["liveBytesAtEnd"]) == (57_803_264, 19_267_840)


def test_running_sum_below_zero_is_lifted(tmp_path):
    """A trace cut after its memory was allocated: frees come first, and the running sum
    would dip below 0. The least memory live before the trace that the frees prove is
    added, so the totals never go negative."""
    events = [
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 10 + i,
         "args": {"Bytes": b, "Device Type": 1, "Device Id": 0}}
        for i, b in enumerate([-512, 256, -1024, 2048])
    ]
    path = tmp_path / "cut.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with open(path, "rb") as f:
        mem = chrome_trace.memory_events(f, "cut.json")
    assert mem.total_allocated.tolist() == [768, 1024, 0, 2048]
    d = memory_profile_torch.from_memory_events(mem)["devices"][0]
    assert d["summary"]["liveBytesAtStart"] == 1280
    assert d["breakdownAtPeak"]["unattributedBytes"] == 1280  # live before the trace, proven by the frees
    assert d["breakdownAtPeak"]["attributedBytes"] == 2048 - 1280


def test_addressed_traces_unchanged(tmp_path):
    events = [
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 10 + i,
         "args": {"Bytes": b, "Addr": a, "Total Allocated": t, "Device Type": 1, "Device Id": 0}}
        for i, (b, a, t) in enumerate([(256, 1, 256), (512, 2, 768), (-256, 1, 512)])
    ]
    path = tmp_path / "new.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with open(path, "rb") as f:
        mem = chrome_trace.memory_events(f, "new.json")
    assert mem.has_addr is None
    out = memory_profile_torch.from_memory_events(mem)
    d = out["devices"][0]
    assert out["source"]["addresses"] is True
    assert d["accounting"] == "address" and d["notes"] == []
    assert d["summary"]["neverFreedBytes"] == 512 and d["summary"]["freedNotAllocatedCount"] == 0
    assert d["breakdownAtPeak"]["byAllocation"] is True
