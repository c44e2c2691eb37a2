"""The host plane of a CPU-only xplane is decoded once for the trace index and the steps
(issue 34, "Speed"): the index build keeps the step reader's columns
(formats/xplane_step_events.py ``HostStepColumns``, written from the chunks
formats/xplane_trace.py decodes), and the steps of an indexed file are read from them,
giving what a decode of the file gives, step for step.

The inputs are real: the CPU-only profiles of the shared fixtures and of the demo log
directory, and a JAX CPU profile written by ``scripts/make_big_jax_profile.py`` (the
generator of the 308 MB benchmark profile).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from profscope.formats import xplane
from profscope.formats import xplane_step_events as xse
from profscope.formats import xplane_trace
from profscope.tools import trace_index

ROOT = Path(__file__).parents[1]
TF_CPU = "tf_bfc_cpu/profile/plugins/profile/2026_11_29_18_51_13/vm.xplane.pb"


@pytest.fixture(scope="module")
def jax_cpu(tmp_path_factory) -> Path:
    """A JAX CPU profile of 300 training steps (~100k host events, flows between thunks)."""
    out = tmp_path_factory.mktemp("jax300")
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_big_jax_profile.py"), "--out", str(out),
                          "--steps", "300"], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return next(out.rglob("*.xplane.pb"))


def _cpu_only(shared_fixtures, jax_cpu) -> list[Path]:
    demo = ROOT / "src" / "profscope" / "demo" / "logdir"
    out = [shared_fixtures / TF_CPU, jax_cpu]
    for p in sorted(demo.rglob("*.xplane.pb")):
        with open(p, "rb") as f:
            if xse.steps_plane(xplane.scan(f, str(p))) is not None:
                out.append(p)
    return out


def _index(path: Path, folder: Path) -> None:
    writer = trace_index.IndexWriter(folder, source=str(path))
    try:
        with open(path, "rb") as f:
            xplane_trace.read_trace(f, str(path), 0, "host", sink=writer, host_steps=xse.HostStepColumns(folder))
    finally:
        writer.close()


def test_steps_from_the_index_columns_equal_the_decoded_steps(shared_fixtures, jax_cpu, tmp_path):
    paths = _cpu_only(shared_fixtures, jax_cpu)
    assert len(paths) >= 4  # the TF fixture, the JAX profile, the demo's CPU runs
    for k, path in enumerate(paths):
        folder = tmp_path / str(k)
        folder.mkdir()
        _index(path, folder)
        assert (folder / xse.HOST_COLUMNS / "done.json").exists(), path
        with open(path, "rb") as f:
            decoded = xse.read_step_events(f, str(path))
        with open(path, "rb") as f:
            indexed = xse.read_step_events(f, str(path), folder)
        assert decoded.grouping == "grouped" and decoded.steps, path
        assert indexed == decoded, path
        if path == jax_cpu:  # its 300 StepTraceAnnotation steps, grouped through the columns
            assert len(indexed.steps) == 300 and indexed.steps[0]["name"] == "train 0"


def test_a_device_profile_keeps_no_host_columns(shared_fixtures, tmp_path):
    """With GPU planes the steps come from them: the host plane's columns would be disk
    written for nothing."""
    path = next((shared_fixtures / "public_profiles" / "xplane").rglob("*.xplane.pb"))
    with open(path, "rb") as f:
        assert xse.steps_plane(xplane.scan(f, str(path))) is None
    _index(path, tmp_path)
    assert not (tmp_path / xse.HOST_COLUMNS).exists()


def _workspace(logdir: Path, cache: Path):
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.model.catalog import RunKind
    from profscope.storage import LogDir

    ws = Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(cache))
    run = next(r for r in ws.runs() if r.kind is RunKind.PROFILE)
    return ws, run


def test_steps_of_an_indexed_file_read_no_host_plane_bytes(shared_fixtures, tmp_path):
    """Once the trace index is built, the steps answer does not decode the host plane
    again: the file's host events are overwritten (same size and mtime, so the same file
    identity) after the index build, and the steps are still the intact file's, where a
    decode of the overwritten bytes is an error."""
    from profscope.errors import ProfscopeError

    logdir = tmp_path / "logdir"
    shutil.copytree(shared_fixtures / "tf_bfc_cpu", logdir)
    intact = tmp_path / "intact"
    shutil.copytree(shared_fixtures / "tf_bfc_cpu", intact)
    ws_intact, run_intact = _workspace(intact, tmp_path / "cache0")
    ws, run = _workspace(logdir, tmp_path / "cache")
    host = run.hosts[0]
    info = run.xplane(host)
    path = logdir / info.path
    with open(path, "rb") as f:
        expected = xse.read_step_events(f, str(path))
        ref = xse.steps_plane(xplane.scan(f, str(path)))
    name, info, _pos = ws._trace_hosts(run, xplane_trace_query(host))[0]
    ws.trace_index(run, name, info)
    st = os.stat(path)
    with open(path, "r+b") as f:  # zeros: field number 0, no valid protobuf
        f.seek(ref.offset + ref.length // 3)
        f.write(bytes(ref.length // 3))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    answer = ws.xplane_steps_ops(run, host)
    assert answer == ws_intact.xplane_steps_ops(run_intact, host)
    assert answer["summary"]["steps"] == len(expected.steps) == 5
    # the overwritten bytes cannot be decoded: a cold cache's answer is an error naming the file
    ws2, run2 = _workspace(logdir, tmp_path / "cache2")
    with pytest.raises(ProfscopeError):
        ws2.xplane_steps_ops(run2, host)


def xplane_trace_query(host: str):
    from profscope.app.queries import TraceQuery

    return TraceQuery(host=host)
