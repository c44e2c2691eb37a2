"""The memory viewer through the data API: profiles, dumps, text-only dumps, bad input."""

from __future__ import annotations

import pytest

MIB = 1024 * 1024


def _run(expected, program):
    p = expected["programs"][program]
    return f"{p['run']}/{p['session']}", p


def _data(client, run, **params):
    return client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_viewer", **params})


def test_profile_modules_match_xprof_figures(demo_client, demo_expected):
    for program in ("mlp", "transformer", "convnet"):
        run, p = _run(demo_expected, program)
        assert "memory_viewer" in demo_client.get("/data/plugin/profile/run_tools", params={"run": run}).json()
        res = _data(demo_client, run, host="demo-host", module_name=p["profile_module_name"], memory_space=0)
        assert res.status_code == 200, res.text
        body = res.json()
        xprof = p["xprof_memory_viewer"][p["profile_module_name"]]
        assert body["moduleName"] == p["profile_module_name"].rsplit("(", 1)[0] or body["moduleName"]
        assert round(body["peakHeapMib"] * MIB) == xprof["peakHeapBytes"]
        assert round(body["totalBufferAllocationMib"] * MIB) == xprof["totalBufferAllocationBytes"]
        assert len(body["heapSizes"]) == xprof["heapSizesLength"]


def test_dump_and_profile_give_the_same_result(demo_client, demo_expected):
    run, p = _run(demo_expected, "mlp")
    from_profile = _data(demo_client, run, module_name=p["profile_module_name"]).json()
    from_dump = _data(demo_client, "dumps/mlp", module_name=p["profile_module_name"]).json()
    assert from_dump == from_profile


def test_page_view_and_module_ranking(demo_client, demo_expected):
    run, p = _run(demo_expected, "transformer")
    full = _data(demo_client, run, module_name=p["profile_module_name"]).json()
    page = _data(demo_client, run, module_name=p["profile_module_name"], view="page").json()
    assert page["peakHeapMib"] == full["peakHeapMib"]
    assert max(page["heapSizes"]) == max(full["heapSizes"])
    assert len(page["profscope"]["heapPositions"]) == len(page["heapSizes"])
    peaks = demo_client.get("/api/module_peaks", params={"run": run}).json()
    assert [r["peakHeapMib"] for r in peaks] == sorted((r["peakHeapMib"] for r in peaks), reverse=True)
    assert peaks[0]["moduleName"] == p["profile_module_name"] and peaks[0]["hloModuleName"] == full["moduleName"]
    assert len(peaks) == len(p["metadata_modules"])


def test_text_only_dump(make_client, demo_copy, demo_expected):
    for f in (demo_copy / "dumps" / "mlp").glob("*.hlo.pb"):
        f.unlink()
    client = make_client(demo_copy)
    name = demo_expected["programs"]["mlp"]["profile_module_name"]
    assert client.get("/data/plugin/profile/module_list", params={"run": "dumps/mlp"}).text == name
    body = _data(client, "dumps/mlp", module_name=name).json()
    assert body["textOnly"] is True and ".hlo.pb" in body["note"]
    assert body["totals"]["totalBufferAllocationBytes"] == sum(a["sizeBytes"] for a in body["allocations"])


def _error(res, status):
    assert res.status_code == status, res.text
    body = res.json()
    assert body["ok"] is False and body["error"]
    return body


@pytest.mark.parametrize(
    "params, status, words",
    [
        ({}, 400, "module_name"),
        ({"module_name": "jit_nope(1)"}, 404, "no module"),
        ({"module_name": "jit_train_step(14)", "memory_space": "7"}, 404, "memory space"),
        ({"module_name": "jit_train_step(14)", "memory_space": "abc"}, 400, "integer"),
        ({"module_name": "jit_train_step(14)", "host": "other-host"}, 404, "no host"),
    ],
)
def test_bad_requests(demo_client, demo_expected, params, status, words):
    run, _ = _run(demo_expected, "mlp")
    assert words in _error(_data(demo_client, run, **params), status)["error"]


def test_corrupt_and_incomplete_dumps(make_client, demo_copy, demo_expected):
    name = demo_expected["programs"]["mlp"]["profile_module_name"]
    dump = demo_copy / "dumps" / "mlp"
    after = next(dump.glob("*after_optimizations.hlo.pb"))
    before = next(dump.glob("*before_optimizations.hlo.pb"))
    good = after.read_bytes()

    after.write_bytes(good[: len(good) // 2])
    body = _error(_data(make_client(demo_copy), "dumps/mlp", module_name=name), 422)
    assert after.name in body["error"] and body["file"].endswith(after.name)

    after.write_bytes(before.read_bytes())  # an HloProto without a buffer assignment
    body = _error(_data(make_client(demo_copy), "dumps/mlp", module_name=name), 422)
    assert "buffer assignment" in body["error"] and body["file"].endswith(after.name)

    after.write_bytes(b"\x00garbage\xff" * 10)
    _error(_data(make_client(demo_copy), "dumps/mlp", module_name=name), 422)

    # The profile run beside it is not disturbed.
    run, p = _run(demo_expected, "mlp")
    assert _data(make_client(demo_copy), run, module_name=p["profile_module_name"]).status_code == 200


def test_the_page_view_is_made_from_the_full_payloads_entry(demo_logdir, demo_expected, tmp_path):
    """view=page and XProf's full payload share one conversion (issue 40): the page's
    conversion stores the full payload under its own key, so the full request after it
    reads the cache, and the page is exactly page_view of that payload."""
    import gzip

    import orjson

    from profscope.app.queries import MemoryViewerQuery
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.storage import LogDir
    from profscope.tools.memory_viewer import page_view

    ws = Workspace(LogDir(str(demo_logdir)), DiskCache(tmp_path / "cache", workers=WorkerPool(enabled=True)))
    run_name, p = _run(demo_expected, "transformer")
    run, tool = ws.run(run_name), ws.tool_named("memory_viewer")
    query = MemoryViewerQuery(module_name=p["profile_module_name"])
    full_key = ws.tool_data_key(run, tool, query)
    page = orjson.loads(gzip.decompress(ws.tool_data(run, tool, query.but(view="page"))))
    assert ws.cache.has(full_key)
    stats = ws.cache.workers.stats
    conversions = stats["runs"] + stats["inProcess"]
    full = orjson.loads(gzip.decompress(ws.tool_data(run, tool, query)))
    assert stats["runs"] + stats["inProcess"] == conversions  # read back, not converted again
    assert page == orjson.loads(orjson.dumps(page_view(full))) and page != full


def test_a_small_module_converts_in_the_server_process(demo_copy, demo_expected, tmp_path):
    """A module of at most IN_PROCESS_MAX_BYTES converts without a worker (its fork and
    imports cost more than the conversion, issue 40); the same module gzipped, whose
    expansion its size does not tell, goes to a worker; both answer the same payload."""
    import gzip

    from profscope.app.compiled_memory import IN_PROCESS_MAX_BYTES
    from profscope.app.queries import MemoryViewerQuery
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.storage import LogDir

    name = demo_expected["programs"]["mlp"]["profile_module_name"]
    folder = demo_copy / "dumps" / "mlp"
    assert 0 < sum(f.stat().st_size for f in folder.glob("*.hlo.pb")) <= IN_PROCESS_MAX_BYTES

    def convert(logdir, view=None) -> tuple[bytes, dict]:
        ws = Workspace(LogDir(str(logdir)), DiskCache(tmp_path / f"cache{len(list(tmp_path.iterdir()))}",
                                                      workers=WorkerPool(enabled=True)))
        run = ws.run("dumps/mlp")
        body = gzip.decompress(ws.tool_data(run, ws.tool_named("memory_viewer"), MemoryViewerQuery(module_name=name,
                                                                                                  view=view)))
        return body, dict(ws.cache.workers.stats)

    small, stats = convert(demo_copy)
    assert (stats["inProcess"], stats["runs"]) == (1, 0)
    page, stats = convert(demo_copy, view="page")  # and the full payload it is made from
    assert (stats["inProcess"], stats["runs"]) == (2, 0)
    for f in folder.glob("*.hlo.pb"):
        f.with_name(f.name + ".gz").write_bytes(gzip.compress(f.read_bytes()))
        f.unlink()
    gzipped, stats = convert(demo_copy)
    assert (stats["inProcess"], stats["runs"]) == (0, 1)
    assert gzipped == small


def test_the_module_list_imports_the_tool_before_its_worker_forks(demo_logdir, demo_expected, tmp_path):
    """A cold module ranking imports the memory viewer (protobuf, numpy, the tool) in
    the server process before its worker is forked, so that the page's view worker
    inherits it instead of importing it a second time (issue 40: ~0.1 CPU s of the
    page's first answer); a ranking read from the cache imports nothing."""
    import subprocess
    import sys

    run_name, _ = _run(demo_expected, "transformer")
    code = f"""
import sys
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.cache.worker import WorkerPool
from profscope.storage import LogDir
ws = Workspace(LogDir({str(demo_logdir)!r}), DiskCache({str(tmp_path / "cache")!r}, workers=WorkerPool(enabled=True)))
assert "profscope.tools.memory_viewer" not in sys.modules
rows = ws.module_peaks(ws.run({run_name!r}))
assert rows and not any("error" in r for r in rows), rows
print(ws.cache.workers.stats["runs"], "profscope.tools.memory_viewer" in sys.modules)
"""
    cold = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert cold.returncode == 0, cold.stderr
    runs, imported = cold.stdout.split()
    assert int(runs) >= 1 and imported == "True"  # converted in a worker, imported here first
    warm = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.split() == ["0", "False"]
