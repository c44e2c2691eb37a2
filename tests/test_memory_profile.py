"""Memory profile from xplane allocator events: XProf 2.24.2's numbers, and what they mean.

* Every answer XProf 2.24.2 gave (``tests/golden/memory_profile``, recorded by
  ``scripts/record_xprof_memory_profile_golden.py`` on the real TF profile in the shared
  fixtures and on every builder scenario) equals ours, floats exactly. The one thing XProf
  does not decide reproducibly, which of several identical live allocations a merged
  breakdown row points at, is compared up to that choice.
* On the TF fixture the summary agrees with the facts its README lists.
* Leak hints: the steady leak of the leak builder is found with its exact bytes per step;
  the balanced profiles show none.
* Peaks on out-of-order events, several allocators and hosts, device planes ignored.
* Bad input gets BadInput naming the file.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import json
import random
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from profscope.model.stdsort import std_sort_order
from profscope.errors import BadInput
from profscope.formats import xplane
from profscope.formats import xplane_allocator as xm
from profscope.model import allocator as ma
from profscope.tools import memory_profile_allocator as mp
from profscope.testing import allocator_xplane as ax

GOLDEN = Path(__file__).parent / "golden" / "memory_profile"
INDEX = json.loads((GOLDEN / "index.json").read_text())
CASES = INDEX["cases"]
BY_NAME = {c["name"]: c for c in CASES}
MIB = 1 << 20


def _read(data: bytes, name: str = "host0.xplane.pb", progress=None) -> ma.AllocatorEvents:
    return xm.read_allocator_events(io.BytesIO(data), name, progress=progress)


def _input(case: dict, request) -> bytes:
    if "builder" in case["input"]:
        data = ax.build(case["input"]["builder"])
    else:
        data = (request.getfixturevalue("shared_fixtures") / case["input"]["shared"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == case["input_sha256"], (
        "the input changed since XProf's answer was recorded; re-run "
        "scripts/record_xprof_memory_profile_golden.py")
    return data


def _golden(case: dict) -> dict:
    if case.get("empty_body"):
        return {}
    return json.loads(gzip.decompress((GOLDEN / case["golden"]).read_bytes()))


_RESULTS: dict[str, dict] = {}


def _ours(name: str, request) -> dict:
    if name not in _RESULTS:
        case = BY_NAME[name]
        _RESULTS[name] = mp.from_allocator_events(_read(_input(case, request), f"{case['host']}.xplane.pb"))
    return _RESULTS[name]


def _xprof_part(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "profscope"}


def _canonical(result: dict) -> dict:
    """Forget which of several identical live allocations a merged row points at.

    XProf lists the live allocations from an ``absl::flat_hash_map`` (seeded per
    process) before sorting them, so when rows are merged the snapshot kept can change
    from one run of XProf to the next (seen on gpu_layout: 1 run in 10). The row's
    identity (sizes, op, region, dtype, shape, step, activity) is kept; the snapshot's
    time, allocator state and address are dropped.
    """
    out = copy.deepcopy(result)
    for alloc in out.get("memoryProfilePerAllocator", {}).values():
        snaps = alloc["memoryProfileSnapshots"]
        for row in alloc["activeAllocations"]:
            i = int(row["snapshotIndex"])
            if i >= 0 and int(row["numOccurrences"]) > 1:
                s = snaps[i]
                s.pop("timeOffsetPs")
                s.pop("aggregationStats")
                s["activityMetadata"].pop("address")
    return out


def _exact_equal(ours, theirs, where="$"):
    """Equal as parsed JSON, every number the same double (1 == 1.0 is fine)."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and ours.keys() == theirs.keys(), (where, sorted(set(ours) ^ set(theirs)))
        for k in theirs:
            _exact_equal(ours[k], theirs[k], f"{where}.{k}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), (where, len(ours), len(theirs))
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _exact_equal(a, b, f"{where}[{i}]")
    elif isinstance(theirs, (int, float)) and not isinstance(theirs, bool):
        assert isinstance(ours, (int, float)) and not isinstance(ours, bool), where
        assert float(ours).hex() == float(theirs).hex(), (where, ours, theirs)
    else:
        assert ours == theirs, (where, ours, theirs)


# ---------------------------------------------------------------------------
# Golden: XProf 2.24.2's own answers
# ---------------------------------------------------------------------------


def test_golden_covers_every_scenario():
    assert INDEX["_meta"]["xprof_version"] == "2.24.2"
    recorded = {c["input"].get("builder") for c in CASES}
    assert set(ax.SCENARIOS) <= recorded
    assert any("shared" in c["input"] for c in CASES)
    total = sum(p.stat().st_size for p in GOLDEN.iterdir())
    assert total < 500_000


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.shared) if "shared" in c["input"] else c for c in CASES],
                         ids=lambda c: c["name"])
def test_matches_xprof(case, request):
    ours = _xprof_part(_ours(case["name"], request))
    theirs = _golden(case)
    _exact_equal(_canonical(ours), _canonical(theirs))


def test_merged_rows_point_at_the_earliest_identical_allocation(request):
    """Our choice among identical rows is fixed: the earliest snapshot of the group."""
    result = _ours("merged_rows", request)
    alloc = result["memoryProfilePerAllocator"]["GPU_0_bfc"]
    merged = [r for r in alloc["activeAllocations"] if int(r["numOccurrences"]) > 1]
    assert merged and int(merged[0]["numOccurrences"]) == 4
    snap = alloc["memoryProfileSnapshots"][int(merged[0]["snapshotIndex"])]
    assert snap["activityMetadata"]["tfOpName"] == "layer/attention"
    assert snap["activityMetadata"]["regionType"] == "temp"
    # the four temps of step 1 were allocated at 7010, 7011, 7012, 7013 us
    assert snap["timeOffsetPs"] == str(7_010_000_000)
    # the synthetic rows: the stack reservation and memory allocated before the step
    specials = {s["tfOpName"]: s for s in alloc["specialAllocations"]}
    assert specials["stack"]["allocationBytes"] == str(2 * MIB)
    assert specials["unused preallocated device memory"]["regionType"] == "persist/dynamic"


def test_output_is_json_and_compact(request):
    result = _ours("sampled_timeline", request)
    text = json.dumps(result, allow_nan=False)
    assert len(text) < 2_000_000
    alloc = result["memoryProfilePerAllocator"]["GPU_0_bfc"]
    assert len(alloc["sampledTimelineSnapshots"]) == mp.MAX_TIMELINE_SNAPSHOTS


# ---------------------------------------------------------------------------
# The real TF profile: what its README says, and what XProf says
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tf_profile(shared_fixtures):
    path = shared_fixtures / BY_NAME["tf_bfc_cpu"]["input"]["shared"]
    with open(path, "rb") as f:
        events = xm.read_allocator_events(f, str(path))
    return events, mp.from_allocator_events(events)


def test_fixture_summary_matches_readme_and_xprof(tf_profile):
    events, result = tf_profile
    theirs = _golden(BY_NAME["tf_bfc_cpu"])
    name = "bfc_cpu_allocator_for_gpu"
    assert result["memoryIds"] == theirs["memoryIds"] == [name]
    assert events.memory_ids == [name]
    s = result["profscope"]["allocators"][name]["summary"]
    assert (s["allocations"], s["deallocations"], s["imbalance"]) == (295, 295, 0)
    peak = theirs["memoryProfilePerAllocator"][name]["profileSummary"]
    assert s["peakBytes"] == int(peak["peakStats"]["peakBytesInUse"]) == 15_857_920  # max bytes_allocated
    assert s["peakTimePs"] == int(peak["peakStatsTimePs"]) == 6_038_087_000
    assert s["capacityBytes"] == int(peak["memoryCapacity"]) == 1 << 30  # TF_CPU_BFC_MEM_LIMIT_IN_MB=1024
    assert s["freeBytesAtPeak"] == 1_057_883_904  # min bytes_available
    assert s["lifetimePeakBytes"] == 16_014_592  # reached during the warm-up, before the trace
    assert s["stackBytesAtPeak"] == 0  # bytes_reserved is always 0
    assert round((s["windowEndPs"] - s["windowStartPs"]) / 1e9, 3) == 28.629
    # the numbers behind the README's other lines, from the columns
    alloc = events.kind == ma.ALLOCATION
    assert int(events.requested_bytes[alloc].sum()) == 52_111_588
    assert int(events.allocation_bytes[alloc].sum()) == 59_610_112
    assert float(events.fragmentation.max()) == 0.308697
    assert sorted({events.strings[i] for i in events.region_type[alloc] if i}) == ["output", "temp"]
    assert len({events.strings[i] for i in events.tf_op if i}) == 57
    assert len({events.strings[i] for i in events.shape if i}) == 11


def test_fixture_steps_and_leak_hints(tf_profile):
    events, result = tf_profile
    extras = result["profscope"]
    assert events.grouping == "grouped"
    assert [s["name"] for s in extras["steps"]] == [f"train {i}" for i in range(5)]
    hints = extras["allocators"]["bfc_cpu_allocator_for_gpu"]["leakHints"]
    # the README's "final live (trace-local) 11,008" and "4 deallocations of addresses
    # allocated before the trace"
    assert (hints["neverFreed"]["count"], hints["neverFreed"]["bytes"]) == (4, 11_008)
    assert hints["freedBeforeAllocated"]["count"] == 4
    # a balanced training loop: the same heap at the end of every step, no rising op
    growth = hints["heapGrowth"]
    assert [p["heapBytes"] for p in growth["points"]] == [9_511_424] * 5
    assert growth["slopeBytesPerStep"] == 0.0 and not growth["steadyLeak"]
    assert hints["risingOps"] == []
    assert {h["kind"] for h in hints["hints"]} == {"neverFreed"}


# ---------------------------------------------------------------------------
# Builders: leaks, peaks, allocators, hosts, layouts
# ---------------------------------------------------------------------------


def test_steady_leak_is_found_with_its_bytes_per_step(request):
    steps = 8
    result = _ours("steady_leak", request)
    a = result["profscope"]["allocators"]["bfc_cpu_allocator_for_gpu"]
    hints = a["leakHints"]
    growth = hints["heapGrowth"]
    assert growth["steadyLeak"]
    assert growth["slopeBytesPerStep"] == pytest.approx(MIB, abs=1e-6)
    assert growth["r2"] == pytest.approx(1.0)
    heaps = [p["heapBytes"] for p in growth["points"]]
    assert [p["stepId"] for p in growth["points"]] == list(range(steps))
    assert np.all(np.diff(heaps) == MIB)
    assert [r["tfOpName"] for r in hints["risingOps"]] == ["leaky/cache"]
    assert hints["risingOps"][0]["liveBytes"] == [(k + 1) * MIB for k in range(steps)]
    assert (hints["neverFreed"]["count"], hints["neverFreed"]["bytes"]) == (steps, steps * MIB)
    assert all(x["tfOpName"] == "leaky/cache" for x in hints["neverFreed"]["largest"])
    assert {h["kind"] for h in hints["hints"]} >= {"imbalance", "neverFreed", "heapGrowth", "risingOps"}
    assert a["summary"]["imbalance"] > 0


def test_balanced_training_shows_no_leak(request):
    hints = _ours("tf_training", request)["profscope"]["allocators"]["bfc_cpu_allocator_for_gpu"]["leakHints"]
    assert not hints["heapGrowth"]["steadyLeak"]
    assert hints["risingOps"] == []
    assert hints["neverFreed"]["count"] == 0


def test_peak_on_out_of_order_events(request):
    """Events are written out of time order (and at equal picoseconds): the peak is the
    largest stack + heap, the last such event *in reading order*, and the timeline is in
    time order."""
    data = ax.build("out_of_order")
    events = _read(data)
    total = events.bytes_reserved + events.bytes_allocated
    assert not np.all(np.diff(events.time_ps) >= 0)  # really out of order
    at_max = np.flatnonzero(total == total.max())
    assert len(at_max) >= 2  # the peak is reached twice
    expected = int(events.time_ps[at_max[-1]])
    result = _ours("out_of_order", request)
    summary = result["memoryProfilePerAllocator"]["GPU_0_bfc"]["profileSummary"]
    assert int(summary["peakStats"]["peakBytesInUse"]) == int(total.max())
    assert int(summary["peakStatsTimePs"]) == expected
    assert expected != int(events.time_ps[at_max].max())  # not simply the latest one
    times = [int(s["timeOffsetPs"]) for s in
             result["memoryProfilePerAllocator"]["GPU_0_bfc"]["sampledTimelineSnapshots"]]
    assert times == sorted(times)
    # frees of buffers allocated before the window: counted, and keep no op name
    hints = result["profscope"]["allocators"]["GPU_0_bfc"]["leakHints"]
    assert hints["freedBeforeAllocated"]["count"] == 3


def test_lifetime_peak_is_the_last_event_read_in_xprof(request):
    """XProf's ``peakBytesUsageLifetime`` is the ``peak_bytes_in_use`` of the last event
    it reads (lines in plane order), not the largest; profscope's summary has both."""
    events = _read(ax.build("out_of_order"))
    result = _ours("out_of_order", request)
    xprof_value = int(_golden(BY_NAME["out_of_order"])["memoryProfilePerAllocator"]["GPU_0_bfc"]
                      ["profileSummary"]["peakBytesUsageLifetime"])
    s = result["profscope"]["allocators"]["GPU_0_bfc"]["summary"]
    assert s["xprofLifetimePeakBytes"] == xprof_value == int(events.peak_bytes_in_use[-1])
    assert s["lifetimePeakBytes"] == int(events.peak_bytes_in_use.max()) > xprof_value


def test_times_are_offsets_within_their_line(request):
    """Lines with different ``timestamp_ns``: XProf orders the timeline by each event's
    own ``offset_ps``; step roots are numbered in absolute time."""
    result = _ours("line_timestamps", request)
    snaps = result["memoryProfilePerAllocator"]["GPU_0_bfc"]["sampledTimelineSnapshots"]
    assert [s["activityMetadata"]["tfOpName"] for s in snaps] == ["late/b", "early/a", "late/b", "early/a"]
    assert [s["activityMetadata"]["stepId"] for s in snaps] == ["1", "0", "1", "2"]
    assert [s["name"] for s in result["profscope"]["steps"]] == ["train 0", "train 1"]


def test_several_allocators(request):
    data = ax.build("multi_allocator")
    events = _read(data)
    result = _ours("multi_allocator", request)
    assert result["memoryIds"] == ["GPU_0_bfc", "GPU_1_bfc", "cuda_host_bfc"] == events.memory_ids
    counts = {k: v["summary"]["events"] for k, v in result["profscope"]["allocators"].items()}
    assert sum(counts.values()) == len(events) == 240
    for name, alloc in result["memoryProfilePerAllocator"].items():
        rows = events.memory_id == events.memory_ids.index(name)
        peak = int((events.bytes_reserved[rows] + events.bytes_allocated[rows]).max())
        assert int(alloc["profileSummary"]["peakStats"]["peakBytesInUse"]) == peak


def test_several_hosts(tmp_path):
    """A session with two hosts: one profile each, converted separately (XProf's
    memory profile reads one host at a time; ``numHosts`` is always 1)."""
    session = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    results = {}
    for host in ("host0", "host1"):
        data = ax.build("multi_allocator" if host == "host0" else "multi_allocator_host1")
        (session / f"{host}.xplane.pb").write_bytes(data)
    for path in sorted(session.glob("*.xplane.pb")):
        with open(path, "rb") as f:
            events = xm.read_allocator_events(f, str(path))
        assert events.hostname == path.name.split(".")[0]
        results[events.hostname] = mp.from_allocator_events(events)
    assert {r["numHosts"] for r in results.values()} == {1}
    assert results["host0"]["memoryProfilePerAllocator"] != results["host1"]["memoryProfilePerAllocator"]


def test_device_planes_are_not_read(request):
    result = _ours("gpu_layout", request)
    assert result["memoryIds"] == ["GPU_0_bfc"]  # not GPU_0_bfc_device_side
    assert _ours("no_host_plane", request) == {"profscope": {
        "version": mp.EXTRAS_VERSION, "host": "host0", "grouping": "none", "steps": [], "allocators": {}}}


def test_tpu_modules_and_empty_profiles(request):
    mods = _ours("tpu_layout", request)["hloModules"]
    assert [m["planeName"] for m in mods][:1] == ["TPU:0"]
    assert {m["name"] for m in mods} >= {"jit_train_step(7)", "sc_module"}
    empty = _ours("no_allocator_events", request)
    assert empty["memoryProfilePerAllocator"] == {} and empty["memoryIds"] == []


def test_columns_are_numpy(request):
    events = _read(ax.build("tf_training"))
    for name in ("time_ps", "kind", "memory_id", "bytes_allocated", "address", "tf_op", "group_id"):
        assert isinstance(getattr(events, name), np.ndarray), name
    assert events.address.dtype == np.uint64 and events.fragmentation.dtype == np.float64
    assert len(events.strings) < 50  # strings are interned, not per event


def test_value_types_are_read_as_xprof_reads_them(request):
    events = _read(ax.build("value_types"))
    # uint64-valued integers read 0 (XProf's IntValue reads int64_value only)
    named = events.memory_id == events.memory_ids.index("named")
    second = np.flatnonzero(named)[1]
    assert events.bytes_allocated[second] == 0 and events.address[second] == 0
    assert events.memory_ids == ["", "1", "2", "5", "named"]
    assert [ma.data_type_name(v) for v in (0, 1, 9, 101, 150, 77, -1)] == [
        "INVALID", "float", "int64", "float_ref", "unknown dtype enum (50)_ref",
        "unknown dtype enum (77)", "unknown dtype enum (-1)"]


def test_progress_is_reported():
    seen = []

    class P:
        def update(self, fraction=None, message=None):
            seen.append((fraction, message))

    events = _read(ax.build("tf_training"), progress=P())
    mp.from_allocator_events(events, progress=P())
    assert seen[0][0] == 0.0 and seen[-1][0] == 1.0


# ---------------------------------------------------------------------------
# libstdc++'s std::sort, reproduced (the order of snapshots at equal times)
# ---------------------------------------------------------------------------


def _reference_std_sort(keys: list) -> list[int]:
    """libstdc++'s std::sort, written plainly (slow, obviously the algorithm)."""
    v = list(range(len(keys)))

    def less(i, j):
        return keys[i] < keys[j]

    def swap(i, j):
        v[i], v[j] = v[j], v[i]

    def adjust(first, hole, length, value):
        top, child = hole, hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if less(v[first + child], v[first + child - 1]):
                child -= 1
            v[first + hole] = v[first + child]
            hole = child
        if (length & 1) == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            v[first + hole] = v[first + child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and less(v[first + parent], value):
            v[first + hole] = v[first + parent]
            hole = parent
            parent = (hole - 1) // 2
        v[first + hole] = value

    def heap_sort(first, last):
        n = last - first
        if n >= 2:
            parent = (n - 2) // 2
            while True:
                adjust(first, parent, n, v[first + parent])
                if parent == 0:
                    break
                parent -= 1
        end = last
        while end - first > 1:
            end -= 1
            value = v[end]
            v[end] = v[first]
            adjust(first, 0, end - first, value)

    def loop(first, last, depth):
        while last - first > 16:
            if depth == 0:
                heap_sort(first, last)
                return
            depth -= 1
            mid = first + (last - first) // 2
            a, b, c = first + 1, mid, last - 1
            if less(v[a], v[b]):
                if less(v[b], v[c]):
                    swap(first, b)
                elif less(v[a], v[c]):
                    swap(first, c)
                else:
                    swap(first, a)
            elif less(v[a], v[c]):
                swap(first, a)
            elif less(v[b], v[c]):
                swap(first, c)
            else:
                swap(first, b)
            lo, hi = first + 1, last
            while True:
                while less(v[lo], v[first]):
                    lo += 1
                hi -= 1
                while less(v[first], v[hi]):
                    hi -= 1
                if not lo < hi:
                    break
                swap(lo, hi)
                lo += 1
            loop(lo, last, depth)
            last = lo

    n = len(v)
    if n > 1:
        loop(0, n, 2 * (n.bit_length() - 1))
    for i in range(1, n):  # __final_insertion_sort: a stable insertion sort
        x, j = v[i], i
        while j > 0 and less(x, v[j - 1]):
            v[j] = v[j - 1]
            j -= 1
        v[j] = x
    return v


def _tie_heavy_keys(rng: random.Random, n: int) -> list[int]:
    kind = rng.randrange(4)
    if kind == 0:
        return [rng.randrange(max(1, n // 8)) for _ in range(n)]
    if kind == 1:
        return [7] * n
    if kind == 2:
        return sorted(rng.randrange(5) for _ in range(n))
    return sorted((rng.randrange(n) for _ in range(n)), reverse=True)


def test_std_sort_order_matches_the_algorithm():
    rng = random.Random(0)
    for _ in range(120):
        keys = _tie_heavy_keys(rng, rng.randrange(0, 700))
        assert std_sort_order(np.asarray(keys, dtype=np.int64)).tolist() == _reference_std_sort(keys)
    # lexicographic keys
    a = np.asarray([rng.randrange(3) for _ in range(400)])
    b = np.asarray([rng.randrange(3) for _ in range(400)])
    pairs = list(zip(a.tolist(), b.tolist()))
    assert std_sort_order(a, b).tolist() == _reference_std_sort(pairs)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run the real libstdc++ std::sort")
def test_std_sort_order_matches_libstdcxx(tmp_path):
    src = tmp_path / "sort.cc"
    src.write_text(textwrap.dedent("""
        #include <algorithm>
        #include <cstdio>
        #include <utility>
        #include <vector>
        int main() {
          int n; if (std::scanf("%d", &n) != 1) return 1;
          std::vector<std::pair<long long, int>> v(n);
          for (int i = 0; i < n; i++) { std::scanf("%lld", &v[i].first); v[i].second = i; }
          std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
          for (auto& x : v) std::printf("%d\\n", x.second);
        }
    """))
    exe = tmp_path / "sort"
    subprocess.run(["g++", "-O1", "-o", str(exe), str(src)], check=True)
    rng = random.Random(1)
    for _ in range(40):
        keys = _tie_heavy_keys(rng, rng.randrange(1, 5000))
        out = subprocess.run([str(exe)], input=f"{len(keys)}\n" + "\n".join(map(str, keys)),
                             capture_output=True, text=True, check=True).stdout.split()
        assert std_sort_order(np.asarray(keys)).tolist() == [int(x) for x in out]


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "garbage", "gzip-truncated", "bad-varint"])
def test_bad_input_is_bad_input_naming_the_file(damage):
    data = ax.build("tf_training")
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = bytes(random.Random(5).randrange(256) for _ in range(4096))
    elif damage == "gzip-truncated":
        data = gzip.compress(data)[:-200]
    else:
        data = b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"
    with pytest.raises(BadInput) as err:
        _read(data, "run/host0.xplane.pb")
    assert "run/host0.xplane.pb" in str(err.value)
    assert err.value.file == "run/host0.xplane.pb"


def test_corrupt_events_inside_a_valid_plane_are_bad_input():
    """Damage inside the event bytes (not the plane framing) is found too."""
    data = bytearray(ax.build("tf_training"))
    i = data.find(b"MemoryAllocation")
    # break event bytes far after the metadata: a length that runs past its message
    j = len(data) - 300
    data[j:j + 4] = b"\x22\xff\xff\x7f"
    assert i > 0
    with pytest.raises(BadInput):
        _read(bytes(data), "h.xplane.pb")


@pytest.mark.parametrize("name", ["steady_leak", "gpu_layout", "tpu_layout"])
def test_gzipped_profile_reads_the_same(name):
    data = ax.build(name)
    plain = mp.from_allocator_events(_read(data))
    zipped = mp.from_allocator_events(_read(gzip.compress(data), "host0.xplane.pb.gz"))
    assert plain == zipped


def test_reads_through_fsspec_files(tmp_path):
    """The workspace opens profiles through fsspec (local, memory://, gs://)."""
    import fsspec

    data = ax.build("multi_allocator")
    fs = fsspec.filesystem("memory")
    fs.pipe("/mp-test/host0.xplane.pb", data)
    with fs.open("/mp-test/host0.xplane.pb", "rb") as f:
        via_fsspec = mp.from_allocator_events(xm.read_allocator_events(f, "memory://mp-test/host0.xplane.pb"))
    local = tmp_path / "host0.xplane.pb"
    local.write_bytes(gzip.compress(data))
    with fsspec.filesystem("file").open(str(local), "rb") as f:
        via_local = mp.from_allocator_events(xm.read_allocator_events(f, str(local)))
    fs.rm("/mp-test", recursive=True)
    assert via_fsspec == via_local == mp.from_allocator_events(_read(data))


def _imports(module) -> set[str]:
    import ast

    tree = ast.parse(Path(module.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    return imported


def test_formats_modules_import_only_what_they_may():
    from profscope.formats import xplane_steps, xplane_wire

    # (io, mmap and profscope.forksafe: xplane_wire maps a plane in a conversion worker)
    allowed = {"__future__", "contextlib", "dataclasses", "io", "mmap", "os", "typing", "numpy", "profscope.errors",
               "profscope.forksafe",
               "profscope.formats", "profscope.formats.protos", "profscope.model.allocator", "profscope.model.stdsort"}
    for module in (xm, xplane_steps, xplane_wire):
        imported = _imports(module)
        assert imported <= allowed, (module.__name__, imported - allowed)
    # the model's types import no format, the tool reads only the model
    assert _imports(ma) <= {"__future__", "dataclasses", "numpy"}
    assert not any(m.startswith("profscope.formats") for m in _imports(mp))


class _CountingReader(io.RawIOBase):
    """A file that records the byte ranges read from it."""

    def __init__(self, data: bytes):
        self._f = io.BytesIO(data)
        self.ranges: list[tuple[int, int]] = []

    def read_within(self, start: int, end: int) -> int:
        return sum(max(0, min(b, end) - max(a, start)) for a, b in self.ranges)

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=0):
        return self._f.seek(offset, whence)

    def tell(self):
        return self._f.tell()

    def readinto(self, b):
        at = self._f.tell()
        k = self._f.readinto(b)
        self.ranges.append((at, at + k))
        return k


@pytest.mark.parametrize("compress", [False, True])
def test_profile_without_allocator_events_reads_only_metadata(demo_logdir, compress):
    """A real JAX profile whose host plane metadata names no MemoryAllocation or
    MemoryDeallocation: no event can be one, so its lines are neither read nor grouped
    (the 308 MB benchmark profile: 67 s and 6.3 GB before, now a metadata read)."""
    data = next((demo_logdir / "transformer").rglob("*.xplane.pb")).read_bytes()
    raw = _CountingReader(gzip.compress(data) if compress else data)
    events = xm.read_allocator_events(raw, "transformer.xplane.pb")
    assert events.has_host_plane and len(events) == 0
    assert events.grouping == "no-allocator-events" and events.steps == []
    if not compress:
        host = xplane.scan(io.BytesIO(data), "x").plane(xm.HOST_PLANE)
        assert host.length > 100_000 and raw.read_within(host.offset, host.offset + host.length) < host.length // 10
    result = mp.from_allocator_events(events)
    assert result["memoryProfilePerAllocator"] == {} and result["memoryIds"] == []
