"""XProf's step grouping (formats/xplane_steps.py) on long CPU profiles: the native walks
(``_xplane_scan.nest_sequence`` / ``group_from``) give what the Python twin gives, group
id for group id and step for step, and the step reader's memory is bounded by the file.

The inputs are real: the TF CPU profile of the shared fixtures (allocator events, 5
``train`` steps grouped by XProf's rules) and a JAX CPU profile written by
``scripts/make_big_jax_profile.py`` (the generator of the 308 MB benchmark profile).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from profscope.formats import xplane_allocator as xm
from profscope.formats import xplane_step_events as xse
from profscope.formats import xplane_wire as xw

pytestmark = pytest.mark.skipif(xw._native is None, reason="the _xplane_scan extension is not built")

ROOT = Path(__file__).parents[1]
TF_CPU = "tf_bfc_cpu/profile/plugins/profile/2026_11_29_18_51_13/vm.xplane.pb"


@pytest.fixture(scope="module")
def jax_cpu(tmp_path_factory) -> Path:
    """A JAX CPU profile of 300 training steps (2.5 MB, ~100k host events), every step a
    ``StepTraceAnnotation`` with XLA's per-thunk events and their producer/consumer flows."""
    out = tmp_path_factory.mktemp("jax300")
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_big_jax_profile.py"), "--out", str(out),
                          "--steps", "300"], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return next(out.rglob("*.xplane.pb"))


def _steps(path: Path, native: bool, monkeypatch) -> tuple:
    monkeypatch.setenv("PROFSCOPE_NATIVE", "1" if native else "0")
    with open(path, "rb") as f:
        ev = xse.read_step_events(f, str(path))
    return ev.grouping, ev.steps, ev.first_ps


def test_native_grouping_equals_python_on_a_jax_cpu_profile(jax_cpu, monkeypatch):
    grouping, steps, first = _steps(jax_cpu, True, monkeypatch)
    assert grouping == "grouped" and len(steps) == 300
    assert [s["name"] for s in steps[:2]] == ["train 0", "train 1"]
    assert (grouping, steps, first) == _steps(jax_cpu, False, monkeypatch)


def test_native_grouping_equals_python_on_the_tf_cpu_fixture(shared_fixtures, monkeypatch):
    """Allocator events (hung under their nesting parent), threadpool regions, TF names."""
    data = (shared_fixtures / TF_CPU).read_bytes()
    out = {}
    for native in (True, False):
        monkeypatch.setenv("PROFSCOPE_NATIVE", "1" if native else "0")
        ev = xm.read_allocator_events(io.BytesIO(data), "vm.xplane.pb")
        out[native] = (ev.grouping, ev.steps, np.asarray(ev.group_id).tolist())
    assert out[True][0] == "grouped" and [s.name for s in out[True][1]] == [f"train {i}" for i in range(5)]
    assert max(out[True][2]) == 4
    assert out[True] == out[False]


def test_step_reader_memory_is_bounded_by_the_file(jax_cpu):
    """The grouping's per-event state lives in arrays (no dict entry, list or Python int
    per event) and the decode's scratch is dropped: at most 14x the file at the peak
    (tracemalloc, numpy's buffers included). Before: 22x here, and 8.5 GB (27x) on the
    308 MB profile."""
    size = jax_cpu.stat().st_size
    tracemalloc.start()
    try:
        with open(jax_cpu, "rb") as f:
            ev = xse.read_step_events(f, str(jax_cpu))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(ev.steps) == 300
    assert peak <= 14 * size, f"peak {peak / 2**20:.1f} MiB = {peak / size:.1f}x the file"


def test_native_walks_reject_bad_arrays():
    nat = xw._native
    ts = np.zeros(3, np.int64)
    with pytest.raises(TypeError):
        nat.nest_sequence(np.arange(3), ts.astype(np.int32), ts, np.zeros(3, bool), ts.copy(), ts.copy())
    with pytest.raises(ValueError):
        nat.nest_sequence(np.array([5], np.int64), ts, ts, np.zeros(3, bool), ts.copy(), ts.copy())
    group = np.full(3, -1, np.int64)
    first = np.zeros(4, np.int64)
    with pytest.raises(ValueError):
        nat.group_from(7, 0, group, first, np.zeros(0, np.int64), first, np.zeros(0, np.int64))
    bad_first = np.array([0, 5, 5, 5], np.int64)  # offsets past the edges
    with pytest.raises(ValueError):
        nat.group_from(0, 0, group, bad_first, np.zeros(1, np.int64), first, np.zeros(0, np.int64))
