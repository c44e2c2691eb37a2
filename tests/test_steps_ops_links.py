"""Steps & ops' links (issue 37 item 4) on the public GPU/TPU/ROCm profiles: each op row's
"slowest occurrence" opens the trace viewer on that very event, and the HLO links are
drawn only for modules the run's memory viewer lists (never a dead link)."""

from __future__ import annotations

import pytest

from profscope.testing.planted import client_for

RUNS = ["xplane/mi300_jax08_gemm/jax08_gemm", "xplane/mi300_jax_conv_xprof_touched/jax_conv_minimal",
        "xplane/tpu_inference/2025_12_10_tpu", "xplane/tf_gpu/GPU-multi-worker"]


@pytest.fixture(scope="module")
def public(shared_fixtures, tmp_path_factory):
    return client_for(shared_fixtures / "public_profiles", tmp_path_factory.mktemp("so_links_cache"))


@pytest.mark.parametrize("run", RUNS)
def test_slowest_occurrence_is_the_event_itself(public, run):
    """The link's ev= is an event of the trace whose name is the op's (kernels and
    framework ops by name, HLO ops by the XLA Ops line's instruction name) and whose start
    and duration are the row's slowest occurrence (the page's window pads it by 50 µs)."""
    so = public.get("/data/plugin/profile/data", params={"run": run, "tag": "steps_ops"}).json()
    rows = [r for r in so["ops"] if r.get("slowest")]
    assert rows, run
    for r in rows[:40]:
        s = r["slowest"]
        ev = public.get("/api/trace/event", params={"run": run, "host": s.get("host") or so["host"], "id": s["event_id"]})
        assert ev.status_code == 200, (r["name"], ev.text)
        ev = ev.json()
        assert ev["name"] == r["name"] or ev.get("hloOp") == r["name"], (r["kind"], r["name"], ev["name"])
        assert abs(ev["start"] * 1e3 - s["start_us"]) < 1e-3 and abs(ev["dur"] * 1e3 - s["dur_us"]) < 1e-3, r["name"]


def test_every_hlo_row_has_its_hlo_text(public):
    """What the page's HLO links rest on (steps_ops.js hloLink): every HLO row of the public
    xplanes names a module of /api/run's list and GET /api/hlo finds the instruction (37
    rows: TPU 17, MI300 GEMM 16, MI300 conv 4; TF GPU has none), so each gets its link;
    a name the module lacks answers ``instruction: null`` (the page then draws no link)."""
    rows = 0
    for run in RUNS:
        modules = set(public.get("/api/run", params={"run": run}).json()["modules"])
        so = public.get("/data/plugin/profile/data", params={"run": run, "tag": "steps_ops"}).json()
        for r in (r for r in so["ops"] if r["kind"] == "hlo"):
            assert r["module"] in modules, (run, r["module"])
            q = {"run": run, "module_name": r["module"], "instr": r["name"], "host": so["host"]}
            assert public.get("/api/hlo", params=q).json()["instruction"]["name"] == r["name"]
            rows += 1
    assert rows >= 30  # 37 at the time of writing
    q["instr"] = "no-such-instruction.1"
    assert public.get("/api/hlo", params=q).json()["instruction"] is None
