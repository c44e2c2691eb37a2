"""The trace viewer against XProf 2.24.2's own trace_viewer@ answers on the real GPU, TPU
and ROCm profiles of ``shared/fixtures/public_profiles`` and on the demo profiles.

Goldens: ``tests/golden/trace_viewer/public_*.json.gz`` (listed in ``public_index.json``)
and the demo/builder goldens of ``index.json``, recorded by
``scripts/record_xprof_trace_golden.py`` from XProf itself. Everything is asked of the
server's XProf route (``/data/plugin/profile/data?tag=trace_viewer@``), so the index is
built by the code path the server uses. Compared:

* flows: the slices XProf binds into each flow (``bind_id``), with their direction
  (``flow_out``/``flow_in``) and ``cat``, must be bound the same way here. A slice is
  (name, pid, line name, ts); the line is named by the ``thread_name`` M events rather
  than by tid so that this part does not depend on XProf's derived-line display ids
  (every event's tid is compared below). XProf's ``bind_id`` numbers themselves cannot
  be compared: they come from ``absl::HashOf``, seeded per process, and differ on every
  run of XProf (see ``formats/xplane_flows.py``); ours must be stable.
* every complete event of the whole trace (resolution 0): name, pid, tid, line name,
  start and duration to the picosecond;
* the events returned at resolution 4040, for the whole span and for a window (the
  middle tenth of the events): the same set.
* the profile XProf cannot read (deliberately corrupt) is a clear 4xx here.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden" / "trace_viewer"
PUBLIC = json.loads((GOLDEN / "public_index.json").read_text())
PUBLIC_CASES = sorted(k for k, v in PUBLIC.items() if not k.startswith("_") and "golden" in v)
BROKEN_CASES = sorted(k for k, v in PUBLIC.items() if not k.startswith("_") and "xprof_error" in v)
DEMO_INDEX = json.loads((GOLDEN / "index.json").read_text())
DEMO_CASES = sorted(k for k, v in DEMO_INDEX.items() if not k.startswith("_") and isinstance(v["input"], str))
BUILDER_CASES = sorted(k for k, v in DEMO_INDEX.items() if not k.startswith("_") and isinstance(v["input"], dict))
RESOLUTION = PUBLIC["_meta"]["resolution"]


def _ps(us: float) -> int:
    return round(us * 1e6)


def _load(name: str) -> dict:
    return json.loads(gzip.decompress((GOLDEN / name).read_bytes()))


def _rows(complete) -> list[list]:
    """Golden rows ``[name, pid, tid, ts, dur]`` (columns in the public goldens)."""
    if isinstance(complete, list):
        return complete
    names = complete["names"]
    return [[names[n], p, t, ts, d] for n, p, t, ts, d in
            zip(complete["name"], complete["pid"], complete["tid"], complete["ts"], complete["dur"])]


def _line_names(metadata_events) -> dict:
    return {(e["pid"], e.get("tid")): e["args"]["name"] for e in metadata_events if e["name"] == "thread_name"}


def _kind(e: dict) -> str:
    return {(True, False): "out", (False, True): "in", (True, True): "mid"}.get(
        (bool(e.get("flow_out")), bool(e.get("flow_in"))), "none")


def _groups(members) -> Counter:
    """Flows as a multiset of their members' multisets."""
    return Counter(frozenset(Counter(m).items()) for m in members.values())


def _golden_flows(golden: dict) -> Counter:
    rows = _rows(golden["complete"])
    lines = _line_names(golden["metadata_events"])
    members: dict = {}
    for row, flow, kind, cat in golden["flows"]:
        name, pid, tid, ts, _dur = rows[row]
        members.setdefault(flow, []).append((name, pid, lines.get((pid, tid)), _ps(ts), kind, cat))
    return _groups(members)


def _our_flows(answer: dict) -> Counter:
    events = answer["traceEvents"]
    lines = _line_names([e for e in events if e["ph"] == "M"])
    members: dict = {}
    for e in events:
        if e["ph"] == "X" and "bind_id" in e:
            members.setdefault(e["bind_id"], []).append(
                (e["name"], e["pid"], lines.get((e["pid"], e["tid"])), _ps(e["ts"]), _kind(e), e.get("cat")))
    return _groups(members)


def _describe(missing: Counter, extra: Counter, what: str) -> str:
    def show(c):
        return [sorted(k) for k in list(c)[:3]]
    return (f"{sum(missing.values())} of XProf's {what} missing here, {sum(extra.values())} here that XProf "
            f"does not have; e.g. missing {show(missing)}, extra {show(extra)}")


def _client(root: Path, cache: Path):
    from fastapi.testclient import TestClient

    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.server.app import create_app
    from profscope.storage import LogDir

    return TestClient(create_app(Workspace(LogDir(str(root), listing_ttl=0), DiskCache(cache))),
                      raise_server_exceptions=False)


@pytest.fixture(scope="module")
def xplanes(shared_fixtures) -> Path:
    root = shared_fixtures / "public_profiles" / "xplane"
    for case in PUBLIC_CASES + BROKEN_CASES:
        for inp in PUBLIC[case]["inputs"]:
            data = (shared_fixtures / inp["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == inp["sha256"], f"{inp['path']} is not the file recorded"
    return root


@pytest.fixture(scope="module")
def client(xplanes, tmp_path_factory):
    return _client(xplanes, tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def demo_client(tmp_path_factory):
    demo = Path(__file__).parents[1] / "src" / "profscope" / "demo" / "logdir"
    return _client(demo, tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def builder_client(tmp_path_factory):
    from profscope.testing.timelines import builder_logdir

    root = builder_logdir(tmp_path_factory.mktemp("builders"), {c: DEMO_INDEX[c]["host"] for c in BUILDER_CASES})
    return _client(root, tmp_path_factory.mktemp("cache"))


def _ask(client, case: str, **params) -> dict:
    entry = PUBLIC[case]
    query = {"run": entry["run"], "tag": "trace_viewer@", **params}
    if len(entry["hosts"]) > 1:
        query["hosts"] = ",".join(entry["hosts"])
    else:
        query["host"] = entry["hosts"][0]
    r = client.get("/data/plugin/profile/data", params=query)
    assert r.status_code == 200, r.text[:500]
    return r.json()


@pytest.fixture(scope="module")
def whole(client):
    """Our whole-trace answer (resolution 0) per public case, asked once."""
    cache: dict = {}

    def get(case):
        if case not in cache:
            cache[case] = _ask(client, case, resolution=0)
        return cache[case]

    return get


# -- (a) flows ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", PUBLIC_CASES)
def test_flows_match_xprof(whole, case):
    golden = _load(PUBLIC[case]["golden"])["full"]
    theirs, ours = _golden_flows(golden), _our_flows(whole(case))
    assert sum(theirs.values()) == PUBLIC[case]["flows"]
    assert ours == theirs, _describe(theirs - ours, ours - theirs, "flows")


@pytest.mark.parametrize("case", DEMO_CASES)
def test_demo_flows_match_xprof(demo_client, case):
    golden = _load(DEMO_INDEX[case]["golden"])
    parts = Path(DEMO_INDEX[case]["input"]).parts  # src/profscope/demo/logdir/<demo>/plugins/profile/<session>/..
    r = demo_client.get("/data/plugin/profile/data",
                        params={"run": f"{parts[4]}/{parts[7]}", "tag": "trace_viewer@", "resolution": 0})
    assert r.status_code == 200, r.text[:500]
    theirs, ours = _golden_flows(golden), _our_flows(r.json())
    assert sum(theirs.values()) > 100  # async ops and threadpool regions on every demo
    assert ours == theirs, _describe(theirs - ours, ours - theirs, "flows")


@pytest.mark.parametrize("case", BUILDER_CASES)
def test_builder_flows_match_xprof(builder_client, case):
    golden = _load(DEMO_INDEX[case]["golden"])
    r = builder_client.get("/data/plugin/profile/data", params={"run": f"{case}/2026_01_01_00_00_00",
                                                                "tag": "trace_viewer@", "resolution": 0})
    assert r.status_code == 200, r.text[:500]
    theirs, ours = _golden_flows(golden), _our_flows(r.json())
    assert ours == theirs, _describe(theirs - ours, ours - theirs, "flows")


def test_flow_ids_are_stable_and_per_host(xplanes, tmp_path):
    """XProf's bind_ids change from run to run; ours are the same for a file whatever the
    cache, and the launches of two hosts never share one."""
    case = "mi300_jax08_gemm"
    ids = []
    for k in range(2):
        answer = _ask(_client(xplanes, tmp_path / f"c{k}"), case, resolution=0)
        ids.append(sorted(e["bind_id"] for e in answer["traceEvents"] if "bind_id" in e))
    assert ids[0] == ids[1] and len(set(ids[0])) == PUBLIC[case]["flows"]
    assert all(0 < i < 2**56 for i in ids[0])  # XFlow's 56-bit ids

    from profscope.formats import xplane_trace

    path = xplanes.parents[1] / PUBLIC[case]["inputs"][0]["path"]  # relative to the fixtures folder
    with open(path, "rb") as f:
        a = xplane_trace.read_trace(f, str(path), 1, "hostA").flow_events
    with open(path, "rb") as f:
        b = xplane_trace.read_trace(f, str(path), 2, "hostB").flow_events
    assert len(a.seq) == len(b.seq) == PUBLIC[case]["flow_bound"]
    assert not set(a.flow_id.tolist()) & set(b.flow_id.tolist())


# -- (b) every event of the whole trace --------------------------------------------------


def _events(rows, lines) -> Counter:
    return Counter((n, pid, tid, lines.get((pid, tid)), _ps(ts), _ps(dur)) for n, pid, tid, ts, dur in rows)


def _per_line(c: Counter) -> str:
    by = Counter()
    for k, v in c.items():
        by[(k[1], k[2], k[3])] += v
    return ", ".join(f"{v} on pid {p} tid {t} {name!r}" for (p, t, name), v in by.most_common(8))


@pytest.mark.parametrize("case", PUBLIC_CASES)
def test_every_event_matches_xprof(whole, case):
    golden = _load(PUBLIC[case]["golden"])["full"]
    ours = whole(case)
    theirs = _events(_rows(golden["complete"]), _line_names(golden["metadata_events"]))
    mine = _events([[e["name"], e["pid"], e["tid"], e["ts"], e["dur"]] for e in ours["traceEvents"] if e["ph"] == "X"],
                   _line_names([e for e in ours["traceEvents"] if e["ph"] == "M"]))
    missing, extra = theirs - mine, mine - theirs
    assert not missing and not extra, (
        f"{sum(missing.values())} of XProf's {sum(theirs.values())} events missing ({_per_line(missing)}); "
        f"{sum(extra.values())} extra ({_per_line(extra)})")
    # as XProf prints it (six digits), so XProf's frontend asks us the windows it asks XProf
    assert ours["fullTimespan"] == golden["fields"]["fullTimespan"]
    # every top-level key XProf sends, with XProf's values where they are not about the
    # events (stackFrames: XProf's "@@" names, which we do not send, see xprof_compat.md)
    assert set(golden["fields"]) <= set(ours)
    for key in ("displayTimeUnit", "metadata", "codeLink", "useNewBackend", "details", "filteredByVisibility",
                "showCounterMessage", "totalCounterEvents"):
        assert ours[key] == golden["fields"][key], key


# -- (c) the visibility filter -------------------------------------------------------------


@pytest.mark.parametrize("part", ["resolution", "window"])
@pytest.mark.parametrize("case", PUBLIC_CASES)
def test_filtered_events_match_xprof(client, case, part):
    golden = _load(PUBLIC[case]["golden"])
    rows = _rows(golden["full"]["complete"])
    want = golden[part]
    theirs = Counter((n, pid, tid, _ps(ts), _ps(dur)) for n, pid, tid, ts, dur in
                     [rows[i] for i in want["events"]] + want["extra"])
    ours = _ask(client, case, **want["params"])
    mine = Counter((e["name"], e["pid"], e["tid"], _ps(e["ts"]), _ps(e["dur"]))
                   for e in ours["traceEvents"] if e["ph"] == "X")
    missing, extra = theirs - mine, mine - theirs
    assert not missing and not extra, (
        f"{part} {want['params']}: XProf returns {sum(theirs.values())} events, we {sum(mine.values())}: "
        f"{sum(missing.values())} missing, {sum(extra.values())} extra")


# -- the profile XProf cannot read -----------------------------------------------------------


@pytest.mark.parametrize("case", BROKEN_CASES)
def test_unreadable_profile_is_a_clear_4xx(client, case):
    entry = PUBLIC[case]
    file_name = Path(entry["inputs"][0]["path"]).name
    answers = []
    for _ in range(2):  # nothing is cached: the second request says the same
        r = client.get("/data/plugin/profile/data", params={"run": entry["run"], "tag": "trace_viewer@",
                                                            "host": entry["hosts"][0]})
        answers.append((r.status_code, r.text))
    status, text = answers[0]
    assert 400 <= status < 500, (status, text[:300])
    assert file_name in text, text[:300]
    assert answers[1] == answers[0]
