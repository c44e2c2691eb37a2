"""The memory viewer's heap simulation in C (tools/_heap_sim.c) against its Python twin
(``memory_viewer._simulate_py``, PROFSCOPE_NATIVE=0): the same payload, summary and
replay state on every module of the XProf goldens (the demo's profiles, the synthetic
corner cases, the refused traces) and of the real GPU/TPU/ROCm profiles in
``shared/fixtures/public_profiles``, and on a big synthetic module with SHARE_WITH chains
and reused buffers. Where the twin accepts a trace the C pass must not decline it (else
this file would compare the twin with itself); where the twin refuses one, the C pass
declines and the error is the twin's, word for word."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from profscope.errors import ProfscopeError
from profscope.formats import xplane
from profscope.tools import memory_viewer as mv
from tests.test_memory_viewer import CASES, _case_id, _input_bytes, parse_hlo

pytestmark = pytest.mark.skipif(mv._heap_sim is None, reason="the native heap simulation is not built")

PUBLIC_INDEX = json.loads((Path(__file__).parent / "golden" / "public_memory" / "index.json").read_text())
PUBLIC = [c for c in PUBLIC_INDEX["cases"] if "module" in c]
REPO = Path(__file__).resolve().parent.parent


def _both(monkeypatch, fn):
    """``fn()`` natively, then by the twin: each a result or the error it raised."""
    out = []
    for native in ("1", "0"):
        monkeypatch.setenv("PROFSCOPE_NATIVE", native)
        try:
            out.append(("ok", fn()))
        except ProfscopeError as e:
            out.append((type(e).__name__, e.message))
    return out


def _sim_state(sim: mv._Sim) -> dict:
    return {
        "trace_id": sim.trace_id, "events": sim.events,
        "heap": [int(x) for x in sim.heap], "unpadded": [int(x) for x in sim.unpadded],
        "names": list(sim.names), "kinds": bytes(sim.kinds), "buffers": [int(x) for x in sim.buffers],
        "peak": (sim.peak, sim.peak_unpadded, sim.peak_pos),
        "peak_list": sim.peak_list, "peak_display": sim.peak_display, "live_at_end": sim.live_at_end,
        "seen": [(lb.id, lb.span_start, lb.span_end) for lb in sim.seen],
    }


def _check_module(monkeypatch, hlo, space):
    full = _both(monkeypatch, lambda: mv.from_hlo(hlo, space, strict=False))
    assert full[0] == full[1]
    summary = _both(monkeypatch, lambda: mv.summary(hlo, space))
    assert summary[0] == summary[1]
    if full[1][0] == "ok":
        native = mv._simulate_native(mv._Module(hlo), space, True)
        assert native is not None, "the C pass declined a trace the twin accepts"
        twin = mv._simulate_py(mv._Module(hlo), space)
        assert _sim_state(native) == _sim_state(twin)
    return full[0]


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_goldens_native_equals_twin(case, monkeypatch):
    kind, payload = _check_module(monkeypatch, parse_hlo(_input_bytes(case)), case["space"])
    # The refused traces (a double free, two allocations) are refused by both with one text.
    assert (kind == "ok") == ("error" not in case), payload if kind != "ok" else case


def _public_hlo(shared_fixtures, case):
    path = str(shared_fixtures / case["input"])
    with open(path, "rb") as f:
        return parse_hlo(xplane.hlo_proto_bytes(f, path, case["module"]))


@pytest.mark.parametrize("case", PUBLIC, ids=lambda c: f"{c['case']}/{c['module']}/{c['space']}")
def test_public_profiles_native_equals_twin(case, shared_fixtures, monkeypatch):
    kind, _ = _check_module(monkeypatch, _public_hlo(shared_fixtures, case), case["space"])
    assert kind == "ok"


def _synthetic(buffers: int, events: int, seed: int):
    spec = importlib.util.spec_from_file_location("bench_memory_viewer", REPO / "benchmarks" / "bench_memory_viewer.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return parse_hlo(bench.build_synthetic(buffers, events, seed=seed))


@pytest.mark.parametrize("seed", [1, 2])
def test_big_synthetic_native_equals_twin(seed, monkeypatch):
    """bench_memory_viewer.py's synthetic module (the compare_peers row's, smaller):
    SHARE_WITH after FREE, reused buffers, tuples; every event kind many times."""
    hlo = _synthetic(3000, 40_000, seed)
    kinds = np.bincount([ev.kind for ev in hlo.buffer_assignment.heap_simulator_traces[0].events], minlength=3)
    assert (kinds > 100).all(), kinds
    kind, _ = _check_module(monkeypatch, hlo, 0)
    assert kind == "ok"


def test_declined_traces_answer_the_twins_error(monkeypatch):
    """A trace the replay rejects, made from a real one: a FREE repeated (freed twice), an
    unknown event kind, a SHARE_WITH cycle. The C pass declines each, and the twin's
    error is what the caller sees, in both modes."""
    hlo = _synthetic(300, 3000, 1)
    trace = hlo.buffer_assignment.heap_simulator_traces[0]
    events = list(trace.events)
    free = next(i for i, ev in enumerate(events) if ev.kind == mv._FREE)

    def variant(edit):
        h = type(hlo)()
        h.CopyFrom(hlo)
        edit(h.buffer_assignment.heap_simulator_traces[0].events)
        return h

    def twice(evs):
        evs.add().CopyFrom(evs[free])

    def unknown(evs):
        evs[free].kind = 7

    def cycle(evs):
        a, b = evs.add(), evs.add()
        a.kind = b.kind = mv._SHARE_WITH
        a.buffer_id, a.share_with_canonical_id = evs[0].buffer_id, evs[1].buffer_id
        b.buffer_id, b.share_with_canonical_id = evs[1].buffer_id, evs[0].buffer_id

    for edit, words in ((twice, "freed multiple times"), (unknown, "Unhandled event kind: 7"),
                        (cycle, "form a cycle")):
        h = variant(edit)
        assert mv._simulate_native(mv._Module(h), 0, True) is None
        results = _both(monkeypatch, lambda: mv.from_hlo(h, 0))
        assert results[0] == results[1]
        assert results[0][0] == "BadInput" and words in results[0][1], results[0]


def test_mangled_wire_bytes_are_declined_or_read(monkeypatch):
    """The C pass reads bytes it is given (upb's serialization of a parsed trace, but it
    checks every length): a real trace cut short or with bytes flipped is declined (None)
    or read like any trace, never read out of bounds (a crash would end the run)."""
    import random

    from profscope.tools import _heap_sim

    hlo = _synthetic(200, 2000, 3)
    m = mv._Module(hlo)
    ids = np.array(sorted(m.lbs), dtype=np.int64)
    size = np.array([m.lbs[i].size for i in ids.tolist()], dtype=np.int64)
    unpadded = np.array([m.lbs[i].unpadded for i in ids.tolist()], dtype=np.int64)
    wire = hlo.buffer_assignment.heap_simulator_traces[0].SerializeToString()
    rnd = random.Random(5)
    outcomes = set()
    for trial in range(300):
        data = bytearray(wire[: rnd.randrange(len(wire))] if trial % 2 else wire)
        for _ in range(rnd.randrange(1, 6)):
            if data:
                data[rnd.randrange(len(data))] = rnd.randrange(256)
        out = [np.empty(len(ids), dtype=dt) for dt in (np.int64, np.int64, np.uint8)]
        got = _heap_sim.simulate(bytes(data), ids, size, unpadded, *out, True)
        outcomes.add(got is None)
    assert outcomes == {True, False}  # both kinds of outcome were reached
