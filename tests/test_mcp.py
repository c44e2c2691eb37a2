"""``profscope mcp LOGDIR`` (server/mcp_server.py over app/agent_tools.py), talked to as
an agent would: the MCP SDK's own client starts the command as a subprocess and speaks
MCP over its stdin/stdout (``mcp.client.stdio``). Each tool is called on the real public
profiles (a two-host TF GPU xplane, a TPU xplane with HLO modules, a PyTorch trace, a
PyTorch memory snapshot) and its answer is checked against the workspace's own answer,
computed here in this process from its own cache; bad input (an unknown run, a path, an
unknown host, a corrupt xplane, a git-LFS pointer saved as a snapshot) is the tool's
error result naming the file, and the server goes on answering."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import orjson
import pytest

if not os.environ.get("CI"):  # CI installs the test extra, which has the SDK: a skip there would hide a failure
    pytest.importorskip("mcp")

import anyio  # noqa: E402  (mcp's own dependency)
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from profscope.app import agent_tools, tool_table  # noqa: E402
from profscope.app.queries import MemoryProfileQuery, MemoryViewerQuery, OomRiskQuery, TraceQuery  # noqa: E402
from profscope.app.workspace import Workspace  # noqa: E402
from profscope.cache.store import DiskCache  # noqa: E402
from profscope.storage import LogDir  # noqa: E402

TF_GPU = "xplane/tf_gpu/GPU-multi-worker"
TPU = "xplane/tpu_inference/2025_12_10_tpu"
TRACE = "traces/kineto_resnet50_v100.pt.trace.json.gz"
SNAPSHOT = "snapshots/niu_fwd_bwd_200_mixed.pickle"
LFS_POINTER = "snapshots/kbjiang_memory_256_lfs_pointer.pickle"
CORRUPT = "xplane/tpu_inference_corrupt/2025_12_15_tpu"
TOOLS = {"list_runs", "run_summary", "steps_and_ops", "memory_at_peak", "oom_verdict", "get_hlo_text",
         "get_hlo_neighborhood", "get_source"}
TPU_MODULE = "jit_f(12190760917235803885)"  # the TPU profile's step module
TPU_FUSION = "broadcast_add_fusion.2"  # one of its fusions, which names its source line

# Every call the tests check, made in one session of one server (label: tool, arguments).
CALLS = {
    "runs": ("list_runs", {}),
    "steps_tf": ("steps_and_ops", {"run": TF_GPU, "top": 3}),
    "steps_tf_all": ("steps_and_ops", {"run": TF_GPU, "host": "ALL_HOSTS"}),
    "steps_trace": ("steps_and_ops", {"run": TRACE, "top": 5}),
    "peak_tpu": ("memory_at_peak", {"run": TPU, "top": 1000}),
    "peak_tf": ("memory_at_peak", {"run": TF_GPU, "top": 1000}),
    "peak_snapshot": ("memory_at_peak", {"run": SNAPSHOT, "top": 1000}),
    "oom_tf": ("oom_verdict", {"run": TF_GPU}),
    "oom_tpu": ("oom_verdict", {"run": TPU}),
    "oom_snapshot": ("oom_verdict", {"run": SNAPSHOT, "device_memory": "1GiB"}),
    "bad_run": ("oom_verdict", {"run": "no/such/run"}),
    "bad_path": ("steps_and_ops", {"run": "../../../etc/passwd"}),
    "bad_host": ("steps_and_ops", {"run": TF_GPU, "host": "10.0.0.1_6003"}),
    "bad_top": ("steps_and_ops", {"run": TF_GPU, "top": 0}),
    "corrupt": ("steps_and_ops", {"run": CORRUPT}),
    "lfs_pointer": ("memory_at_peak", {"run": LFS_POINTER}),
    "after_errors": ("list_runs", {"prefix": "traces/"}),
    "hlo_text": ("get_hlo_text", {"run": TPU, "module": TPU_MODULE, "instruction": TPU_FUSION, "lines": 7}),
    "hlo_query": ("get_hlo_text", {"run": TPU, "module": TPU_MODULE, "query": "copy-start("}),
    "hlo_hood": ("get_hlo_neighborhood", {"run": TPU, "module": TPU_MODULE, "instruction": TPU_FUSION, "hops": 2}),
    "hlo_missing": ("get_hlo_neighborhood", {"run": TPU, "module": TPU_MODULE, "instruction": "no_such_op"}),
    "source_outside": ("get_source", {"run": TPU, "file": "../../etc/passwd", "line": 1}),
    "source_missing": ("get_source", {"run": TPU, "file": "experimental/host_offload_stress_test.py", "line": 29}),
}
if tool_table.get(agent_tools.SUMMARY) is not None:  # the Summary tool (issue 35, helper A)
    CALLS["summary_tf"] = ("run_summary", {"run": TF_GPU})
    CALLS["summary_tf_all"] = ("run_summary", {"run": TF_GPU, "host": "ALL_HOSTS"})
    CALLS["summary_corrupt"] = ("run_summary", {"run": CORRUPT})
    CALLS["summary_trace"] = ("run_summary", {"run": TRACE})
    CALLS["summary_snapshot"] = ("run_summary", {"run": SNAPSHOT})


async def _session(logdir, cache) -> dict:
    """Starts ``profscope mcp LOGDIR`` and makes every call of :data:`CALLS`."""
    # this process's environment whole (the SDK passes on only a few variables by
    # default): the server imports the same profscope (PYTHONPATH) as the test
    params = StdioServerParameters(command=sys.executable, env=dict(os.environ),
                                   args=["-m", "profscope", "mcp", str(logdir), "--cache-dir", str(cache)])
    out = {}
    stderr = cache.parent / "mcp-stderr.log"
    with open(stderr, "w") as errlog:
        # a hang backstop, not a speed assert: the cold answers take seconds here
        with anyio.fail_after(240):
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                out["init"] = await session.initialize()
                out["tools"] = (await session.list_tools()).tools
                for label, (name, arguments) in CALLS.items():
                    out[label] = await session.call_tool(name, arguments)
    out["stderr"] = stderr.read_text()
    return out


@pytest.fixture(scope="module")
def public(shared_fixtures):
    return shared_fixtures / "public_profiles"


@pytest.fixture(scope="module")
def answers(public, tmp_path_factory):
    return anyio.run(_session, public, tmp_path_factory.mktemp("mcp") / "cache")


@pytest.fixture(scope="module")
def ws(public, tmp_path_factory):
    """The workspace's own answers, from a cache of its own (not the server's)."""
    return Workspace(LogDir(str(public)), DiskCache(tmp_path_factory.mktemp("ws") / "cache"))


def _ok(result) -> dict:
    assert not result.is_error, result.content[0].text
    # the same answer twice: as structured content and as the JSON text of a text block
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def _error(result) -> dict:
    """An error result's body: the HTTP server's error shape after the SDK's prefix."""
    assert result.is_error
    text = result.content[0].text
    return json.loads(text[text.index("{"):])


def _roundtrip(value):
    return orjson.loads(orjson.dumps(value))


def _payload(ws, run_name, tool_name, query):
    run = ws.run(run_name)
    return orjson.loads(gzip.decompress(ws.tool_data(run, ws.tool(tool_name, run), query)))


def test_the_tools_and_their_schemas(answers):
    assert answers["init"].server_info.name == "profscope"
    tools = {t.name: t for t in answers["tools"]}
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        assert tool.description, name
        schema = tool.input_schema
        assert schema["type"] == "object"
        if name != "list_runs":
            assert schema["required"][0] == "run", name
        for param, spec in schema["properties"].items():
            assert spec.get("description"), (name, param)
        assert tool.output_schema["type"] == "object"
    # the logs are on stderr (stdout is the protocol's): the server's first line and each refusal
    assert answers["stderr"].startswith("profscope mcp: serving ")
    assert "Tool 'oom_verdict' failed" in answers["stderr"]


def test_list_runs_is_the_workspaces_catalog(answers, ws):
    got = _ok(answers["runs"])
    runs = ws.runs()
    assert [r["name"] for r in got["runs"]] == [r.name for r in runs]
    assert got["count"] == len(runs) and not got["truncated"]
    for row, run in zip(got["runs"], runs):
        assert row["kind"] == run.kind.value
        if run.name in (CORRUPT, LFS_POINTER):
            # unreadable: no tools, and the reason naming the file
            assert row["tools"] == [] and row["file"].endswith(run.files[0].name) and row["file"] in row["error"]
            continue
        assert row["tools"] == [t.name for t in ws.tools(run)], run.name
        assert row["hosts"] == ws.hosts(run)
    assert [r["name"] for r in _ok(answers["after_errors"])["runs"]] == [r.name for r in runs if r.name.startswith("traces/")]


@pytest.mark.parametrize("label, run, host, top", [("steps_tf", TF_GPU, None, 3), ("steps_trace", TRACE, None, 5),
                                                   ("steps_tf_all", TF_GPU, "ALL_HOSTS", agent_tools.DEFAULT_TOP)])
def test_steps_and_ops_is_the_workspaces_answer_cut_to_top(answers, ws, label, run, host, top):
    got = _ok(answers[label])
    want = _roundtrip(ws.steps_ops(ws.run(run), TraceQuery(host=host)))
    for key in ("ops", "kernels"):
        if key in want:
            assert got.pop(f"{key}_total") == len(want[key])
            want[key] = want[key][:top]
    assert got == want
    assert want["steps"] or want.get("per_host")  # the answers compared hold steps
    if label == "steps_trace":
        assert len(got["kernels"]) == 5


def test_memory_at_peak_of_a_compiled_module(answers, ws):
    """The TPU profile's modules: the highest peak's buffers at its peak, as the memory
    viewer lists them (maxHeapBySize), in bytes; together they are the module's peak."""
    got = _ok(answers["peak_tpu"])
    run = ws.run(TPU)
    peaks = [r for r in ws.module_peaks(run) if "error" not in r]
    assert got["source"] == "compiled" and got["module"] == peaks[0]["moduleName"]
    mv = _payload(ws, TPU, "memory_viewer", MemoryViewerQuery(module_name=got["module"]))
    assert [(b["name"], b["shape"], b["op"]) for b in got["buffers"]] == [
        (b.get("instructionName", b["label"]), b.get("shapeString"), b.get("opCode")) for b in mv["maxHeapBySize"]]
    assert got["buffers"][-1]["name"].startswith("small (<")  # XProf's row of the small buffers together
    assert [b["bytes"] for b in got["buffers"]] == [round(b["logicalBufferSizeMib"] * 2**20) for b in mv["maxHeapBySize"]]
    assert sum(b["bytes"] for b in got["buffers"]) == got["peak_bytes"] == mv["profscope"]["totals"]["peakBytes"]


@pytest.mark.parametrize("label, run", [("peak_tf", TF_GPU), ("peak_snapshot", SNAPSHOT)])
def test_memory_at_peak_of_an_allocator(answers, ws, label, run):
    """Allocator events (TF GPU) and a snapshot: the allocations live at the memory
    profile's peak, XProf's special "unused preallocated device memory" included; their
    bytes add up to the allocator's peak in use."""
    got = _ok(answers[label])
    assert got["source"] == "runtime"
    mp = _payload(ws, run, "memory_profile", MemoryProfileQuery())
    allocators = mp["memoryProfilePerAllocator"]
    peak = {i: int(a["profileSummary"]["peakStats"]["peakBytesInUse"]) for i, a in allocators.items()}
    assert got["memory_id"] == max(peak, key=lambda i: (peak[i], i)) and got["peak_bytes"] == peak[got["memory_id"]]
    active = allocators[got["memory_id"]]["activeAllocations"]
    assert got["allocations_at_peak"] == sum(int(a["numOccurrences"]) for a in active)
    assert len(got["allocations"]) == len(active)
    assert sum(a["bytes"] * a["count"] for a in got["allocations"]) == got["peak_bytes"]
    sizes = [a["bytes"] * a["count"] for a in got["allocations"]]
    assert sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize("label, run, device_memory", [("oom_tf", TF_GPU, None), ("oom_tpu", TPU, None),
                                                       ("oom_snapshot", SNAPSHOT, "1GiB")])
def test_oom_verdict_is_the_oom_risk_answer(answers, ws, label, run, device_memory):
    got = _ok(answers[label])
    risk = _payload(ws, run, "oom_risk", OomRiskQuery(device_memory=device_memory))
    assert (got["risk"], got["reason"], got["peak_bytes"], got["capacity_bytes"], got["headroom_bytes"]) == (
        risk["risk"], risk["reason"], risk["peakBytes"], risk["capacityBytes"], risk["headroomBytes"])
    assert [f["id"] for f in got["findings"]] == [f["id"] for f in risk["findings"]]
    assert [c["bytes"] for c in got["contributors"]] == [c["bytes"] for c in risk["contributors"][:5]]
    assert got["plan"] == (risk.get("plan") or {}).get("headline")
    assert got["risk"] != "UNKNOWN"  # each of these has a capacity (the file's, or the one given)
    if got["peak_bytes"] > got["capacity_bytes"]:  # the snapshot's 1.12 GiB peak reserved on 1 GiB
        assert got["risk"] == "OOM"
        cut = next(f for f in got["findings"] if f["id"] == "what_to_cut")
        assert cut["title"] == f"What to cut: {got['contributors'][0]['label']}"


@pytest.mark.skipif(tool_table.get(agent_tools.SUMMARY) is None, reason="the Summary tool is not in the tool table")
def test_run_summary_is_the_summary_tools_answer(answers, ws):
    from profscope.app.tool_table import get

    tool = get(agent_tools.SUMMARY)
    for label, run, host in (("summary_tf", TF_GPU, None), ("summary_tf_all", TF_GPU, "ALL_HOSTS"),
                             ("summary_trace", TRACE, None), ("summary_snapshot", SNAPSHOT, None)):
        got = _ok(answers[label])
        assert got == _payload(ws, run, tool.name, tool.query(**({"host": host} if host else {}))), label
        assert got["run"] == run and got["status"] in ("OPTIMAL", "NEEDS_ATTENTION")


def test_bad_input_is_an_error_result_naming_the_file(answers, public):
    assert _error(answers["bad_run"]) == {"ok": False, "status": 404, "file": None,
                                          "error": f"no run named 'no/such/run' in {public}"}
    assert _error(answers["bad_path"])["status"] == 404  # a name, never opened as a path
    bad_host = _error(answers["bad_host"])
    assert bad_host["status"] == 404 and "has no host '10.0.0.1_6003'" in bad_host["error"]
    assert answers["bad_top"].is_error and "top" in answers["bad_top"].content[0].text
    corrupt = _error(answers["corrupt"])
    assert corrupt["status"] == 422 and corrupt["file"].endswith("tpu_inference_2.xplane.pb")
    assert corrupt["error"].startswith(corrupt["file"]) and "truncated XSpace" in corrupt["error"]
    pointer = _error(answers["lfs_pointer"])
    assert pointer["status"] == 422 and pointer["file"].endswith(LFS_POINTER.split("/")[-1]) and "git-LFS" in pointer["error"]
    if "summary_corrupt" in answers:
        got = answers["summary_corrupt"]
        # the Summary lists an unreadable part as refused; a run with no readable part at all is an error
        assert got.is_error or any("tpu_inference_2.xplane.pb" in r["file"] for r in _ok(got)["refused"])


def test_without_the_extra_it_exits_2_naming_it(public, tmp_path):
    """The SDK hidden from the import system (as where the extra is not installed)."""
    code = ("import sys; sys.modules['mcp'] = None; from profscope.cli import main; "
            f"sys.exit(main(['mcp', {str(public)!r}, '--cache-dir', {str(tmp_path)!r}]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    assert "pip install 'profscope[mcp]'" in res.stderr


def test_the_docs_name_every_tool_and_argument(answers):
    """docs/analysis.md's MCP table: a row per tool, naming each of its arguments."""
    from tests.fixtures.paths import REPO

    text = (REPO / "docs" / "analysis.md").read_text()
    section = text[text.index("\n## MCP\n"):]
    for tool in answers["tools"]:
        row = next((line for line in section.splitlines() if line.startswith(f"| `{tool.name}` |")), None)
        assert row is not None, tool.name
        for param in tool.input_schema["properties"]:
            assert f"`{param}`" in row, (tool.name, param)


def test_hlo_text_and_neighborhood_are_the_workspaces(answers, ws):
    """get_hlo_text around an instruction and by search, get_hlo_neighborhood with its
    trace runs, from the workspace's own module text and instruction panel."""
    run = ws.run(TPU)
    text = ws.hlo_module_text(run, TPU_MODULE)
    info = text["instructions"][TPU_FUSION]
    got = _ok(answers["hlo_text"])
    assert got["instruction"] == {"name": TPU_FUSION, "line": info["line"] + 1, "text": text["lines"][info["line"]].strip()}
    assert got["lines"] == text["lines"][got["first_line"] - 1:got["first_line"] - 1 + 7]
    assert text["lines"][info["line"]] in got["lines"] and got["total_lines"] == len(text["lines"])
    q = _ok(answers["hlo_query"])
    assert q["matches"] == sum("copy-start(" in line for line in text["lines"]) > 0
    assert all("copy-start(" in r["text"] and text["lines"][r["line"] - 1] == r["text"] for r in q["lines"])
    hood = _ok(answers["hlo_hood"])
    panel = ws.hlo_instruction(run, TPU_MODULE, None, TPU_FUSION, 2)
    assert [n["name"] for n in hood["operands"] + hood["users"]] == [n["name"] for n in panel["neighborhood"]["nodes"][1:]]
    assert hood["instruction"]["text"] == text["lines"][info["line"]].strip()
    assert hood["trace"]["defining"]["count"] == panel["trace"]["defining"]["count"] > 0
    assert hood["trace"]["defining"]["first"]["link"] == panel["trace"]["defining"]["slices"][0]["link"]
    assert hood["trace"]["defining"]["count_is_lower_bound"] is False  # a TPU: every slice matched by its module run
    assert hood["source"] == {**panel["sourceNamed"], "found": False, "path": None}  # not under the log directory
    assert _error(answers["hlo_missing"])["status"] == 404
    assert _error(answers["source_outside"])["status"] == 400
    assert _error(answers["source_missing"])["status"] == 404
