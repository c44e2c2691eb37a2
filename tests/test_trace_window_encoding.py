"""The page's later windows without Python objects per slice (issue 40, "the page's own
later window"): ``/api/trace/window`` is encoded by orjson from the slices' arrays
(``TraceView.window_json``), the narrow slices are thinned by a radix grouping
(``trace_index.first_per_pixel``), a window's names numbered by counting
(``trace_viewer.name_codes``) and its steps found by one array test (``steps_in``).
Each is checked here against what it replaces, on the public fixtures' real traces:
the same bytes, the same rows, the same steps."""

from __future__ import annotations

import orjson
import numpy as np
import pytest
from fastapi.testclient import TestClient

from profscope.app.queries import TraceQuery
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.server.app import create_app
from profscope.storage import LogDir
from profscope.testing.timelines import build_index
from profscope.tools import trace_index as ti
from profscope.tools import trace_viewer as tvw

PROFILES = [
    "xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",
    "xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb",
    "xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
    "xplane/mi300_jax08_gemm/plugins/profile/jax08_gemm/tw003.xplane.pb",
    "traces/kineto_resnet50_v100.pt.trace.json.gz",
    "traces/hta_mi250_rocm62.trace.json.gz",
]


@pytest.fixture(scope="module")
def indexes(shared_fixtures, tmp_path_factory) -> dict[str, ti.TraceIndex]:
    out = {}
    for rel in PROFILES:
        path = shared_fixtures / "public_profiles" / rel
        out[rel] = build_index(path, tmp_path_factory.mktemp("ix"))
    return out


def _windows(span_ms: float):
    """The whole trace, then windows here and there of 1 %, 0.1 %, 20 % and a sliver."""
    yield None, None, 8000
    yield None, None, 1000
    rnd = np.random.default_rng(3)
    for a in rnd.random(12) * span_ms:
        for frac, res in ((0.01, 8000), (0.001, 2000), (0.2, 1500), (0.00001, 300)):
            yield a, a + frac * span_ms, res


def _views(indexes):
    for rel, ix in indexes.items():
        yield rel, tvw.TraceView("r", [tvw.HostIndex(0, "host", ix, 1000)])
    # two hosts of one run on one timeline (their ids and tracks shifted by position)
    tf = [indexes[r] for r in PROFILES if "tf_gpu" in r]
    yield "tf_gpu, both hosts", tvw.TraceView("r", [tvw.HostIndex(k, f"h{k}", ix, 1000 * (k + 1)) for k, ix in enumerate(tf)])


def test_window_json_is_the_windows_orjson_bytes(indexes):
    """What the route sends is byte for byte ``orjson.dumps`` of the dict ``window``
    answers (whose slices are lists, as before): floats and ints from the arrays are
    written as from Python's. Also with no slice at all (a window past the activity)."""
    seen_empty = seen_full = False
    for name, view in _views(indexes):
        for a, b, res in _windows(view.end_ps / tvw.PS_PER_MS):
            w = view.window(a, b, res)
            assert all(isinstance(v, list) for v in w["slices"].values())
            assert view.window_json(a, b, res) == orjson.dumps(w), (name, a, b, res)
            seen_empty |= not w["slices"]["id"]
            seen_full |= len(w["slices"]["id"]) > 1000
    assert seen_empty and seen_full


def test_the_route_sends_window_json(shared_fixtures, tmp_path):
    """``/api/trace/window`` answers ``Workspace.trace_window_json``: the bytes of the
    dict ``trace_window`` gives (both through the app, on a real multi-host run)."""
    logdir = shared_fixtures / "public_profiles" / "xplane" / "tf_gpu"
    ws = Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(tmp_path / "cache"))
    run = ws.runs()[0]
    client = TestClient(create_app(ws))
    full = ws.trace_window(run, TraceQuery(resolution=3000))
    at = float(np.median(full["slices"]["start"]))  # a busy stretch
    for params in ({"resolution": 3000}, {"start_ms": at, "end_ms": at + full["fullTimespan"][1] / 100, "resolution": 8000}):
        r = client.get("/api/trace/window", params={"run": run.name, **params})
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        expected = ws.trace_window(run, TraceQuery(**params))
        assert r.content == orjson.dumps(expected) and expected["slices"]["id"]


def _by_unique(track, depth, px) -> np.ndarray:
    """The thinning's definition (what window_rows did before): the first of each key."""
    key = ((track.astype(np.int64) << 16 | depth.astype(np.int64)) << 20) | px
    return np.unique(key, return_index=True)[1]


def test_first_per_pixel_is_the_keys_first(indexes):
    """On real windows' narrow rows (in start order, as window_rows hands them over):
    the radix grouping picks the same rows as the sort of the keys; and so does the
    keys' own sort, taken where the rows do not fit 16-bit codes."""
    checked = thinned = 0
    for ix in indexes.values():
        for res in (100, 1000, 8000):
            for a, b in ((0, ix.end_ps), (ix.end_ps // 3, ix.end_ps // 3 + ix.end_ps // 50)):
                rows = ix.overlapping(a, b)
                st = np.asarray(ix.cols["start"][rows])
                order = np.argsort(st, kind="stable")
                rows, st = rows[order], st[order]
                p = max(1, (b - a) // res)
                nr = rows[np.asarray(ix.cols["dur"][rows]) < p]
                if not len(nr):
                    continue
                track, depth = np.asarray(ix.cols["track"][nr]), np.asarray(ix.cols["depth"][nr])
                px = np.clip((np.asarray(ix.cols["start"][nr]) - a) // p, 0, res + 1)
                want = np.sort(_by_unique(track, depth, px))
                thinned += len(want) < len(nr)
                assert np.array_equal(np.sort(ti.first_per_pixel(track, depth, px)), want)
                wide = track + 70_000  # too many rows for 16-bit codes: the keys' sort
                assert np.array_equal(np.sort(ti.first_per_pixel(wide, depth, px)), np.sort(_by_unique(wide, depth, px)))
                checked += 1
    assert checked >= 10 and thinned >= 5


def test_name_codes_are_np_unique(indexes):
    """Every window's name ids numbered by counting equal ``np.unique(...,
    return_inverse=True)``; ids spread too far take the sort itself."""
    for ix in indexes.values():
        for res in (300, 8000):
            sl, _ = ix.window_rows(0, ix.end_ps, res)
            for name in (sl["name"], sl["name"][::7], sl["name"] * 1000 + 5):
                got, want = tvw.name_codes(name), np.unique(name, return_inverse=True)
                assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1].reshape(-1))


def test_steps_in_is_the_steps_overlapping(indexes):
    """The steps a window shows: those with start < e and end > s, in their order,
    including windows that begin or end exactly on a step's edge."""
    checked = 0
    for ix in indexes.values():
        steps = ix.meta["steps"]
        edges = sorted({x for _n, st, du in steps for x in (st, st + du, st - 1, st + du + 1)})
        spans = [(0, ix.end_ps)] + [(s, e) for s in edges[::3] for e in edges[::5] if e > s][:400]
        for s, e in spans:
            want = [x for x in steps if x[1] < e and x[1] + x[2] > s]
            assert tvw.steps_in(ix, s, e) == want
            checked += bool(want) and len(want) < len(steps)
    assert checked >= 10


def _same_rows(got: tuple[dict, bool], want: tuple[dict, bool]) -> None:
    assert got[1] == want[1] and list(got[0]) == list(want[0])
    for k, v in want[0].items():
        assert got[0][k].dtype == v.dtype and np.array_equal(got[0][k], v), k


@pytest.mark.skipif(ti._native is None, reason="the _trace_build extension is not built")
def test_window_pick_is_the_numpy_twin(indexes, monkeypatch):
    """A window's rows by the C pass (``_trace_build.window_pick``) are the numpy path's
    (``TraceIndex._window_rows_numpy``): the same rows and columns in the same order and
    the same ``truncated``, on the fixtures' windows (with tiers and without: 1 ps per
    pixel; a window of 1 ps, one before the trace, one at its end), from the columns as
    stored (narrow, memory-mapped; tracks also as uint16) and as read (wide, in memory);
    where a (track, depth) falls outside the table it is given, the C pass declines and
    the numpy path answers."""
    picked = thinned = declined = 0
    fell_back: list = []
    for ix in indexes.values():
        span = ix.end_ps
        rnd = np.random.default_rng(5)
        spans = [(0, span, 8000), (0, span, 1000), (-span // 10, span // 5, 300), (span - 1, span, 50), (5, 6, 8000),
                 (span // 2, span // 2 + 5000, 100_000)]
        spans += [(int(a), int(a) + max(1, int(f * span)), res) for a in rnd.random(10) * span
                  for f, res in ((0.01, 8000), (0.001, 2000), (0.2, 1500), (0.00001, 300))]
        for s, e, res in spans:
            with monkeypatch.context() as m:
                m.setattr(ti, "_native", None)
                want = ix.window_rows(s, e, res)
            with monkeypatch.context() as m:  # (the C pass answers: the numpy path is not asked)
                m.setattr(ix, "_window_rows_numpy", lambda *a: fell_back.append(a))
                _same_rows(ix.window_rows(s, e, res), want)
            picked += len(want[0]["rows"]) > 0
            thinned += want[1]
            with monkeypatch.context() as m:  # the columns wide and in memory: the C pass's generic reads
                for k in ("dur", "track", "depth"):
                    m.setitem(ix.cols, k, np.asarray(ix.cols[k]))
                _same_rows(ix.window_rows(s, e, res), want)
            with monkeypatch.context() as m:  # tracks stored as uint16 (an index of more than 256)
                m.setitem(ix.cols, "track", ti._Widened(np.asarray(ix.cols["track"]).astype(np.uint16), np.int32))
                _same_rows(ix.window_rows(s, e, res), want)
            with monkeypatch.context() as m:  # a table one depth deep: declined where any is deeper
                m.setattr(ix, "_ndepths", 1)
                got = ix.window_rows(s, e, res)
                p = max(1, (e - s) // res)
                declined += ix._pick_native(s, e, p, res, 0, np.zeros(0, np.int64)) is None
            _same_rows(got, want)
    assert picked >= 60 and thinned >= 20 and declined >= 10 and not fell_back
    ix = next(iter(indexes.values()))
    with monkeypatch.context() as m:  # a (track, depth) table far larger than the window: declined
        m.setattr(ix, "_ndepths", 1 << 19)
        s, e = ix.end_ps // 2, ix.end_ps // 2 + 10**6
        assert ix._pick_native(s, e, max(1, (e - s) // 100), 100, 0, np.zeros(0, np.int64)) is None
        got = ix.window_rows(s, e, 100)
    monkeypatch.setattr(ti, "_native", None)
    _same_rows(got, ix.window_rows(s, e, 100))


def test_flows_first_is_flows_in_cut(indexes, monkeypatch):
    """A window's first arrows and their count (``flows_first``) are ``flows_in``'s, cut:
    with every arrow short (only the first ones gathered) and with long ones (the short
    bound lowered to 1 µs: the torch traces' arrows are then long, and flows_in's own
    answer is cut)."""
    checked = cut = 0
    for short_ps in (ti.FLOW_SHORT_PS, 10**6):
        monkeypatch.setattr(ti, "FLOW_SHORT_PS", short_ps)
        for ix in indexes.values():
            ix._flow_split = None  # split again with this bound
            span = ix.end_ps
            for a, b in [(0, span), (-5, span // 7)] + [(int(x), int(x) + span // 50) for x in np.linspace(0, span, 9)]:
                want = ix.flows_in(a, b)
                for limit in (1, 7, 5000):
                    got, n = ix.flows_first(a, b, limit)
                    assert n == len(want) and np.array_equal(got, want[:limit])
                    checked += n > 0
                    cut += n > limit
        for ix in indexes.values():
            ix._flow_split = None
    assert checked >= 30 and cut >= 10
