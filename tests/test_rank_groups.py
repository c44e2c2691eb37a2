"""One run per distributed job (issue 38 item 3, docs/runs.md "One run per distributed
job"): files that differ only by a rank token are one run whose hosts are the ranks.

Inputs: four per-rank snapshots, copies of the real public snapshots (shared fixtures) and
of the bundled real demo snapshots, renamed ``rank<N>_snapshot.pickle`` here at test time;
and the traces of a real 2-process ``torchrun`` job (tests/data/torchrun_ddp, written by
scripts/make_torchrun_traces.py). Every rank's answer is compared with the same file
opened alone, in a log directory holding only it."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import orjson
import pytest

from profscope.app.discovery import discover
from profscope.app.queries import OomRiskQuery, SnapshotQuery, TraceQuery
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.cli import demo_logdir
from profscope.model.catalog import RunKind
from profscope.model.file_kinds import rank_of
from profscope.storage import LogDir
from profscope.tools.memory_hosts import host_summary

TORCHRUN = Path(__file__).parent / "data" / "torchrun_ddp"
SNAPSHOT_JOB = "fsdp/rank*_snapshot.pickle"
TRACE_JOB = "ddp/ddp_rank*.pt.trace.json.gz"


def _snapshot_sources(shared_fixtures) -> list[Path]:
    public = shared_fixtures / "public_profiles" / "snapshots"
    demo = Path(demo_logdir()) / "torch_snapshots"
    return [public / "niu_fwd_bwd_200_mixed.pickle", public / "bolong_xl_fwd_cl2048_fp32_expandable.pickle",
            demo / "flexgen_1.3b.pickle", demo / "sketchkv_2024.pickle"]


@pytest.fixture(scope="module")
def job(tmp_path_factory, shared_fixtures) -> Path:
    """A log directory with one snapshot job of 4 ranks, the torchrun trace job, and
    files that must stay runs of their own."""
    root = tmp_path_factory.mktemp("ranks")
    (root / "fsdp").mkdir()
    for rank, src in enumerate(_snapshot_sources(shared_fixtures)):
        shutil.copyfile(src, root / "fsdp" / f"rank{rank}_snapshot.pickle")
    shutil.copytree(TORCHRUN, root / "ddp", ignore=shutil.ignore_patterns("*.md"))
    # torchrun-style: one folder per rank, the same file name in each
    for rank in (0, 1):
        (root / "tr" / f"rank_{rank}").mkdir(parents=True)
        shutil.copyfile(TORCHRUN / f"ddp_rank{rank}.pt.trace.json.gz", root / "tr" / f"rank_{rank}" / "trace.pt.trace.json.gz")
    # share a prefix, differ by something that is no rank: never grouped
    (root / "other").mkdir()
    snap = _snapshot_sources(shared_fixtures)[2]
    trace = TORCHRUN / "ddp_rank0.pt.trace.json.gz"
    for name in ("a.pickle", "b.pickle"):
        shutil.copyfile(snap, root / "other" / name)
    for name in ("model_v1.json.gz", "model_v2.json.gz", "run_r3.json.gz", "run_r4.json.gz"):
        shutil.copyfile(trace, root / "other" / name)
    # two files of one rank number: not one job's ranks
    (root / "twice").mkdir()
    for name in ("rank1.json.gz", "rank01.json.gz"):
        shutil.copyfile(trace, root / "twice" / name)
    # one rank token, two kinds (a snapshot and a trace): not one job
    (root / "mixed").mkdir()
    shutil.copyfile(snap, root / "mixed" / "rank0_mem.pickle")
    shutil.copyfile(trace, root / "mixed" / "rank1_mem.json.gz")
    return root


def _ws(root: Path, cache: Path) -> Workspace:
    return Workspace(LogDir(str(root), listing_ttl=0), DiskCache(cache))


@pytest.fixture(scope="module")
def ws(job, tmp_path_factory) -> Workspace:
    return _ws(job, tmp_path_factory.mktemp("ranks_cache"))


@pytest.fixture(scope="module")
def alone(job, tmp_path_factory):
    """``alone(path)``: a workspace over a log directory holding only that file, at the same
    relative path (so the answers name the same file), and its run."""
    made = {}

    def one(path: str):
        if path not in made:
            root = tmp_path_factory.mktemp("alone")
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(job / path, root / path)
            w = _ws(root, tmp_path_factory.mktemp("alone_cache"))
            (run,) = w.runs()
            assert run.name == path and not run.ranks
            made[path] = (w, run)
        return made[path]

    return one


def test_rank_token_rule():
    assert rank_of("rank0_snapshot.pickle") == ("rank*_snapshot.pickle", "rank0")
    assert rank_of("job/rank-1.json.gz") == ("job/rank-*.json.gz", "rank-1")
    assert rank_of("trace_rank3.json") == ("trace_rank*.json", "rank3")
    assert rank_of("snapshot_rank_2.pickle") == ("snapshot_rank_*.pickle", "rank_2")
    assert rank_of("out/rank_0/trace.json") == ("out/rank_*/trace.json", "rank_0")  # torchrun-style folders
    assert rank_of("node0_rank1/t.pt.trace.json") == ("node0_rank*/t.pt.trace.json", "rank1")
    for no in ("model_v1.json", "a.pickle", "run_r3.json", "franks1.json", "rank0x.json", "ranks/a.json",
               "rank0/rank1.pickle"):  # the last: two tokens, ambiguous
        assert rank_of(no) is None, no


def test_discovery_groups_ranks_and_nothing_else(ws):
    runs = {r.name: r for r in ws.runs()}
    snap, trace = runs[SNAPSHOT_JOB], runs[TRACE_JOB]
    assert snap.kind is RunKind.TORCH_SNAPSHOT and snap.hosts == ["rank0", "rank1", "rank2", "rank3"]
    assert [f.name for f in snap.files] == [f"rank{i}_snapshot.pickle" for i in range(4)]
    assert trace.kind is RunKind.CHROME_TRACE and trace.hosts == ["rank0", "rank1"]
    assert ws.hosts(snap) == snap.hosts
    assert [h for h, _ in ws.trace_sources(trace)] == ["rank0", "rank1"]
    # each rank is its file's own run, still reachable by the file's name
    for rank, one in snap.ranks.items():
        assert one.name == f"fsdp/{rank}_snapshot.pickle" and ws.run(one.name) is not None
    singles = {"other/a.pickle", "other/b.pickle", "other/model_v1.json.gz", "other/model_v2.json.gz",
               "other/run_r3.json.gz", "other/run_r4.json.gz", "mixed/rank0_mem.pickle", "mixed/rank1_mem.json.gz",
               "twice/rank1.json.gz", "twice/rank01.json.gz"}
    assert singles <= set(runs), sorted(runs)
    folders = runs["tr/rank_*/trace.pt.trace.json.gz"]
    assert folders.hosts == ["rank_0", "rank_1"] and folders.folder == "tr"
    assert [f.path for f in folders.files] == ["tr/rank_0/trace.pt.trace.json.gz", "tr/rank_1/trace.pt.trace.json.gz"]
    assert set(runs) == singles | {SNAPSHOT_JOB, TRACE_JOB, folders.name}
    assert not any(runs[n].ranks for n in singles)


def test_one_rank_is_not_a_job(job, tmp_path):
    """A single rank file stays the run of its own name (rank-0.json.gz alone)."""
    root = tmp_path / "one"
    (root / "dist").mkdir(parents=True)
    shutil.copyfile(TORCHRUN / "ddp_rank0.pt.trace.json.gz", root / "dist" / "rank-0.json.gz")
    (run,) = discover(LogDir(str(root), listing_ttl=0).listing())
    assert run.name == "dist/rank-0.json.gz" and not run.ranks and run.hosts == []


def _payload(w, run, tool, query) -> bytes:
    """The tool's JSON bytes, the log directory's own location (which answers name their
    file by) written as ``<logdir>``: the two workspaces read the file at the same
    relative path under different folders."""
    body = gzip.decompress(w.tool_data(run, w.tool_named(tool), query))
    return body.replace(w.logdir.url.rstrip("/").encode(), b"<logdir>")


@pytest.mark.parametrize("job_name", [SNAPSHOT_JOB, TRACE_JOB])
def test_each_rank_answers_as_its_file_alone(ws, alone, job_name):
    """Every tool of the job asked with ``host=<rank>`` answers byte for byte what the
    rank's file answers opened alone (its own run in a log directory holding only it)."""
    group = ws.run(job_name)
    tools = [t for t in ws.tools(group) if "host" in t.query.params() and t.answer.name != "STREAM"]
    assert {"memory_profile", "oom_risk"} <= {t.name for t in tools}
    for rank, one in group.ranks.items():
        w, run = alone(one.name)
        for tool in tools:
            mine = _payload(ws, group, tool.name, tool.query(host=rank))
            theirs = _payload(w, run, tool.name, tool.query())
            assert mine == theirs, (rank, tool.name)
    if group.kind is RunKind.TORCH_SNAPSHOT:
        for rank, one in group.ranks.items():
            w, run = alone(one.name)
            for view in ("segments", "stacks"):
                mine = gzip.decompress(ws.snapshot_view(group, view, SnapshotQuery(host=rank)))
                theirs = gzip.decompress(w.snapshot_view(run, view, SnapshotQuery()))
                assert len(mine) > 100 and mine == theirs, (rank, view)
    else:
        for rank, one in group.ranks.items():
            w, run = alone(one.name)
            # /api/steps_ops of the job: rows name their host by the rank, alone by the file
            mine = orjson.dumps(ws.steps_ops(group, TraceQuery(host=rank)))
            theirs = orjson.dumps(w.steps_ops(run, TraceQuery()))
            mine = mine.replace(f'"host":"{rank}"'.encode(), f'"host":"{run.files[0].name}"'.encode())
            mine, theirs = orjson.loads(mine), orjson.loads(theirs)
            assert mine["host"] == run.files[0].name
            for k in ("summary", "steps", "ops", "kernels", "ops_scope", "share_of"):
                assert mine[k] == theirs[k], (rank, k)


@pytest.mark.parametrize("job_name", [SNAPSHOT_JOB, TRACE_JOB])
def test_worst_rank_named(ws, alone, job_name):
    """The all-hosts memory view and OOM risk name the rank whose own file peaks highest;
    each rank's row carries that file's own peak."""
    group = ws.run(job_name)
    alone_peaks, alone_oom = {}, {}
    for rank, one in group.ranks.items():
        w, run = alone(one.name)
        mp = orjson.loads(_payload(w, run, "memory_profile", w.tool_named("memory_profile").query()))
        alone_peaks[rank] = host_summary(rank, mp)["peakBytes"]
        alone_oom[rank] = orjson.loads(_payload(w, run, "oom_risk", OomRiskQuery()))["peakBytes"]
    assert len(set(alone_peaks.values())) == len(alone_peaks), alone_peaks  # distinct: a worst exists

    mh = ws.memory_hosts(group)
    assert mh["run"] == job_name and mh["rollup"]["hosts"] == len(group.ranks)
    assert mh["rollup"]["worstHost"] == max(alone_peaks, key=alone_peaks.get)
    assert {r["host"]: r["peakBytes"] for r in mh["hosts"]} == alone_peaks
    assert [r["host"] for r in mh["hosts"]] == sorted(alone_peaks, key=lambda h: -alone_peaks[h])

    oom = orjson.loads(_payload(ws, group, "oom_risk", OomRiskQuery()))
    assert {h["host"]: h["peakBytes"] for h in oom["hosts"]} == alone_oom
    assert oom["host"] == max(alone_oom, key=alone_oom.get)  # all UNKNOWN (no capacity): by peak


def test_trace_job_steps_rollup_and_merged_timeline(ws, alone):
    """The torchrun job: every rank's steps side by side (the slowest rank named, each
    rank's median step the one its own Steps & ops gives) and one timeline of both ranks."""
    group = ws.run(TRACE_JOB)
    th = ws.trace_hosts(group)
    medians = {}
    for rank, one in group.ranks.items():
        w, run = alone(one.name)
        steps = [s["step_time_us"] for s in w.steps_ops(run, TraceQuery())["steps"]]
        assert len(steps) == 3  # the script's 3 active steps
        medians[rank] = sorted(steps)[1]
    rows = {r["host"]: r for r in th["hosts"]}
    assert set(rows) == {"rank0", "rank1"} and all(r["status"] == "ok" for r in rows.values())
    for rank, med in medians.items():
        assert rows[rank]["stepCount"] == 3 and rows[rank]["stepPs"] == round(med * 1e6)
    assert th["rollup"]["slowestHost"] == max(medians, key=medians.get)
    window = ws.trace_window(group, TraceQuery(hosts="rank0,rank1"))
    assert window["hosts"] == ["rank0", "rank1"]
    assert {p["host"] for p in window["processes"]} == {"rank0", "rank1"}  # both ranks' processes, one clock
    assert len(window["steps"]) == 6  # 3 ProfilerSteps of each rank
    for rank in group.ranks:  # and each rank alone, as its own file's timeline
        w, run = alone(group.ranks[rank].name)
        one, theirs = ws.trace_window(group, TraceQuery(host=rank)), w.trace_window(run, TraceQuery())
        assert one["totalEventsSize"] == theirs["totalEventsSize"] and one["steps"] == theirs["steps"]
