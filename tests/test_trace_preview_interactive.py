"""The interactive preview (issue 40; app/trace_preview.py): while a build runs, a window
inside the trace, a slice's details and a search by name are answered from what the build
published, and say so; checked against the full index built from the same file, on a real
GPU profile and on a big JAX-style GPU xplane from the repo's builders."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from profscope.app import trace_preview
from profscope.app.queries import TraceQuery
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.cache.worker import WorkerPool
from profscope.formats import xplane_trace
from profscope.server import create_app
from profscope.storage import LogDir
from profscope.testing import derived_xplane
from profscope.tools import trace_index as ti
from profscope.tools import trace_viewer as tvw
from tests.test_trace_preview import GPU, _build

pytestmark = pytest.mark.skipif(ti._native is None, reason="the preview's picks come from the native build")

RES = 1200


def _server(tmp_path, data: bytes):
    logdir = tmp_path / "logdir" / "plugins" / "profile" / "s1"
    logdir.mkdir(parents=True)
    path = logdir / "gpu-host.xplane.pb"
    path.write_bytes(data)
    cache = DiskCache(tmp_path / "cache", workers=WorkerPool(enabled=False))
    ws = Workspace(LogDir(str(tmp_path / "logdir"), listing_ttl=0), cache)
    run = ws.runs()[0]
    host, info = ws.trace_sources(run)[0]
    key = ws._trace_index_key(host, info)
    return ws, TestClient(create_app(ws)), path, run, key


@pytest.fixture(params=["gpu", "jax"])
def published(request, shared_fixtures, tmp_path):
    """A server whose one host has a preview published and its index not built yet (the
    same writer as a running build, into the folder the build publishes to); the full
    index of the same file beside it to compare with."""
    data = (shared_fixtures / GPU).read_bytes() if request.param == "gpu" else derived_xplane.large_gpu(200_000)
    ws, client, path, run, key = _server(tmp_path, data)
    _build(path, tmp_path / "full", preview=(ws.cache.preview_dir(key), RES))
    assert (ws.cache.preview_dir(key) / "meta.json").is_file()
    full = ti.TraceIndex(tmp_path / "full", decoder=xplane_trace)
    return ws, client, run, key, full


def _rows(w):
    s = w["slices"]
    return set(zip(s["track"], s["start"], s["dur"], s["depth"], (w["names"][i] for i in s["name"])))


def _zoom(whole):
    """A window of a tenth of the trace around the start of its middle slice (by start)."""
    f0, f1 = whole["fullTimespan"]
    starts = sorted(whole["slices"]["start"])
    mid = starts[len(starts) // 2]
    half = (f1 - f0) / 20
    return max(f0, mid - half), min(f1, mid + half)


def test_a_window_inside_the_trace_is_the_previews_slices_clipped_to_it(published):
    ws, client, run, key, full = published
    p = {"run": run.name, "resolution": RES}
    whole = client.get("/api/trace/preview", params=p).json()
    assert whole["preview"] is True
    a, b = _zoom(whole)
    r = client.get("/api/trace/preview", params={**p, "start_ms": a, "end_ms": b})
    assert r.status_code == 200
    zoomed = r.json()
    assert zoomed["preview"] is True and "coarse" in zoomed["coarse"]
    assert zoomed["window"] == [pytest.approx(a), pytest.approx(b)]
    got = _rows(zoomed)
    assert got and all(st < b and st + du > a for _, st, du, _, _ in got)  # clipped to the window
    # the preview's own slices in the window, thinned to about one per pixel as the index's windows are
    every = _rows(client.get("/api/trace/preview", params={**p, "start_ms": a, "end_ms": b, "resolution": 100000}).json())
    assert got <= every
    # exact where it shows something: each is a slice the index will show in that window
    index_rows = _exact_rows(full, a, b)
    assert got <= index_rows and len(got) < len(index_rows)
    # and the long slices (a whole-trace pixel or more) are all there
    px = (whole["fullTimespan"][1] - whole["fullTimespan"][0]) / RES
    assert {x for x in index_rows if x[2] >= px} <= got


def _full_view(full, run):
    return tvw.TraceView(run.name, [tvw.HostIndex(0, "gpu-host", full, 1000)])


def _exact_rows(full, a, b):
    """The full index's every event overlapping [a, b) ms, as :func:`_rows` writes a
    window's (one host at position 0: track ids are the index's, no shift)."""
    rows = full.overlapping(round(a * tvw.PS_PER_MS), round(b * tvw.PS_PER_MS))
    c = {k: np.asarray(full.cols[k][rows]) for k in ("track", "start", "dur", "depth", "name")}
    return set(zip(c["track"].tolist(), (c["start"] / tvw.PS_PER_MS).tolist(), (c["dur"] / tvw.PS_PER_MS).tolist(),
                   c["depth"].tolist(), (full.names[k] for k in c["name"].tolist())))


def test_details_of_a_preview_slice_are_the_index_slices(published):
    ws, client, run, key, full = published
    p = {"run": run.name, "resolution": RES}
    whole = client.get("/api/trace/preview", params=p).json()
    s = whole["slices"]
    i = int(np.argmax(s["dur"]))
    r = client.get("/api/trace/preview/event", params={"run": run.name, "id": s["id"][i]})
    assert r.status_code == 200
    ev = r.json()
    assert ev["preview"] is True and "args" not in ev
    assert (ev["name"], ev["start"], ev["dur"]) == (whole["names"][s["name"][i]], s["start"][i], s["dur"][i])
    # the same slice in the full index: same track (process › name), start, duration
    rows = full.overlapping(round(ev["start"] * tvw.PS_PER_MS), round((ev["start"] + ev["dur"]) * tvw.PS_PER_MS))
    j = next(int(r) for r in rows if (full.cols["start"][r] / tvw.PS_PER_MS, full.cols["dur"][r] / tvw.PS_PER_MS,
                                       full.names[int(full.cols["name"][r])]) == (ev["start"], ev["dur"], ev["name"]))
    real = _full_view(full, run).event(j)
    assert ev["track"] == real["track"] and ev["depth"] == real["depth"]


def test_search_finds_the_previews_names_and_says_so(published):
    ws, client, run, key, full = published
    p = {"run": run.name, "resolution": RES}
    whole = client.get("/api/trace/preview", params=p).json()
    name = whole["names"][whole["slices"]["name"][int(np.argmax(whole["slices"]["dur"]))]]
    q = name[: max(3, len(name) // 2)]
    r = client.get("/api/trace/preview/search", params={"run": run.name, "q": q, "limit": 5000})
    assert r.status_code == 200
    hits = r.json()
    assert hits["preview"] is True and hits["previewEventsSize"] < hits["totalEventsSize"]
    # every preview slice whose name holds q, and nothing else
    px = ti.TraceIndex(ws.cache.preview_dir(key), decoder=xplane_trace)
    want = sum(q.lower() in px.names[int(k)].lower() for k in px.cols["name"])
    assert hits["total"] == want > 0
    assert all(q.lower() in m["name"].lower() for m in hits["matches"])
    # the index finds at least as many
    assert _full_view(full, run).search(q, 1)["total"] >= want


def test_bad_preview_requests_are_states_or_4xx(shared_fixtures, tmp_path):
    ws, client, path, run, key = _server(tmp_path, (shared_fixtures / GPU).read_bytes())
    base = {"run": run.name}
    # no build running: states, never a 500
    for url, extra in (("/api/trace/preview", {"start_ms": 1, "end_ms": 2}), ("/api/trace/preview/event", {"id": 3}),
                       ("/api/trace/preview/search", {"q": "a"})):
        r = client.get(url, params={**base, **extra})
        assert r.status_code == 200 and r.json() == {**r.json(), "preview": False, "state": "pending"}, (url, r.text)
    _build(path, tmp_path / "full", preview=(ws.cache.preview_dir(key), RES))
    end = client.get("/api/trace/preview", params=base).json()["fullTimespan"][1]
    for url, extra, code in (
        ("/api/trace/preview", {"start_ms": end * 2, "end_ms": end * 3}, 400),  # wholly after the trace
        ("/api/trace/preview", {"start_ms": 5, "end_ms": 1}, 400),  # end before start
        ("/api/trace/preview/event", {"id": 10**9}, 404),
        ("/api/trace/preview/event", {}, 400),
        ("/api/trace/preview/search", {}, 400),
    ):
        r = client.get(url, params={**base, **extra})
        assert r.status_code == code, (url, extra, r.status_code, r.text)
        assert r.headers["content-type"].startswith("application/json")
    r = client.get("/api/trace/preview", params={**base, "start_ms": end * 2, "end_ms": end * 3})
    assert "gpu-host.xplane.pb" in r.text
    # the page's own first window builds the index: then every preview question says "ready"
    client.get("/api/trace/window", params={**base, "resolution": RES})
    for url, extra in (("/api/trace/preview", {"start_ms": 1, "end_ms": 2}), ("/api/trace/preview/event", {"id": 3}),
                       ("/api/trace/preview/search", {"q": "a"})):
        r = client.get(url, params={**base, **extra})
        assert r.status_code == 200 and r.json()["state"] == "ready", (url, r.text)


def test_a_first_zoom_is_the_index_window_slice_for_slice(published):
    """The build publishes the tier one step finer too (tools/trace_index.py
    _write_preview): a window of a quarter of the trace, the first zoom, shows from the
    preview exactly what the index will show there (the whole-trace window already did)."""
    ws, client, run, key, full = published
    p = {"run": run.name, "resolution": RES}
    whole = client.get("/api/trace/preview", params=p).json()
    f1 = whole["fullTimespan"][1]
    starts = sorted(whole["slices"]["start"])
    for mid in (starts[len(starts) // 2], starts[len(starts) // 5], starts[-1]):
        a = min(max(0.0, mid - f1 / 8), f1 * 3 / 4)  # a quarter of the trace, inside it
        b = a + f1 / 4
        prev = client.get("/api/trace/preview", params={**p, "start_ms": a, "end_ms": b}).json()
        exact = _full_view(full, run).window(a, b, RES)
        assert prev["preview"] is True and prev["window"] == exact["window"]
        assert _rows(prev) == _rows(exact) and len(_rows(exact)) > 10, (a, b)


def test_a_preview_cleared_while_it_is_read_answers_the_state(shared_fixtures, tmp_path):
    """The build clears its preview when the index is in place; an answer that opened the
    preview just before reads its memory-mapped columns after (a FileNotFoundError, a 500
    seen once while a page polled). The answer is then the state as it is now."""
    ws, _client, path, run, key = _server(tmp_path, (shared_fixtures / GPU).read_bytes())
    _build(path, tmp_path / "full", preview=(ws.cache.preview_dir(key), RES))

    def build_then_read(view, _file):
        ws.trace_window(run, TraceQuery(resolution=RES))  # the real build, which clears the preview
        assert not ws.cache.preview_dir(key).exists()
        return view.window(None, None, RES)

    answer = trace_preview._from_preview(ws, run, TraceQuery(resolution=RES), build_then_read)
    assert answer["preview"] is False and answer["state"] == "ready"
