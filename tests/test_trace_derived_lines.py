"""XProf's derived device lines in the trace viewer, against XProf 2.24.2.

``tests/golden/trace_viewer/derived_*.json.gz`` (``scripts/record_xprof_derived_golden.py``)
hold, for every real accelerator profile and the scenarios of
``src/profscope/testing/derived_xplane.py``, XProf's thread names and event counts of the device
processes and every event of the lines it derives (XLA Modules / XLA Ops / Framework Ops
/ Framework Name Scope / Source code per GPU stream, TPU framework ops and host offload
rows). Ours must be the same to the picosecond, and a kernel must lead to its XLA op and
module in the details.
"""

from __future__ import annotations

import gzip
import json
import time
from collections import Counter
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden" / "trace_viewer"
INDEX = json.loads((GOLDEN / "derived_index.json").read_text())
CASES = sorted(k for k in INDEX if not k.startswith("_"))
PUBLIC = [k for k in CASES if "path" in INDEX[k]]
BUILDERS = [k for k in CASES if "builder" in INDEX[k]]


def _ps(us: float) -> int:
    return round(us * 1e6)


def _app(root, cache):
    from fastapi.testclient import TestClient

    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.server.app import create_app
    from profscope.storage import LogDir

    return TestClient(create_app(Workspace(LogDir(str(root), listing_ttl=0), DiskCache(cache))))


@pytest.fixture(scope="module")
def public_client(shared_fixtures, tmp_path_factory):
    return _app(shared_fixtures / "public_profiles" / "xplane", tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def builder_client(tmp_path_factory):
    from profscope.testing import derived_xplane

    root = tmp_path_factory.mktemp("derived")
    for case in BUILDERS:
        folder = root / case / "plugins" / "profile" / "s"
        folder.mkdir(parents=True)
        (folder / "host0.xplane.pb").write_bytes(getattr(derived_xplane, case)())
    return _app(root, tmp_path_factory.mktemp("cache"))


def _golden(case: str) -> dict:
    return json.loads(gzip.decompress((GOLDEN / INDEX[case]["golden"]).read_bytes()))


def _ours(client, run: str, host: str) -> dict:
    r = client.get("/data/plugin/profile/data", params={"run": run, "host": host, "tag": "trace_viewer@",
                                                        "resolution": 0})
    assert r.status_code == 200, r.text
    return r.json()


def _device(pid: int) -> bool:
    return pid % 1000 < 701


def _compare(golden: dict, ours: dict) -> None:
    events = ours["traceEvents"]
    threads = sorted([e["pid"], e["tid"], e["args"]["name"]] for e in events
                     if e["ph"] == "M" and e["name"] == "thread_name" and _device(e["pid"]))
    assert threads == golden["threads"]
    counts = Counter((e["pid"], e["tid"]) for e in events if e["ph"] == "X" and _device(e["pid"]))
    assert sorted([p, t, n] for (p, t), n in counts.items()) == golden["counts"]
    derived_tids = {(r[1], r[2]) for r in golden["derived"]}
    theirs = Counter((r[0], r[1], r[2], _ps(r[3]), _ps(r[4])) for r in golden["derived"])
    mine = Counter((e["name"], e["pid"], e["tid"], _ps(e["ts"]), _ps(e["dur"])) for e in events
                   if e["ph"] == "X" and (e["pid"], e["tid"]) in derived_tids)
    assert not theirs - mine, f"missing {list(theirs - mine)[:5]}"
    assert not mine - theirs, f"extra {list(mine - theirs)[:5]}"


@pytest.mark.parametrize("case", PUBLIC)
def test_public_profiles_match_xprof(public_client, case):
    e = INDEX[case]
    _compare(_golden(case), _ours(public_client, e["run"], e["host"]))


@pytest.mark.parametrize("case", BUILDERS)
def test_builder_scenarios_match_xprof(builder_client, case):
    _compare(_golden(case), _ours(builder_client, f"{case}/s", "host0"))


def _threads(ours: dict, pid: int) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in ours["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid}


def _per_thread(ours: dict, pid: int) -> Counter:
    names = _threads(ours, pid)
    return Counter(names[e["tid"]] for e in ours["traceEvents"] if e["ph"] == "X" and e["pid"] == pid)


def test_gpu_lines_and_counts(public_client):
    """JAX on ROCm: each stream's derived lines after it, with XProf's names and counts."""
    e = INDEX["mi300_jax08_gemm"]
    ours = _ours(public_client, e["run"], e["host"])
    assert _threads(ours, 1001) == {1: "Stream #16(Kernel)", 2: "Framework Name Scope - from #16",
                                    3: "Framework Ops - from #16", 4: "XLA Modules - from #16",
                                    5: "XLA Ops - from #16", 6: "Source code - from #16", 8: "Stream #17(Kernel)"}
    assert _per_thread(ours, 1001) == {"Stream #16(Kernel)": 42, "Framework Name Scope - from #16": 18,
                                       "Framework Ops - from #16": 30, "XLA Modules - from #16": 30,
                                       "XLA Ops - from #16": 30, "Source code - from #16": 15,
                                       "Stream #17(Kernel)": 12}
    # streams without XLA kernels keep their 7 display ids each (XProf's GPU:0 memcpy streams)
    e = INDEX["mi300_jax_conv_xprof_touched"]
    conv = _ours(public_client, e["run"], e["host"])
    assert _threads(conv, 1001) == {1: "Stream #8(MemcpyOther)", 8: "Stream #9(MemcpyOther)",
                                    15: "Stream #10(MemcpyOther)", 22: "Stream #7(MemcpyOther)"}
    assert _per_thread(conv, 1008)["XLA Ops - from #1"] == 20


def test_kernel_leads_to_its_xla_op_and_module(public_client):
    e = INDEX["mi300_jax08_gemm"]
    run = e["run"]
    w = public_client.get("/api/trace/window", params={"run": run, "resolution": 100000}).json()
    tracks = {t["id"]: t for t in w["tracks"]}
    s = w["slices"]
    rows = [(s["start"][i], s["dur"][i], w["names"][s["name"][i]], tracks[s["track"][i]], s["id"][i])
            for i in range(len(s["id"]))]
    kernel = next(r for r in rows if r[2] == "gemm_fusion_dot_general_1.kd")
    op = next(r for r in rows if r[3]["name"] == "XLA Ops - from #16" and r[0] <= kernel[0] < r[0] + r[1])
    assert op[2] == "gemm_fusion_dot_general.1"
    d = public_client.get("/api/trace/event", params={"run": run, "id": op[4]}).json()
    assert d["hloOp"] == "gemm_fusion_dot_general.1"
    assert d["hloModule"] == "jit_dot"
    assert d["module"] == "jit_dot(5)"
    assert d["args"]["long_name"] == "5/gemm_fusion_dot_general.1"  # XProf's metadata name
    module = next(r for r in rows if r[3]["name"] == "XLA Modules - from #16" and r[0] <= kernel[0] < r[0] + r[1])
    assert module[2] == "jit_dot(5)"
    fw = next(r for r in rows if r[3]["name"] == "Framework Ops - from #16" and r[0] <= kernel[0] < r[0] + r[1])
    assert fw[2] == "dot_general"
    src = next(r for r in rows if r[3]["name"] == "Source code - from #16" and r[0] <= kernel[0] < r[0] + r[1])
    assert src[2] == "generate_gemm_trace.py:37"


def test_tpu_lines(public_client):
    """TPU: framework ops, source and host offload rows derived from the ops' stats, and no
    slices on the Async XLA Ops line (XProf makes them async events, which it leaves out)."""
    e = INDEX["tpu_inference"]
    ours = _ours(public_client, e["run"], e["host"])
    assert _per_thread(ours, 1003) == {"XLA Modules": 105, "XLA Ops": 1504, "XLA TraceMe": 108,
                                       "Framework Name Scope": 208, "Framework Ops": 104, "Source code": 104,
                                       "Host Offload Ops row 0": 164, "Host Offload Ops row 1": 165,
                                       "Host Offload Ops row 2": 164, "Host Offload Ops row 3": 107}
    assert _threads(ours, 1003)[4] == "Async XLA Ops"
    assert _threads(ours, 1003)[0xDEADBEEF + 8] == "Host Offload Ops row 0"


def test_grouped_profile_is_not_derived(public_client):
    """A TF profile that is already grouped (group_id stats): XProf derives nothing, the
    streams keep their line ids as tids and the lines TF wrote are shown as they are."""
    e = INDEX["tf_gpu"]
    ours = _ours(public_client, e["run"], e["host"])
    assert _threads(ours, 1005) == {63: "Stream #63(MemcpyH2D)", 134: "Stream #134(Compute)",
                                    135: "Stream #135(MemcpyH2D)", 136: "Stream #136(MemcpyD2H)",
                                    0xDEADBEEF: "Steps", 0xDEADBEEF + 2: "TensorFlow Name Scope",
                                    0xDEADBEEF + 3: "TensorFlow Ops"}


def test_tpu_steps_named_after_their_groups(builder_client):
    """Steps of a TensorCore plane grouped on the device: named by their step_num, else by
    their group id, which comes after the host's two step groups; the page's step bands too."""
    ours = _ours(builder_client, "tpu_derived/s", "host0")
    steps = sorted((e["ts"], e["name"]) for e in ours["traceEvents"]
                   if e["ph"] == "X" and e["pid"] == 1012 and _threads(ours, 1012)[e["tid"]] == "Steps")
    assert [n for _, n in steps] == ["40", "3", "42"]
    w = builder_client.get("/api/trace/window", params={"run": "tpu_derived/s", "resolution": 1000}).json()
    assert {"40", "3", "42"} <= {s["name"] for s in w["steps"]}


def test_derivation_is_fast_enough(tmp_path):
    """200,000 kernels of one stream: derived in a few seconds (the XLA ops and modules)."""
    from profscope.formats import xplane_trace
    from profscope.testing import derived_xplane

    path = tmp_path / "big.xplane.pb"
    path.write_bytes(derived_xplane.large_gpu(200_000))
    t0 = time.process_time()  # CPU seconds, not wall time (a busy machine must not fail it)
    with path.open("rb") as f:
        ev = xplane_trace.read_trace(f, str(path))
    took = time.process_time() - t0
    names = {t.name for t in ev.tracks}
    assert {"XLA Ops - from #7", "XLA Modules - from #7", "Framework Ops - from #7"} <= names
    ops = next(i for i, t in enumerate(ev.tracks) if t.name == "XLA Ops - from #7")
    assert int((ev.track == ops).sum()) == 200_000
    assert took < 60, took


@pytest.mark.parametrize("seed", range(6))
def test_numpy_lines_equal_the_event_by_event_builder(seed, monkeypatch, tmp_path):
    """The vectorized derivation gives what DerivedXLineBuilder's event-by-event rules
    (xplane_derived._Builder, checked against XProf above) give, on random kernels and ops."""
    from profscope.formats import xplane_derived, xplane_trace
    from profscope.testing import derived_xplane

    for kind in ("random_gpu", "random_tpu"):
        path = tmp_path / f"{kind}.xplane.pb"
        path.write_bytes(getattr(derived_xplane, kind)(seed))
        got = {}
        for vectorized in (True, False):
            monkeypatch.setattr(xplane_derived, "VECTORIZED", vectorized)
            with path.open("rb") as f:
                ev = xplane_trace.read_trace(f, str(path))
            got[vectorized] = Counter((ev.tracks[int(t)].name, ev.names[int(n)], int(s), int(d))
                                      for t, n, s, d in zip(ev.track, ev.name, ev.start_ps, ev.dur_ps))
        assert got[True] == got[False], kind
        assert any("Framework Name Scope" in k[0] for k in got[True])
