"""The resolution tiers left to a window's first need (issue 34, "Speed"): Steps & ops'
build (``IndexWriter.finish(windows=False)``) writes the index's columns without the
tiers, which only the page's windows read; the first window has a conversion worker make
them from the columns on disk (``trace_index.write_tiers``), once, and they are the
build's own: the same files, the same windows, on real xplanes and PyTorch traces."""

from __future__ import annotations

import os
import shutil
import threading
import traceback

import numpy as np
import pytest

from profscope.app.queries import TraceQuery
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.storage import LogDir
from profscope.testing.timelines import build_index
from profscope.tools import trace_index as ti

PROFILES = [
    "xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",
    "xplane/mi300_jax_conv_xprof_touched/plugins/profile/jax_conv_minimal/chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb",
    "xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb",
    "traces/kineto_resnet50_v100.pt.trace.json.gz",
]


def _windows(ix: ti.TraceIndex) -> list:
    """The whole span and a few narrower windows at a few resolutions: every tier used."""
    span = ix.end_ps
    out = []
    for res in (100, 1000, 8000):
        for a, b in ((0, span), (span // 3, span // 3 + span // 50), (span // 2, span // 2 + span // 1000)):
            sl, truncated = ix.window_rows(a, b, res)
            out.append(({k: np.asarray(v) for k, v in sl.items()}, truncated))
    return out


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("rel", PROFILES)
def test_tiers_made_later_are_the_builds(rel, native, shared_fixtures, tmp_path, monkeypatch):
    if not native:
        monkeypatch.setattr(ti, "_native", None)
    path = shared_fixtures / "public_profiles" / rel
    build_index(path, tmp_path / "timeline", windows=True)
    build_index(path, tmp_path / "steps", windows=False)
    steps = ti.TraceIndex(tmp_path / "steps")
    assert steps.tiers_missing() and steps.meta["tiers"] is None
    timeline = ti.TraceIndex(tmp_path / "timeline")
    # the flow slices' arrows wait for the tiers too (an xplane's: a Chrome trace's flow
    # points are bound in the build), but their count is in the meta, the same
    arrows = ti.FLOW_ARROWS_FILE
    assert (tmp_path / "steps" / arrows).exists() == rel.endswith(".json.gz")
    assert {**steps.meta, "tiers": None} == {**timeline.meta, "tiers": None}
    # a reader other than the page's windows has them made in its process: the same
    assert np.array_equal(ti.TraceIndex(tmp_path / "steps").flows, timeline.flows)
    with pytest.raises(RuntimeError):
        steps.window_rows(0, steps.end_ps, 1000)
    (tmp_path / "tiers").mkdir()
    ti.write_tiers(tmp_path / "steps", tmp_path / "tiers")
    steps.use_tiers(tmp_path / "tiers")
    assert sorted(steps.tiers) == timeline.meta["tiers"] and timeline.meta["tiers"]
    for z in timeline.meta["tiers"]:
        for k in ("rows", "fence"):
            a = np.load(tmp_path / "timeline" / f"tier_{z}_{k}.npy")
            b = np.load(tmp_path / "tiers" / f"tier_{z}_{k}.npy")
            assert a.dtype == b.dtype and np.array_equal(a, b), (z, k)
    for (a, ta), (b, tb) in zip(_windows(timeline), _windows(steps)):
        assert ta == tb and a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    # everything else the build wrote is the same, the arrows made with the tiers
    # (where the build left them) included, and read back from there
    for p in (tmp_path / "timeline").glob("*.npy"):
        if not p.name.startswith("tier_"):
            other = tmp_path / ("steps" if p.name != arrows or rel.endswith(".json.gz") else "tiers") / p.name
            b = np.load(other)
            assert np.load(p).dtype == b.dtype and np.array_equal(np.load(p), b), p.name
    assert len(steps.flows) == steps.meta["flows"] and np.array_equal(steps.flows, timeline.flows)


def _count_tier_builds(tmp_path, monkeypatch):
    """A file that gets a line per ``write_tiers`` call (the conversion runs in a worker
    process: counted on disk)."""
    made = tmp_path / "made"
    real = ti.write_tiers

    def counted(src, out, progress=None):
        with open(made, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real(src, out, progress)

    monkeypatch.setattr(ti, "write_tiers", counted)
    return made


def test_a_steps_built_index_gets_its_tiers_once_for_two_first_windows(shared_fixtures, tmp_path, monkeypatch):
    """Through the app: Steps & ops builds the index without tiers; two first windows at
    once have one conversion make them (the cache's single flight), and both answers
    equal a timeline-built index's."""
    logdir = shared_fixtures / "public_profiles" / "xplane" / "tpu_inference"
    made = _count_tier_builds(tmp_path, monkeypatch)
    ws = Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(tmp_path / "cache"))
    run = ws.runs()[0]
    ws.steps_ops(run, TraceQuery())
    assert not made.exists()  # Steps & ops made no tiers
    query = TraceQuery(resolution=2000)
    answers, errors = [], []
    barrier = threading.Barrier(2)

    def window():
        try:
            barrier.wait()
            answers.append(ws.trace_window(run, query))
        except Exception:  # pragma: no cover - reported below
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=window) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(answers) == 2
    assert len(made.read_text().split()) == 1
    fresh = Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(tmp_path / "cache2"))
    timeline = fresh.trace_window(fresh.runs()[0], query)
    assert answers[0] == answers[1] == timeline
    shutil.rmtree(tmp_path / "cache2")


def test_readers_other_than_the_pages_windows_build_no_tiers(shared_fixtures, tmp_path, monkeypatch):
    """XProf's windows read its zoom levels, not the tiers: an index built for an XProf
    answer (or a search, or details) has none, the page's first window then has them
    made once, and its answer equals a page-built index's; XProf's answer is the same
    whichever built the index."""
    from profscope.app.queries import XprofTraceQuery

    logdir = shared_fixtures / "public_profiles" / "xplane" / "tf_gpu"
    made = _count_tier_builds(tmp_path, monkeypatch)
    ws = Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(tmp_path / "cache"))
    run = ws.runs()[0]
    xprof = ws.trace_xprof_json(run, XprofTraceQuery(resolution=8000))
    ws.trace_search(run, TraceQuery(q="a"))
    (h,) = ws.trace_view(run, TraceQuery()).hosts
    assert h.index.tiers_missing() and not made.exists()
    query = TraceQuery(resolution=2000)
    page = ws.trace_window(run, query)
    assert len(made.read_text().split()) == 1
    assert ws.trace_window(run, TraceQuery(resolution=900)) and len(made.read_text().split()) == 1
    fresh = Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(tmp_path / "cache2"))
    frun = fresh.runs()[0]
    assert fresh.trace_window(frun, query) == page
    assert fresh.trace_xprof_json(frun, XprofTraceQuery(resolution=8000)) == xprof
    shutil.rmtree(tmp_path / "cache2")
