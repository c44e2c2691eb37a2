"""The trace viewer against XProf 2.24.2 on the real demo JAX/TF profiles.

``tests/golden/trace_viewer/*.json.gz`` hold XProf's own trace_viewer@ answers (recorded
by ``scripts/record_xprof_trace_golden.py``). Every complete event XProf shows must be
served by ours, on the same thread (pid, tid), with the same name, start and duration
(compared in integer picoseconds), and the process/thread names must agree.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden" / "trace_viewer"
INDEX = json.loads((GOLDEN / "index.json").read_text())
CASES = sorted(k for k in INDEX if not k.startswith("_"))


def _ps(us: float) -> int:
    return round(us * 1e6)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from fastapi.testclient import TestClient

    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.server.app import create_app
    from profscope.storage import LogDir

    demo = Path(__file__).parents[1] / "src" / "profscope" / "demo" / "logdir"
    ws = Workspace(LogDir(str(demo), listing_ttl=0), DiskCache(tmp_path_factory.mktemp("cache")))
    return TestClient(create_app(ws))


def _run_of(case: str) -> str:
    # the golden's input: src/profscope/demo/logdir/<demo>/plugins/profile/<session>/...
    parts = Path(INDEX[case]["input"]).parts
    return f"{parts[4]}/{parts[7]}"


@pytest.fixture(scope="module")
def builder_client(tmp_path_factory):
    """The builder scenarios of the golden (GPU/TPU layouts, ...), one run each."""
    from fastapi.testclient import TestClient

    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.server.app import create_app
    from profscope.storage import LogDir
    from profscope.testing.timelines import builder_logdir

    root = builder_logdir(tmp_path_factory.mktemp("builders"), {c: INDEX[c]["host"] for c in BUILDER_CASES})
    ws = Workspace(LogDir(str(root), listing_ttl=0), DiskCache(tmp_path_factory.mktemp("cache")))
    return TestClient(create_app(ws))


BUILDER_CASES = sorted(k for k in CASES if isinstance(INDEX[k]["input"], dict))
DEMO_CASES = sorted(k for k in CASES if k not in BUILDER_CASES)


@pytest.mark.parametrize("case", BUILDER_CASES)
def test_builder_scenarios_match_xprof(builder_client, case):
    """Device planes (GPU streams, TPU lines, pids from plane ids), regions, allocators."""
    golden = json.loads(gzip.decompress((GOLDEN / INDEX[case]["golden"]).read_bytes()))
    r = builder_client.get("/data/plugin/profile/data", params={"run": f"{case}/2026_01_01_00_00_00",
                                                                 "tag": "trace_viewer@", "resolution": 0})
    assert r.status_code == 200, r.text
    ours = r.json()
    # XProf renames the events of a TPU "Steps" line after the step groups its grouping
    # pass assigns ("3", "4", ... continuing the host's); we show the names as recorded,
    # so those are compared without their names.
    steps_tids = {(e["pid"], e["tid"]) for e in golden["metadata_events"]
                  if e["name"] == "thread_name" and e["args"]["name"] == "Steps" and e["pid"] < 1500}

    def key(name, pid, tid, ts, dur):
        return ("<step>" if (pid, tid) in steps_tids else name, pid, tid, _ps(ts), _ps(dur))

    theirs = Counter(key(*row) for row in golden["complete"])
    mine = Counter(key(e["name"], e["pid"], e["tid"], e["ts"], e["dur"]) for e in ours["traceEvents"] if e["ph"] == "X")
    missing = theirs - mine
    assert not missing, f"{sum(missing.values())} of XProf's events missing, e.g. {list(missing)[:5]}"

    def names(events):
        return {(e["name"], e["pid"], e.get("tid"), e["args"].get("name")) for e in events
                if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")}
    assert names(golden["metadata_events"]) == names([e for e in ours["traceEvents"] if e["ph"] == "M"])


COUNTER_CASES = sorted(k for k in BUILDER_CASES if INDEX[k].get("counter_events"))


def _counters(events: list) -> dict:
    """XProf's counter events by (pid, name): their stat name and samples, times in ps."""
    return {(e["pid"], e["name"]): (e["event_stats"], [(_ps(t), v) for t, v in e["entries"]])
            for e in events if e.get("ph") == "C"}


@pytest.mark.parametrize("case", COUNTER_CASES)
@pytest.mark.parametrize("part", ["full", "window"])
def test_counters_match_xprof(builder_client, case, part):
    """A TPU profile's ``_counters_`` series (XProf shows them as ``% util`` counters):
    the same series per device, every sample at the same time with the same value, the same ``totalCounterEvents`` and
    ``returnedEventsSize``, and XProf's span, which holds the counters (a single sample
    before the first slice, one after the last); for the whole trace and for a window,
    whose samples on its bounds are in."""
    entry = INDEX[case] if part == "full" else INDEX[case]["window"]
    golden = json.loads(gzip.decompress((GOLDEN / entry["golden"]).read_bytes()))
    params = {"resolution": 0}
    if part == "window":
        params = golden["params"]
    r = builder_client.get("/data/plugin/profile/data", params={"run": f"{case}/2026_01_01_00_00_00",
                                                                 "tag": "trace_viewer@", **params})
    assert r.status_code == 200, r.text
    ours = r.json()
    theirs = {(pid, name): (stat, [(_ps(t), v) for t, v in entries]) for pid, name, stat, entries in golden["counters"]}
    mine = _counters(ours["traceEvents"])
    assert sorted(mine) == sorted(theirs)
    for key, (stat, samples) in theirs.items():
        assert mine[key][0] == stat, key
        # as JSON numbers (XProf prints a double with %.17g: 10.0 as 10)
        assert mine[key][1] == samples, key
    assert len(theirs) >= (9 if part == "full" else 7)
    assert sum(len(s) for _, s in theirs.values()) == golden["fields"]["totalCounterEvents"] == entry["counter_events"]
    for field in ("totalCounterEvents", "returnedEventsSize", "fullTimespan", "showCounterMessage"):
        assert ours[field] == golden["fields"][field], field
    complete = Counter((n, pid, tid, _ps(ts), _ps(dur)) for n, pid, tid, ts, dur in golden["complete"])
    assert complete == Counter((e["name"], e["pid"], e["tid"], _ps(e["ts"]), _ps(e["dur"]))
                               for e in ours["traceEvents"] if e["ph"] == "X")


@pytest.mark.parametrize("case", DEMO_CASES)
def test_every_xprof_complete_event_is_served(client, case):
    golden = json.loads(gzip.decompress((GOLDEN / INDEX[case]["golden"]).read_bytes()))
    r = client.get("/data/plugin/profile/data", params={"run": _run_of(case), "tag": "trace_viewer@", "resolution": 0})
    assert r.status_code == 200, r.text
    ours = r.json()
    theirs = Counter((n, pid, tid, _ps(ts), _ps(dur)) for n, pid, tid, ts, dur in golden["complete"])
    mine = Counter((e["name"], e["pid"], e["tid"], _ps(e["ts"]), _ps(e["dur"]))
                   for e in ours["traceEvents"] if e["ph"] == "X")
    missing = theirs - mine
    assert not missing, f"{sum(missing.values())} of XProf's events missing, e.g. {list(missing)[:5]}"
    assert len(golden["complete"]) > 500
    # same processes and threads, same names
    def names(events):
        return {(e["name"], e["pid"], e.get("tid"), e["args"].get("name")) for e in events
                if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")}
    assert names(golden["metadata_events"]) == names([e for e in ours["traceEvents"] if e["ph"] == "M"])
    # XProf's full timespan (ms) is the span of what it shows, printed to six digits: the
    # same numbers, so that XProf's frontend asks us the windows it asks XProf
    assert ours["fullTimespan"] == golden["fields"]["fullTimespan"]
    assert ours["returnedEventsSize"] == sum(1 for e in ours["traceEvents"] if e["ph"] == "X")
    for key in ("displayTimeUnit", "fullTimespan", "returnedEventsSize", "traceEvents"):
        assert key in ours


@pytest.mark.parametrize("case", DEMO_CASES)
def test_our_window_api_serves_the_same_events(client, case):
    """The page's API (ms from the origin) shows the same events as XProf."""
    golden = json.loads(gzip.decompress((GOLDEN / INDEX[case]["golden"]).read_bytes()))
    run = _run_of(case)
    # a resolution so fine that nothing is thinned out on these small traces
    w = client.get("/api/trace/window", params={"run": run, "resolution": 100000}).json()
    origin_us = w["originNs"] / 1000
    span = w["fullTimespan"][1]
    s = w["slices"]
    tid_of = {t["id"]: (t["pid"], t["tid"]) for t in w["tracks"]}
    mine = Counter((w["names"][s["name"][i]], *tid_of[s["track"][i]], round(s["start"][i] * 1e9), round(s["dur"][i] * 1e9))
                   for i in range(len(s["id"])))
    theirs = Counter((n, pid, tid, _ps(ts - origin_us), _ps(dur)) for n, pid, tid, ts, dur in golden["complete"])
    # events narrower than a pixel may be thinned: compare those at least a pixel wide
    px = span / 100000 * 1e9
    wide = Counter({k: v for k, v in theirs.items() if k[4] >= px})
    missing = wide - mine
    assert not missing, list(missing)[:5]
