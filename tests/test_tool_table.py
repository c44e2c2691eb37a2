"""The tool table (app/tool_table.py): each tool declared once, and everything else
derived from it: the workspace's dispatch, the XProf data API's parameters and answers,
``/api/run``, ``run_tools`` and the dashboard's page list.

``test_a_new_tool_is_one_row`` is docs/architecture.md's "where to change what" checklist
as a test: a tool module (here, a function), one table row and one page module's name
are all it takes for a tool to be listed, validated and answered everywhere: the
server, the XProf data API, the CLI and the page list."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from profscope.app import queries, tool_table
from profscope.app.tool_table import NOT_FOR, Answer, Tool
from profscope.app.workspace import Workspace
from profscope.model.catalog import RunKind

STATIC = Path(tool_table.__file__).parents[1] / "frontend" / "static"


def test_every_tool_is_one_row_with_a_producer_or_not_for_each_run_kind():
    names = [n for t in tool_table.TOOLS for n in (t.name, *t.aliases)]
    assert len(names) == len(set(names)), names
    for tool in tool_table.TOOLS:
        assert set(tool.producers) == set(RunKind), tool.name
        for kind, producer in tool.producers.items():
            # a producer is a Workspace method, so the table names no function of its own
            assert producer is NOT_FOR or getattr(Workspace, producer.__name__) is producer, (tool.name, kind)
        assert tool.run_kinds, f"{tool.name} is for no run kind"
        assert issubclass(tool.query, queries.Query)
        if tool.answer is Answer.STREAM:
            assert getattr(Workspace, tool.stream.__name__) is tool.stream


def _every_kind(producer) -> dict:
    return {kind: producer for kind in RunKind}


def test_a_row_must_say_something_for_every_run_kind():
    with pytest.raises(ValueError, match="say NOT_FOR or give a producer"):
        Tool("half", "Half", "", queries.MemoryProfileQuery, {RunKind.PROFILE: Workspace.xplane_memory_profile},
             lambda ws, run: True, pages=())
    with pytest.raises(ValueError, match="streamed answer needs its stream"):
        Tool("stream", "Stream", "", queries.XprofTraceQuery, _every_kind(Workspace.trace_viewer_xprof),
             lambda ws, run: True, pages=(), answer=Answer.STREAM)
    with pytest.raises(ValueError, match="has no field 'nope'"):
        Tool("page", "Page", "", queries.MemoryProfileQuery, _every_kind(Workspace.xplane_memory_profile),
             lambda ws, run: True, pages=(), page=tool_table.Page("nope", "x.html", lambda ws, run, q: {}))


def test_each_page_module_of_a_row_draws_that_tool():
    """Every page a row names exists and declares the row's tool (``tool: "..."``, the
    trace viewer without its streaming '@'); every tool page in static/pages/ is a row's."""
    declared = {}
    for path in (STATIC / "pages").glob("*.js"):
        m = re.search(r'^  tool: "([^"]*)",$', path.read_text(), flags=re.M)  # the default export's key
        if m and m.group(1):
            declared[path.name] = m.group(1)
    named = {p: t.name.rstrip("@") for t in tool_table.TOOLS for p in t.pages}
    assert named == declared


def test_tools_are_listed_in_xprofs_order():
    from profscope.model.catalog import Run

    profile = [t.name for t in tool_table.for_run(Run("r", RunKind.PROFILE, ""))]
    # the Summary first (the page a run opens on, issue 35), then XProf's order
    assert profile == ["summary", "overview_page", "trace_viewer@", "op_profile", "memory_profile", "memory_viewer",
                       "hlo_stats", "steps_ops", "oom_risk"]
    assert [t.name for t in tool_table.for_run(Run("r", RunKind.TORCH_SNAPSHOT, ""))] == ["summary", "memory_profile",
                                                                                          "oom_risk"]


# -- a new tool ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FileCountQuery(queries.Query):
    """The dummy tool's query: one bounded number, one text."""

    top: int | None = queries.count(least=1, most=10)
    host: str | None = queries.text()


def count_files(ws: Workspace, run, query: FileCountQuery, progress) -> dict:
    """The dummy tool's "tool module": the largest files of a run."""
    files = sorted(run.files, key=lambda f: -f.size)[: query.top or 3]
    return {"run": run.name, "files": [{"path": f.path, "size": f.size} for f in files]}


FILE_COUNT = Tool(
    "file_count", "File count", "The largest files of a run.", FileCountQuery,
    tool_table._for(profile=count_files, xla_dump=count_files, torch_snapshot=NOT_FOR, chrome_trace=NOT_FOR,
                    pprof=NOT_FOR),
    lambda ws, run: True, pages=("file_count.js",),
)


def test_a_new_tool_is_one_row(monkeypatch, capsys, make_client, demo_logdir, demo_expected):
    """Only the table changes: the row is listed by /api/run and XProf's run_tools, its
    parameters are validated from its query type's bounds, its answer comes from its
    producer and is cached, it has nothing for the run kinds it says NOT_FOR, the
    dashboard loads its page module, and ``profscope query`` answers it too."""
    monkeypatch.setattr(tool_table, "TOOLS", (*tool_table.TOOLS, FILE_COUNT))
    client = make_client(demo_logdir)
    run = f"mlp/{demo_expected['programs']['mlp']['session']}"

    tools = client.get("/api/run", params={"run": run}).json()["tools"]
    assert {"name": "file_count", "title": "File count", "summary": "The largest files of a run."} in tools
    listed = client.get("/data/plugin/profile/run_tools", params={"run": run}).json()
    assert listed[-1] == "file_count"  # profscope's own tools after XProf's

    bad = client.get("/data/plugin/profile/data", params={"run": run, "tag": "file_count", "top": "11"})
    assert bad.status_code == 400
    assert "parameter 'top' must be less than or equal to 10" in bad.json()["error"]

    res = client.get("/data/plugin/profile/data", params={"run": run, "tag": "file_count", "top": "1"})
    assert res.status_code == 200, res.text
    body = res.json()
    assert body["run"] == run and len(body["files"]) == 1
    ws = client.app.state.workspace
    the_run = ws.run(run)
    assert orjson.loads(gzip.decompress(ws.tool_data(the_run, FILE_COUNT, FileCountQuery(top=1)))) == body
    assert ws.cache.has(ws.tool_data_key(the_run, FILE_COUNT, FileCountQuery(top=1)))

    snapshot = next(r["name"] for r in client.get("/api/runs").json()["runs"] if r["kind"] == "torch_snapshot")
    assert "file_count" not in [t["name"] for t in client.get("/api/run", params={"run": snapshot}).json()["tools"]]
    no = client.get("/data/plugin/profile/data", params={"run": snapshot, "tag": "file_count"})
    assert no.status_code == 404 and "no input for tool 'file_count'" in no.json()["error"]

    page = client.get("/").text
    modules = json.loads(re.search(r'<script type="application/json" id="page-modules">(.*?)</script>', page).group(1))
    assert modules[-1] == "file_count.js" and '<link rel="modulepreload" href="/static/pages/file_count.js">' in page

    # the CLI's JSON twin of the data route comes from the same row
    from profscope.cli import main

    cache = ["--cache-dir", str(client.app.state.workspace.cache.root.parent / "cli-cache"), "--workers", "0"]
    assert main(["query", str(demo_logdir), "--run", run, "--tool", "file_count", "-p", "top=1", *cache]) == 0
    assert json.loads(capsys.readouterr().out) == body
    assert main(["query", str(demo_logdir), "--run", run, "--tool", "file_count", "-p", "top=0", *cache]) == 2
    assert "parameter 'top' must be greater than or equal to 1" in capsys.readouterr().err
    assert main(["query", str(demo_logdir), "--run", run, *cache]) == 0
    listed = {t["tool"]: t["params"] for t in json.loads(capsys.readouterr().out)["tools"]}
    assert listed["file_count"] == {"top": {"type": "int", "ge": 1, "le": 10}, "host": {"type": "str", "max_length": 8192}}


def test_a_tool_that_reads_others_is_keyed_by_their_versions_too():
    """The Summary is made of Steps & ops, OOM risk... answers: a new version of one of
    them must not be summarised from the Summary's old cached payload (the cache key of a
    payload holds tool_table.cache_version)."""
    import dataclasses

    from profscope.app import keys

    summary, steps = tool_table.get("summary"), tool_table.get("steps_ops")
    assert "steps_ops" in summary.reads and tool_table.cache_version(steps) == steps.version
    before = keys.tool_payload(summary, "file:///logs", ["a.xplane.pb@1"], [])
    tools = {t.name: t for t in tool_table.TOOLS}
    tools["steps_ops"] = dataclasses.replace(steps, version=steps.version + 1)
    real_get = tool_table.get
    try:
        tool_table.get = tools.get
        after = keys.tool_payload(summary, "file:///logs", ["a.xplane.pb@1"], [])
        cycle = dataclasses.replace(steps, reads=("summary",))
        tools["steps_ops"] = cycle
        with pytest.raises(ValueError, match="reads itself"):
            tool_table.cache_version(summary)
    finally:
        tool_table.get = real_get
    assert after != before


def test_every_compare_names_a_diff_function():
    """A row's ``compare`` ("module:function" under profscope.tools) is imported when a
    base is given (app/compare.py ``differ``): each must name a real function."""
    from profscope.app.compare import differ

    named = [t for t in tool_table.TOOLS if t.compare is not None]
    assert {t.name for t in named} >= {"memory_viewer", "memory_profile", "steps_ops", "oom_risk", "summary"}
    for t in named:
        assert callable(differ(t)), t.name
