"""The Summary's compiler checks (tools/analysis_hlo.py, app/compiler_checks.py) on real
optimized HLO: small JAX programs compiled by XLA here (profscope.testing.hlo_programs,
each planting one problem or none), read from an XLA dump and from a profile, and the
real modules of the shared public profiles and the demo, which have none of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profscope.app.compiler_checks import hlo_findings_for, op_share_of
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.errors import ProfscopeError
from profscope.formats import hlo_proto
from profscope.storage import LogDir
from profscope.testing import hlo_programs
from profscope.tools import analysis_hlo
from profscope.tools.analysis_hlo import hlo_findings

MIB = 1 << 20


def link(tool, **keys):
    return "?" + "&".join([f"tool={tool}"] + [f"{k}={v}" for k, v in keys.items()])


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return hlo_programs.make(tmp_path_factory.mktemp("hlo_programs"), profile=True)


def _dump_modules(built: Path) -> dict[str, tuple[str, object]]:
    """program -> (display name, HloProto), from the dump's file names (module_<id>.jit_<program>.)."""
    out = {}
    for f in sorted((built / "dump").glob("*.hlo.pb")):
        head, module = f.name.split(".")[:2]  # module_0020, jit_transpose_sort
        out[module.removeprefix("jit_")] = (f"{module}({int(head.split('_')[1])})", hlo_proto.parse(f.read_bytes(), str(f)))
    return out


def _workspace(root: Path, tmp_path) -> Workspace:
    return Workspace(LogDir(str(root), listing_ttl=0), DiskCache(tmp_path / "cache"))


def test_each_program_gets_its_rule_and_no_other(built):
    modules = _dump_modules(built)
    assert sorted(modules) == sorted(hlo_programs.PROGRAMS)
    for program, expected in hlo_programs.EXPECTED.items():
        found = hlo_findings([modules[program]], link)
        assert [f["id"] for f in found] == ([expected] if expected else []), program
        for f in found:
            assert set(f) == {"id", "priority", "area", "title", "what", "evidence", "impact", "fix", "host"}
            assert f["area"] == "compiler" and f["priority"] == "P2" and f["id"] in {r.id for r in analysis_hlo.RULES}
            json.dumps(f, allow_nan=False)


def test_layout_copy_names_the_copy_layouts_and_bytes(built):
    """transpose_sort: XLA transposes the 2048x2048 f32 array by a copy from layout {0,1}
    to {1,0} in transpose_copy_fusion; the copy reads and writes 16 MiB each."""
    (f,) = hlo_findings([_dump_modules(built)["transpose_sort"]], link)
    assert f["impact"]["bytes"] == 2 * 2048 * 2048 * 4
    assert "f32[2048,2048]{0,1}" in f["what"] and "f32[2048,2048]{1,0}" in f["what"] and "sort" in f["what"]
    # Sandwiched, as XProf requires: the entry parameter makes it (through the fusion's
    # parameter and the transpose: 3 hops), the sort reads it.
    rows = {e["label"]: e["value"] for e in f["evidence"]}
    assert rows["producer"] == "parameter x.1" and rows["consumer"] == "sort sort.0" and "3 hop(s) upstream" in f["what"]
    name = _dump_modules(built)["transpose_sort"][0]
    assert f["evidence"][0]["link"] == link("memory_viewer", module_name=name, hlo_op="transpose_copy_fusion")


def test_unfused_reshape_transpose_is_one_finding(built):
    """reshape_transpose_dot: (256, 64, 512) -> (256, 64, 8, 64) -> transpose -> (2048, 4096)
    before a dot: one standalone kernel materialises it (32 MiB in, 32 MiB out); its copy
    is not reported again as a layout mismatch."""
    (f,) = hlo_findings([_dump_modules(built)["reshape_transpose_dot"]], link)
    assert f["id"] == "unfused_reshape" and f["impact"]["bytes"] == 2 * 256 * 64 * 512 * 4
    assert "reshape" in f["title"] and "transpose" in f["title"] and "f32[2048,4096]" in f["what"]


def test_convert_reduce_names_the_upcast(built):
    """bf16_sum: jnp.sum of a 4096x2048 bf16 array reduces an f32 copy (32 MiB, 16 MiB
    more than the bf16 original) and converts the sums back to bf16."""
    (f,) = hlo_findings([_dump_modules(built)["bf16_sum"]], link)
    assert f["impact"]["bytes"] == 4096 * 2048 * 2
    assert "bf16[4096,2048]" in f["what"] and "f32[4096,2048]" in f["what"] and "inference" in f["what"]


def test_convert_reduce_across_fusions(built):
    """bf16_sum_astype: the back-convert is a fusion of its own after the reduce's fusion;
    the trace leaves the reduce's fusion at its root and enters wrapped_convert at its
    parameter (XProf's trace_downcast)."""
    modules = _dump_modules(built)
    fusions = [i.name for c in modules["bf16_sum_astype"][1].hlo_module.computations for i in c.instructions
               if i.opcode == "fusion"]
    assert len(fusions) == 2  # the reduce's and the back-convert's
    (f,) = hlo_findings([modules["bf16_sum_astype"]], link)
    assert f["id"] == "convert_in_reduction" and f["impact"]["bytes"] == 2048 * 4096 * 2


def test_below_the_bytes_floor_nothing(built, monkeypatch):
    """The floor is XProf's detect_unfused_reshapes MIN_BYTES_ACCESSED: with it above the
    planted copy's 32 MiB, the copy is not worth a finding."""
    module = _dump_modules(built)["transpose_sort"]
    monkeypatch.setattr(analysis_hlo, "MIN_BYTES_ACCESSED", 32 * MIB + 1)
    assert hlo_findings([module], link) == []
    monkeypatch.setattr(analysis_hlo, "MIN_BYTES_ACCESSED", 32 * MIB)
    assert len(hlo_findings([module], link)) == 1


def test_priority_by_share_of_step_time(built):
    """Where the op's time is known, its share of the step sets the priority (P0 >= 25 %,
    P1 >= 10 %, P2 >= 2 %; below, no finding)."""
    module = _dump_modules(built)["transpose_sort"]
    for share, expected in ((0.30, ["P0"]), (0.12, ["P1"]), (0.05, ["P2"]), (0.01, [])):
        found = hlo_findings([module], link, lambda m, i, s=share: s if i == "transpose_copy_fusion" else None)
        assert [f["priority"] for f in found] == expected, share
        assert all(e["number"] == share for f in found for e in f["evidence"] if e["label"] == "share of step time")


def test_dump_and_profile_runs_agree(built, tmp_path):
    """The app reads the same modules from the dump's files and from the profile's
    metadata plane (the memory viewer's two sources) and finds the same."""
    ws = _workspace(built, tmp_path)
    runs = {r.name.split("/")[0]: r for r in ws.runs()}
    dump, profile = runs["dump"], runs["profile"]
    a, b = hlo_findings_for(ws, dump, None, link), hlo_findings_for(ws, profile, None, link)
    assert sorted(f["id"] for f in a) == sorted(e for e in hlo_programs.EXPECTED.values() if e)
    assert [(f["id"], f["title"], f["impact"]) for f in a] == [(f["id"], f["title"], f["impact"]) for f in b]
    # The links open modules the memory viewer has.
    names = set(ws.modules(profile))
    assert all(f["evidence"][0]["link"].split("module_name=")[1].split("&")[0] in names for f in b)
    assert hlo_findings_for(ws, profile, profile.hosts[0], link) == b


def test_unreadable_module_is_refused_not_fatal(built, tmp_path):
    root = tmp_path / "logs"
    (root / "dump").mkdir(parents=True)
    for f in (built / "dump").glob("*.hlo.pb"):
        (root / "dump" / f.name).write_bytes(f.read_bytes())
    bad = next((root / "dump").glob("*jit_bf16_max*"))
    bad.write_bytes(bad.read_bytes()[:100])  # truncated: not an HloProto any more
    ws = _workspace(root, tmp_path)
    (run,) = ws.runs()
    refused: list = []
    found = hlo_findings_for(ws, run, None, link, refused)
    assert len(found) == len([e for e in hlo_programs.EXPECTED.values() if e])  # bf16_max has none
    assert len(refused) == 1 and bad.name in refused[0]["file"] and "HloProto" in refused[0]["reason"]
    # Without a list to name it in, the caller gets the error (it lists the part as refused).
    with pytest.raises(ProfscopeError, match="HloProto"):
        hlo_findings_for(ws, run, None, link)


def test_real_modules_have_no_finding(shared_fixtures, demo_logdir, tmp_path):
    """The public profiles' modules (TPU inference, MI300 GEMM and 3-D conv, TF GPU) and
    the demo's (MLP, convnet, transformer train steps and dumps) hold no layout copy,
    unfused formatting kernel or bf16 reduction in f32 over the bytes floor."""
    checked = 0
    for root in (shared_fixtures / "public_profiles", demo_logdir):
        ws = _workspace(root, tmp_path / root.name)
        for run in ws.runs():
            if run.kind.name not in ("PROFILE", "XLA_DUMP") or "corrupt" in run.name:
                continue
            refused: list = []
            assert hlo_findings_for(ws, run, None, link, refused) == [], run.name
            assert refused == []
            checked += len(ws.modules(run))
    assert checked > 50  # distinct modules: 62 here


def test_op_share_is_hlo_stats_self_time(make_client, shared_fixtures, tmp_path):
    """Where the profile has device op metrics (the MI300 GEMM profile), an instruction's
    share is XProf's hlo_stats "Total self time (%)" of its row, by program id and name."""
    root = shared_fixtures / "public_profiles"
    ws = _workspace(root, tmp_path)
    run = next(r for r in ws.runs() if r.name.startswith("xplane/mi300_jax08_gemm/"))
    share = op_share_of(ws, run, None)
    table = make_client(root).get("/data/plugin/profile/data",
                                  params={"run": run.name, "tag": "hlo_stats", "host": run.hosts[0]}).json()
    cols = [c["id"] for c in table["cols"]]
    rows = [dict(zip(cols, [c.get("v") if c else None for c in r["c"]])) for r in table["rows"]]
    modules = {m.rsplit("(", 1)[1].rstrip(")"): m for m in ws.modules(run)}
    assert len(rows) > 5
    for row in rows:
        assert share(modules[str(row["program_id"])], row["hlo_op_name"]) == pytest.approx(row["total_self_time_percent"] / 100)
    assert share(modules[str(rows[0]["program_id"])], "no-such-instruction") is None
    # A run that is not a profile has no op times: the priority stays by bytes.
    assert op_share_of(ws, next(r for r in ws.runs() if r.kind.name == "CHROME_TRACE"), None) is None


def test_a_fusion_calling_its_own_computation_ends(built):
    """A corrupt proto whose fused computation holds a fusion calling that same computation
    (each program's entry fusion's root made one) is checked to the end, not followed
    forever (RecursionError before)."""
    from profscope.model.protos import hlo_pb2

    for program, (name, proto) in _dump_modules(built).items():
        bad = hlo_pb2.HloProto()
        bad.CopyFrom(proto)
        m = bad.hlo_module
        entry = next(c for c in m.computations if c.id == m.entry_computation_id)
        fusions = [i for i in entry.instructions if i.opcode == "fusion"]
        for f in fusions:
            called = next(c for c in m.computations if c.id == f.called_computation_ids[0])
            root = next(i for i in called.instructions if i.id == called.root_id)
            root.opcode = "fusion"
            root.called_computation_ids.append(called.id)
        found = hlo_findings([(name, bad)], link)
        assert fusions and all(f["area"] == "compiler" for f in found), program
