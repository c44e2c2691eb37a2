"""The memory viewer's page on a run of one module (issue 40, "memory viewer ≤ 0.4×
xprof-rs"): the page opens a lone module at once and asks the run's module ranking
beside it (pages/memory_viewer.js). The two were two conversions, each parsing and
indexing the module (``_Module``: 0.25 s of 70,000 buffers); now the view's conversion
also makes the ranking's row from the same index (``memory_viewer.view_and_summary``),
and the ranking of a one-module run asks the view (``CompiledMemory._view_first``), so
one conversion serves both, in either order or at once. A profile of one host names the
same cache entry with and without ``host=`` (``compiled_memory.complete_query``), and so does ``memory_space=0``."""

from __future__ import annotations

import gzip
import threading
from pathlib import Path

import orjson
import pytest

from profscope.app.queries import MemoryViewerQuery
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.cache.worker import WorkerPool
from profscope.formats import hlo_proto, xplane
from profscope.formats.protos import xplane_pb2
from profscope.storage import LogDir
from profscope.tools import memory_viewer as mv
from profscope.tools.memory_viewer import page_view
from tests.test_memory_viewer_native import PUBLIC, _public_hlo

HOST = "onehost"


def _one_module_profile(demo_logdir: Path, out: Path) -> tuple[Path, str]:
    """A profile whose ``/host:metadata`` plane holds one compiled module: the demo mlp
    program's real train step (its HloProto in the "Hlo Proto" stat, as XLA's profiler
    stores it; the other modules of that profile left out)."""
    src = next(demo_logdir.glob("mlp/plugins/profile/*/*.xplane.pb"))
    name = "jit_train_step(14)"
    with open(src, "rb") as f:
        data = xplane.hlo_proto_bytes(f, str(src), name)
    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=1, name="/host:metadata")
    for sid, stat in ((1, "Hlo Proto"), (2, "program_id")):
        plane.stat_metadata[sid].id, plane.stat_metadata[sid].name = sid, stat
    meta = plane.event_metadata[1]
    meta.id, meta.name = 1, name.split("(")[0]
    meta.stats.add(metadata_id=1, bytes_value=data)
    meta.stats.add(metadata_id=2, int64_value=14)
    session = out / "run" / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / f"{HOST}.xplane.pb").write_bytes(space.SerializeToString())
    return out, name


def _workspace(logdir: Path, cache: Path) -> Workspace:
    return Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(cache, workers=WorkerPool(enabled=True)))


def _conversions(ws: Workspace) -> int:
    stats = ws.cache.workers.stats
    return stats["runs"] + stats["inProcess"]


def _page_alone(logdir: Path, cache: Path, name: str) -> tuple[int, bytes]:
    """What the page's view alone costs on a fresh cache (conversions past the module
    list: the page's and the full payload's it is cut from, nested) and its answer."""
    ws = _workspace(logdir, cache)
    run = ws.runs()[0]
    ws.modules(run)
    before = _conversions(ws)
    page = ws.tool_data(run, ws.tool_named("memory_viewer"), MemoryViewerQuery(module_name=name, view="page"))
    return _conversions(ws) - before, page


def _expected_row(logdir: Path, name: str) -> dict:
    path = next(logdir.rglob("*.xplane.pb"))
    with open(path, "rb") as f:
        row = mv.summary(hlo_proto.parse(xplane.hlo_proto_bytes(f, str(path), name), str(path)), 0)
    return {**row, "moduleName": name, "hloModuleName": row["moduleName"]}


def test_the_ranking_then_the_view_is_one_conversion(demo_logdir, tmp_path):
    """The page's two requests one after the other (compare_peers' order): the ranking
    converts the module's view in one worker, the view is then read from the cache, and
    both answers are what each made alone before: the ranking's row is ``summary``'s,
    the page is a fresh server's page of the module."""
    logdir, name = _one_module_profile(demo_logdir, tmp_path / "logdir")
    alone, alone_page = _page_alone(logdir, tmp_path / "alone", name)
    ws = _workspace(logdir, tmp_path / "cache")
    run, tool = ws.runs()[0], ws.tool_named("memory_viewer")
    ws.modules(run)
    before = _conversions(ws)
    rows = ws.module_peaks(run)
    assert rows == [_expected_row(logdir, name)]
    assert _conversions(ws) - before == alone  # the view's conversion, no ranking of its own
    page = ws.tool_data(run, tool, MemoryViewerQuery(module_name=name, host=HOST, view="page"))
    assert _conversions(ws) - before == alone  # read back
    assert gzip.decompress(page) == gzip.decompress(alone_page)  # (the gzip header holds its time)
    full = orjson.loads(gzip.decompress(ws.tool_data(run, tool, MemoryViewerQuery(module_name=name))))
    assert orjson.loads(gzip.decompress(page)) == orjson.loads(orjson.dumps(page_view(full)))


def test_the_ranking_and_the_view_at_once_are_one_conversion(demo_logdir, tmp_path):
    """As the page asks them: at the same time. Both wait on the view's one conversion."""
    logdir, name = _one_module_profile(demo_logdir, tmp_path / "logdir")
    alone, _ = _page_alone(logdir, tmp_path / "alone", name)
    ws = _workspace(logdir, tmp_path / "cache")
    run, tool = ws.runs()[0], ws.tool_named("memory_viewer")
    ws.modules(run)
    before = _conversions(ws)
    answers, errors = {}, []
    barrier = threading.Barrier(2)

    def ask(what, fn):
        try:
            barrier.wait()
            answers[what] = fn()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=ask, args=("rows", lambda: ws.module_peaks(run))),
               threading.Thread(target=ask, args=("page", lambda: ws.tool_data(
                   run, tool, MemoryViewerQuery(module_name=name, view="page"))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert answers["rows"] == [_expected_row(logdir, name)] and answers["page"]
    assert _conversions(ws) - before == alone


def test_one_host_with_and_without_host_is_one_entry(demo_logdir, tmp_path):
    """XProf's frontend asks with ``host=``, the page may not, and with ``memory_space=0``
    (the ranking with neither): one key, one conversion."""
    logdir, name = _one_module_profile(demo_logdir, tmp_path / "logdir")
    ws = _workspace(logdir, tmp_path / "cache")
    run, tool = ws.runs()[0], ws.tool_named("memory_viewer")
    bare, named = MemoryViewerQuery(module_name=name), MemoryViewerQuery(module_name=name, host=HOST)
    page = MemoryViewerQuery(module_name=name, memory_space=0, view="page")
    assert ws.tool_data_key(run, tool, bare) == ws.tool_data_key(run, tool, named)
    assert ws.tool_data_key(run, tool, page) == ws.tool_data_key(run, tool, page.but(memory_space=None, host=HOST))
    ws.modules(run)
    before = _conversions(ws)
    assert ws.tool_data(run, tool, bare) == ws.tool_data(run, tool, named)
    assert _conversions(ws) - before == 1


def test_a_dump_of_one_module_in_the_server_and_in_a_worker(demo_copy, demo_expected, tmp_path):
    """The demo's XLA dump (one module): small, it converts in the server process; its
    proto gzipped, in a worker. Either way its ranking and its page are one conversion
    (the ranking first), and the ranking's row is ``summary``'s."""
    name = demo_expected["programs"]["mlp"]["profile_module_name"]
    folder = demo_copy / "dumps" / "mlp"
    hlo = hlo_proto.parse(next(folder.glob("*after_optimizations.hlo.pb")).read_bytes(), "dump")
    row = mv.summary(hlo, 0)
    expected = [{**row, "moduleName": name, "hloModuleName": row["moduleName"]}]
    for how, gzipped in (("inProcess", False), ("runs", True)):
        if gzipped:
            for f in folder.glob("*.hlo.pb"):
                f.with_name(f.name + ".gz").write_bytes(gzip.compress(f.read_bytes()))
                f.unlink()
        ws = _workspace(demo_copy, tmp_path / f"cache_{how}")
        run = ws.run("dumps/mlp")
        assert ws.module_peaks(run) == expected
        ws.tool_data(run, ws.tool_named("memory_viewer"), MemoryViewerQuery(module_name=name, view="page"))
        # the page's conversion and the full payload's inside it: in the server process,
        # two; in a worker, one run (the full payload's inline in it); nothing for the ranking
        stats = ws.cache.workers.stats
        assert (stats["inProcess"], stats["runs"]) == ((2, 0) if how == "inProcess" else (0, 1)), stats


def test_a_space_the_module_lacks_still_ranks_as_zeros(demo_logdir, tmp_path):
    """The view refuses a memory space the module does not have (404); the ranking then
    converts its own summary, which rates such a space zero, as before."""
    logdir, name = _one_module_profile(demo_logdir, tmp_path / "logdir")
    ws = _workspace(logdir, tmp_path / "cache")
    rows = ws.module_peaks(ws.runs()[0], memory_space=7)
    assert len(rows) == 1 and rows[0]["peakBytes"] == 0 and "error" not in rows[0], rows


@pytest.mark.parametrize("case", PUBLIC[::3], ids=lambda c: f"{c['case']}/{c['module']}/{c['space']}")
def test_view_and_summary_are_from_hlo_and_summary(case, shared_fixtures):
    """One index for both gives each function's own answer, on real modules."""
    hlo = _public_hlo(shared_fixtures, case)
    full, row = mv.view_and_summary(hlo, case["space"])
    assert orjson.dumps(full) == orjson.dumps(mv.from_hlo(hlo, case["space"]))
    assert row == mv.summary(hlo, case["space"])
