"""The index build's early preview (tools/trace_index.py ``IndexWriter._write_preview``):
once the events are nested, a build publishes the small index of what a whole-trace
window shows, so a page can draw the trace before the full index is sorted. Checked on
real GPU profiles and PyTorch traces: the preview's whole-trace window is the full
index's, slice for slice; the app serves it only while the build runs."""

from __future__ import annotations

import shutil

import pytest
from fastapi.testclient import TestClient

from profscope.app.queries import TraceQuery
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.cache.worker import WorkerPool
from profscope.formats import chrome_trace, xplane_trace
from profscope.server import create_app
from profscope.storage import LogDir
from profscope.tools import trace_index as ti
from profscope.tools import trace_viewer as tvw

pytestmark = pytest.mark.skipif(ti._native is None, reason="the preview's picks come from the native build")

GPU = "public_profiles/xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb"
REAL = [
    (GPU, 1500),
    (GPU, 400),
    ("public_profiles/traces/hta_alexnet.trace.json.gz", 1200),
    ("public_profiles/traces/kineto_resnet50_v100.pt.trace.json.gz", 150),
    ("public_profiles/traces/tracelens_b200_eager.trace.json.gz", 150),
]


def _build(path, folder, preview=None) -> None:
    folder.mkdir(parents=True)
    w = ti.IndexWriter(folder)
    try:
        with open(path, "rb") as f:
            if path.name.endswith(".xplane.pb"):
                ev = xplane_trace.read_trace(f, str(path), 0, "host", sink=w)
            else:
                ev = chrome_trace.trace_columns(f, str(path), sink=w)
    finally:
        w.close()
    w.finish(ev, preview=preview)


def _window(folder, resolution):
    ix = ti.TraceIndex(folder, decoder=xplane_trace)
    return tvw.TraceView("r", [tvw.HostIndex(0, "host", ix, 1000)]).window(None, None, resolution), ix


def _slices(w):
    s = w["slices"]
    return sorted(zip(s["track"], s["start"], s["dur"], s["depth"], (w["names"][i] for i in s["name"])))


@pytest.mark.parametrize("rel,resolution", REAL)
def test_preview_window_is_the_index_window(rel, resolution, shared_fixtures, tmp_path):
    _build(shared_fixtures / rel, tmp_path / "full", preview=(tmp_path / "preview", resolution))
    assert (tmp_path / "preview" / "meta.json").is_file()
    assert not (tmp_path / "preview.part").exists()
    full, ix = _window(tmp_path / "full", resolution)
    prev, px = _window(tmp_path / "preview", resolution)
    assert px.n <= ti.PREVIEW_MAX_SHARE * ix.n
    assert px.tracks == ix.tracks  # depths and event counts of the whole trace
    for k in ("fullTimespan", "window", "originNs", "tracks", "processes", "counters", "steps"):
        assert prev[k] == full[k], k
    p = max(1, ix.end_ps // resolution)
    z = max((t for t in ix.meta["tiers"] if (1 << t) <= p), default=None)
    assert z is not None
    # the preview holds the tier XProf-style thinning uses at this resolution
    assert _slices(prev) == _slices(full) and len(_slices(full)) > 100


def test_no_preview_when_it_would_hold_most_events(shared_fixtures, tmp_path):
    """At a resolution where a pixel is finer than the finest tier, the first window is
    every event: nothing is published."""
    _build(shared_fixtures / GPU, tmp_path / "full", preview=(tmp_path / "preview", 10**9))
    assert not (tmp_path / "preview").exists()


@pytest.fixture
def one_host(shared_fixtures, tmp_path):
    logdir = tmp_path / "logdir" / "plugins" / "profile" / "s1"
    logdir.mkdir(parents=True)
    shutil.copy(shared_fixtures / GPU, logdir / "gpu-host.xplane.pb")
    # conversions in this process: the last test looks inside the build
    cache = DiskCache(tmp_path / "cache", workers=WorkerPool(enabled=False))
    ws = Workspace(LogDir(str(tmp_path / "logdir"), listing_ttl=0), cache)
    return ws, TestClient(create_app(ws)), logdir / "gpu-host.xplane.pb"


def test_the_app_serves_a_preview_only_while_the_build_runs(one_host):
    ws, client, path = one_host
    run = ws.runs()[0]
    params = {"run": run.name, "resolution": 1500}
    # no preview is a state the page polls, not an error (a 404 was a red console line)
    r = client.get("/api/trace/preview", params=params)
    assert r.status_code == 200 and r.json()["preview"] is False and r.json()["state"] == "pending"
    assert "yet" in r.json()["message"]
    # what a running build has published: the same writer, into the folder the build uses
    host, info = ws.trace_sources(run)[0]
    key = ws._trace_index_key(host, info)
    _build(path, ws.cache.root / "scratch", preview=(ws.cache.preview_dir(key), 1500))
    r = client.get("/api/trace/preview", params=params)
    assert r.status_code == 200
    prev = r.json()
    assert prev["preview"] is True and prev["returnedEventsSize"] > 100
    # the page's first request builds the index; its build clears the preview when done
    full = client.get("/api/trace/window", params=params).json()
    assert _slices(prev) == _slices(full)
    assert prev["totalEventsSize"] == full["totalEventsSize"]
    assert not ws.cache.preview_dir(key).exists()
    r = client.get("/api/trace/preview", params=params)
    assert r.status_code == 200 and r.json()["preview"] is False and r.json()["state"] == "ready"


def test_a_first_window_request_publishes_a_preview(one_host, monkeypatch):
    """The whole-trace window asks its build for a preview at the page's resolution (seen
    from inside the build, just before the index is renamed into place)."""
    ws, _client, _path = one_host
    run = ws.runs()[0]
    seen = []
    real = ti.IndexWriter.finish

    def finish(self, ev, progress=None, preview=None, known=None, **kw):
        meta = real(self, ev, progress, preview, known, **kw)
        if known is None:
            seen.append((preview[1], preview[0].is_dir()))
        return meta

    monkeypatch.setattr(ti.IndexWriter, "finish", finish)
    ws.trace_window(run, TraceQuery(resolution=900))
    assert seen == [(900, True)]
