"""From a buffer to its HLO text, its trace slices and its source (issue 37 item 1):
tools/hlo_text.py against XLA's own text dump, the /api/hlo, /api/hlo/instruction and
/api/source routes on a real JAX program profiled here (profscope.testing.link_program), and
the source roots' fences (``..``, absolute paths elsewhere, symlinks leading out)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.formats import hlo_proto
from profscope.server import create_app
from profscope.storage import LogDir
from profscope.storage.source_files import SourceRoots
from profscope.testing import link_program
from profscope.tools import hlo_text


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    return link_program.make(tmp_path_factory.mktemp("hlo_links"))


@pytest.fixture(scope="module")
def client(made, tmp_path_factory) -> TestClient:
    ws = Workspace(LogDir(str(made / "logdir"), listing_ttl=0), DiskCache(tmp_path_factory.mktemp("cache")))
    return TestClient(create_app(ws))


def _run_and_module(client) -> tuple[str, str]:
    runs = client.get("/api/runs").json()["runs"]
    run = next(r["name"] for r in runs if r["kind"] == "profile")
    modules = client.get("/api/run", params={"run": run}).json()["modules"]
    return run, next(m for m in modules if m.startswith(link_program.MODULE + "("))


_HEAD = re.compile(r"^(?:ROOT )?(%\S+) = ")


def _prefix(line: str) -> str:
    """``[ROOT ]%name = shape opcode(operands)``: the line up to the parenthesis that closes
    the operand list (shapes hold no parentheses but tuples', which come before the opcode)."""
    m = _HEAD.match(line)
    i = m.end()
    depth = 0
    while i < len(line):  # past the shape (a tuple shape nests parentheses)
        if line[i] == "(":
            depth += 1
        elif line[i] == ")":
            depth -= 1
        elif line[i] == " " and depth == 0:
            break
        i += 1
    depth = 0
    for j in range(line.index("(", i), len(line)):
        depth += {"(": 1, ")": -1}.get(line[j], 0)
        if depth == 0:
            return line[:j + 1]
    return line


def test_every_instruction_line_starts_as_xla_prints_it(made, demo_logdir):
    """Each instruction of every module XLA dumped (the program and jax's helper jits made
    here, and the demo's MLP train step: gathers, scatters, reduce-windows, 0.9 and 0.001
    constants, names quoted with '), after and before optimizations: our line's
    ``name = shape opcode(operands)`` is XLA's own text dump's (--xla_dump_hlo_as_text),
    and the computations' headers too."""
    pbs = sorted((made / "dump").glob("*.hlo.pb")) + sorted((demo_logdir / "dumps" / "mlp").glob("*.hlo.pb"))
    pairs = [(pb, pb.with_name(pb.name.replace(".hlo.pb", ".txt"))) for pb in pbs]
    pairs = [(pb, txt) for pb, txt in pairs if txt.exists()]
    assert len(pairs) >= 4
    checked = whole = 0
    for pb, txt in pairs:
        ours = hlo_text.module_text(hlo_proto.parse(pb.read_bytes(), str(pb)).hlo_module)
        by_name = {_HEAD.match(s.strip()).group(1): s.strip() for s in ours["lines"] if _HEAD.match(s.strip())}
        theirs = [s.strip() for s in txt.read_text().splitlines() if _HEAD.match(s.strip())]
        assert len(theirs) == len(by_name), pb.name
        for line in theirs:
            mine = by_name[_HEAD.match(line).group(1)]
            assert _prefix(mine) == _prefix(line), (pb.name, mine, line)
            checked += 1
            whole += mine == line
        headers = [s for s in txt.read_text().splitlines() if s.startswith(("%", "ENTRY %")) and s.endswith("{")]
        # the same computations, named and typed alike (XLA orders them by a walk from the root)
        assert sorted(s for s in ours["lines"] if s.startswith(("%", "ENTRY %"))) == sorted(headers), pb.name
    assert checked > 1000
    assert whole / checked > 0.99  # the attributes after: all but compare's type=, windows, gather/scatter dims


def test_hlo_view_route(client):
    run, module = _run_and_module(client)
    d = client.get("/api/hlo", params={"run": run, "module_name": module, "instr": "wrapped_tanh"}).json()
    ins = d["instruction"]
    assert d["lines"][ins["line"]].strip() == ins["text"]
    assert ins["text"].startswith("%wrapped_tanh = f32[256,1024]{1,0} fusion(")
    assert d["missing"] is None
    assert any(c["entry"] for c in d["computations"])
    miss = client.get("/api/hlo", params={"run": run, "module_name": module, "instr": "no_such_op"}).json()
    assert miss["instruction"] is None and miss["missing"] == "no_such_op"
    bad = client.get("/api/hlo", params={"run": run, "module_name": "nope(1)"})
    assert bad.status_code == 404 and "nope(1)" in bad.json()["error"]


def test_instruction_panel_links_reopen_the_slice(client):
    """The defining op's and its last use's slices: each link's ``ev`` is an event of the
    trace viewer's own ids, named by the op, inside the link's window."""
    run, module = _run_and_module(client)
    d = client.get("/api/hlo/instruction", params={"run": run, "module_name": module, "instr": "wrapped_tanh",
                                                   "hops": 2}).json()
    hood = d["neighborhood"]["nodes"]
    assert hood[0]["name"] == "wrapped_tanh" and hood[0]["direction"] == "self"
    assert {n["direction"] for n in hood[1:]} == {"operand", "user"}
    assert d["lastUse"] == "sort.0"
    # the fusion's fused computation, opened at its root
    text = client.get("/api/hlo", params={"run": run, "module_name": module}).json()
    comps = {c["name"]: c for c in text["computations"]}
    assert [c["computation"] for c in d["calls"]] == ["wrapped_tanh_computation"]
    for c in d["calls"]:
        root = client.get("/api/hlo", params={"run": run, "module_name": module, "instr": c["root"]}).json()["instruction"]
        assert comps[c["computation"]]["line"] < root["line"] < comps[c["computation"]]["endLine"]
        assert root["text"].startswith(f"ROOT %{c['root']} = ") and root["computation"] == c["computation"]
    for op, key in (("wrapped_tanh", "defining"), ("sort.0", "lastUse")):
        found = d["trace"][key]
        assert found["count"] >= 3  # the step ran three times in the trace
        for s in found["slices"]:
            link = s["link"]
            ev = client.get("/api/trace/event", params={"run": run, "host": link["host"], "id": link["ev"]}).json()
            assert ev["name"] == op
            assert link["start_ms"] <= ev["start"] <= ev["start"] + ev["dur"] <= link["end_ms"]
            assert ev["args"]["hlo_module"] + f"({ev['args']['program_id']})" == module
    # the source: the program's file under the log directory, its line the tanh's
    src = d["source"]
    assert src["path"] == "src/mlp.py"
    lines = client.get("/api/source", params={"run": run, "file": src["file"], "line": src["line"]}).json()
    assert lines["path"] == "src/mlp.py"
    assert "jnp.tanh(x @ w1)" in lines["lines"][lines["line"] - lines["first_line"]]


def test_parameter_has_no_trace_slices(client):
    """A parameter runs no kernel: no slice, so no trace link (never a dead one)."""
    run, module = _run_and_module(client)
    d = client.get("/api/hlo/instruction", params={"run": run, "module_name": module, "instr": "x.1"}).json()
    assert d["trace"]["defining"] == {"count": 0, "slices": [], "countIsLowerBound": False}
    missing = client.get("/api/hlo/instruction", params={"run": run, "module_name": module, "instr": "nope"})
    assert missing.status_code == 404


def test_source_roots_never_read_outside(tmp_path):
    root = tmp_path / "root"
    (root / "proj").mkdir(parents=True)
    (root / "proj" / "model.py").write_text("a = 1\nb = 2\nc = 3\n")
    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 'x'\n")
    (root / "proj" / "leak.py").symlink_to(secret)
    (root / "out").symlink_to(tmp_path)  # a folder symlink leading out of the root
    roots = SourceRoots([root])
    # found by its longest suffix under the root, from an absolute path of another machine
    got = roots.read("/home/user/proj/model.py", 2, 1)
    assert (got["path"], got["first_line"], got["lines"]) == ("proj/model.py", 1, ["a = 1", "b = 2", "c = 3"])
    for name in ("../secret.py", "proj/../../secret.py", "..\\secret.py"):
        with pytest.raises(Exception) as e:
            roots.read(name, 1)
        assert e.value.status == 400, name
    for name in (str(secret), "proj/leak.py", "out/secret.py", "/etc/passwd"):
        with pytest.raises(Exception) as e:
            roots.read(name, 1)
        assert e.value.status == 404, name
    (root / "bin.py").write_bytes(b"\x00\x01binary")
    with pytest.raises(Exception) as e:
        roots.read("bin.py", 1)
    assert e.value.status == 422


def test_source_route_errors_are_json(client, made):
    run, _ = _run_and_module(client)
    for params, status in (({"file": "../../etc/passwd"}, 400), ({"file": "/etc/passwd"}, 404), ({}, 400),
                           ({"file": str(made / "dump" / "nothing.py")}, 404)):
        r = client.get("/api/source", params={"run": run, **params})
        assert r.status_code == status, params
        assert r.json()["error"]


PUBLIC = ("tpu_inference", "mi300_jax08_gemm", "mi300_jax_conv_xprof_touched", "tf_gpu")


def _bars(logdir: Path, cache: Path) -> list[dict]:
    ws = Workspace(LogDir(str(logdir)), DiskCache(cache))
    return [link_program.coverage(ws, run, module) for run in ws.runs() if run.kind.value == "profile"
            for module in ws.modules(run)]


def test_every_peak_buffer_resolves_to_hlo_and_its_slices(shared_fixtures, made, tmp_path):
    """Issue 37's bar, per fixture: every buffer at a module's peak that has a defining
    instruction resolves to its line of HLO text, and every one whose op the trace has
    slices of links to at least one slice of this module's runs (benchmarks/bench_hlo_links.py
    prints the same counts)."""
    seen = {}
    for name in PUBLIC:
        seen[name] = _bars(shared_fixtures / "public_profiles" / "xplane" / name, tmp_path / name)
    seen["link_program"] = _bars(made / "logdir", tmp_path / "made")
    for name, rows in seen.items():
        for r in rows:
            assert r["hloText"] == r["withInstruction"], (name, r)
            assert r["traceSlices"] == r["opEvents"], (name, r)
    # the counts are not empty where the profile has compiled modules that ran while traced
    for name in ("tpu_inference", "mi300_jax08_gemm", "mi300_jax_conv_xprof_touched", "link_program"):
        assert sum(r["opEvents"] for r in seen[name]) > 0, name
        assert sum(r["withInstruction"] for r in seen[name]) > 0, name
    assert seen["tf_gpu"] == []  # TensorFlow without XLA: no compiled module, no buffer to link


def test_a_dump_has_hlo_but_no_trace_link(demo_client):
    """An XLA dump run has the HLO text and neighbourhood, and no trace: ``trace`` is None,
    so the panel draws no trace link."""
    modules = demo_client.get("/api/run", params={"run": "dumps/mlp"}).json()["modules"]
    text = demo_client.get("/api/hlo", params={"run": "dumps/mlp", "module_name": modules[0]}).json()
    entry = next(c for c in text["computations"] if c["entry"])
    root = next(line for line in text["lines"][entry["line"]:entry["endLine"]] if line.strip().startswith("ROOT "))
    name = root.split("%", 1)[1].split(" ", 1)[0]
    d = demo_client.get("/api/hlo/instruction", params={"run": "dumps/mlp", "module_name": modules[0], "instr": name}).json()
    assert d["instruction"]["name"] == name and d["trace"] is None


def test_an_op_name_of_two_modules_links_to_its_own_module_runs(shared_fixtures, tmp_path):
    """The MI300 GEMM profile runs jit_dot six times as six modules, each with a
    ``custom-call.1``: each module's panel links to slices of its own program only (the
    GPU's ``XLA Ops - from #16`` slices inside that module's ``XLA Modules`` run)."""
    client = TestClient(create_app(Workspace(LogDir(str(shared_fixtures / "public_profiles" / "xplane" / "mi300_jax08_gemm")),
                                             DiskCache(tmp_path))))
    run = client.get("/api/runs").json()["runs"][0]["name"]
    modules = [m for m in client.get("/api/run", params={"run": run}).json()["modules"] if m.startswith("jit_dot(")]
    assert len(modules) >= 2
    seen, linked = set(), 0
    for module in modules:
        r = client.get("/api/hlo/instruction", params={"run": run, "module_name": module, "instr": "custom-call.1"})
        if r.status_code == 404:  # jit_dot(5), another shape, has no custom-call.1
            continue
        d = r.json()
        linked += 1
        slices = d["trace"]["defining"]["slices"]
        assert slices, module
        for s in slices:
            ev = client.get("/api/trace/event", params={"run": run, "host": s["link"]["host"], "id": s["link"]["ev"]}).json()
            assert ev["name"] == "custom-call.1" and ev["track"]["name"].startswith("XLA Ops")
            assert f"{ev['args']['hlo_module']}({ev['args']['program_id']})" == module
            seen.add(s["link"]["ev"])
    assert linked >= 2 and len(seen) >= linked


def test_source_root_from_the_command_line(made, tmp_path, monkeypatch):
    """``serve --source-root DIR`` (and $PROFSCOPE_SOURCE_ROOTS): a checkout elsewhere is
    read by the longest suffix of the name the profile recorded; get_source (MCP) reads
    the same lines as /api/source."""
    from profscope import cli
    from profscope.app import agent_tools

    checkout = tmp_path / "checkout" / "src"
    checkout.mkdir(parents=True)
    (checkout / "mlp.py").write_text(link_program.PROGRAM.replace("jnp.tanh(x @ w1)", "jnp.tanh(x @ w1)  # checkout"))
    args = cli.build_parser().parse_args(["serve", str(made / "logdir"), "--cache-dir", str(tmp_path / "cache"),
                                          "--source-root", str(tmp_path / "checkout"), "--no-capture"])
    monkeypatch.setenv("PROFSCOPE_SOURCE_ROOTS", str(tmp_path / "nothing-here"))
    ws = cli._workspace(args)
    assert [str(r) for r in ws.source_roots().roots] == [str(tmp_path / "checkout"), str(tmp_path / "nothing-here"),
                                                         str(made / "logdir")]
    run = next(r for r in ws.runs() if r.kind.value == "profile")
    module = next(m for m in ws.modules(run) if m.startswith(link_program.MODULE + "("))
    panel = ws.hlo_instruction(run, module, None, "wrapped_tanh")
    assert panel["source"]["path"] == "src/mlp.py"
    got = agent_tools.get_source(ws, run.name, panel["source"]["file"], panel["source"]["line"], 0)
    assert got["root"] == str(tmp_path / "checkout") and got["lines"] == ["    h = jnp.tanh(x @ w1)  # checkout"]


def test_a_cpu_op_count_past_the_arg_checks_is_a_lower_bound(tmp_path):
    """On a CPU profile an op's module is read from each slice's args, for the first
    MAX_ARG_CHECKS slices only: with 300 runs of the step the count says "at least"."""
    from profscope.tools import op_slices

    made = link_program.make(tmp_path / "many", steps=300)
    client = TestClient(create_app(Workspace(LogDir(str(made / "logdir")), DiskCache(tmp_path / "cache"))))
    run, module = _run_and_module(client)
    d = client.get("/api/hlo/instruction", params={"run": run, "module_name": module, "instr": "wrapped_tanh"}).json()
    found = d["trace"]["defining"]
    assert found["countIsLowerBound"] and found["count"] == op_slices.MAX_ARG_CHECKS
    small = client.get("/api/hlo/instruction", params={"run": run, "module_name": module, "instr": "x.1"}).json()
    assert small["trace"]["defining"]["countIsLowerBound"] is False
