"""The all-hosts memory view (``GET /api/memory_hosts``, tools/memory_hosts.py) on a
multi-host session made of real, different profiles, no mocks: the demo's TF CPU profile
with BFC allocator events, a JAX ROCm MI300 profile and a JAX TPU profile from
``shared/fixtures/public_profiles`` as three hosts of one session, plus the demo's JAX CPU
profile (no allocator events) as a fourth. Every number of the roll-up is checked against
each host's own memory profile answer (``data?tag=memory_profile&host=``)."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pytest

from profscope.tools import memory_hosts

DEMO = Path(__file__).resolve().parents[1] / "src" / "profscope" / "demo" / "logdir"


def build_multi_host(root: Path, shared: Path, *, corrupt: bool = False) -> str:
    """``root/multi/plugins/profile/s/<host>.xplane.pb`` from real profiles; the run's name."""
    public = shared / "public_profiles" / "xplane"
    session = root / "multi" / "plugins" / "profile" / "s"
    session.mkdir(parents=True)
    sources = {
        "host01": next(DEMO.glob("tf_bfc/plugins/profile/*/vm.xplane.pb")),  # TF CPU, BFC allocator
        "host02": next(public.glob("mi300_jax08_gemm/plugins/profile/*/tw003.xplane.pb")),  # ROCm GPU
        "host03": next(public.glob("tpu_inference/plugins/profile/*/tpu_inference_2.xplane.pb")),  # 4 TPU devices
        "host04": next(DEMO.glob("mlp/plugins/profile/*/demo-host.xplane.pb")),  # JAX CPU: no allocator events
    }
    if corrupt:  # every byte >= 0x80 became U+FFFD upstream: the reader refuses it
        sources["host05"] = next(public.glob("tpu_inference_corrupt/plugins/profile/*/tpu_inference_2.xplane.pb"))
    for host, src in sources.items():
        shutil.copyfile(src, session / f"{host}.xplane.pb")
    return "multi/s"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory, shared_fixtures):
    root = tmp_path_factory.mktemp("hosts")
    return root, build_multi_host(root, shared_fixtures)


def _own_peak(mp: dict) -> tuple[str, int, int, int | None]:
    """(allocator, stack + heap at its peak, peak time ps, capacity) of the allocator with
    the highest peak, read straight from XProf's profileSummary."""
    rows = []
    for mid, a in mp["memoryProfilePerAllocator"].items():
        s = a["profileSummary"]
        peak = int(s["peakStats"]["stackReservedBytes"]) + int(s["peakStats"]["heapAllocatedBytes"])
        rows.append((mid, peak, int(s["peakStatsTimePs"]), int(s["memoryCapacity"]) or None))
    return min(rows, key=lambda r: (-r[1], r[0]))  # a tie (TPU devices 1 and 2) to the first name


def test_rollup_matches_each_hosts_memory_profile(make_client, logdir):
    root, run = logdir
    client = make_client(root)
    res = client.get("/api/memory_hosts", params={"run": run})
    assert res.status_code == 200, res.text
    body = res.json()
    rows = {r["host"]: r for r in body["hosts"]}
    assert set(rows) == {"host01", "host02", "host03", "host04"}
    own = {}
    for host in ("host01", "host02", "host03"):
        mp = client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_profile", "host": host}).json()
        mid, peak, t, cap = own[host] = _own_peak(mp)
        r = rows[host]
        assert r["status"] == "ok" and r["peakMeasure"] == "peak allocated"
        assert (r["memoryId"], r["peakBytes"], r["peakTimePs"], r["capacityBytes"]) == (mid, peak, t, cap)
        assert r["allocators"] == len(mp["memoryProfilePerAllocator"])
        assert r["utilization"] == pytest.approx(peak / cap)
        # profscope's own summary of that allocator says the same peak
        assert mp["profscope"]["allocators"][mid]["summary"]["peakBytes"] == peak
        assert r["lifetimePeakBytes"] == mp["profscope"]["allocators"][mid]["summary"]["lifetimePeakBytes"]
    # The real files' peaks differ: the TPU host is the worst, the TF CPU one the lowest.
    assert own["host03"][1] > own["host02"][1] > own["host01"][1]
    assert [r["host"] for r in body["hosts"]] == ["host03", "host02", "host01", "host04"]
    assert rows["host03"]["peakBytes"] == 21_492_671_104 and rows["host03"]["memoryId"] == "1"
    peaks = [own[h][1] for h in ("host03", "host02", "host01")]
    roll = body["rollup"]
    assert roll["worstHost"] == "host03" and roll["hosts"] == 3
    assert (roll["maxBytes"], roll["minBytes"], roll["medianBytes"]) == (max(peaks), min(peaks), statistics.median(peaks))
    assert roll["meanBytes"] == pytest.approx(sum(peaks) / 3)
    assert roll["imbalance"] == pytest.approx((max(peaks) - min(peaks)) / max(peaks))
    assert roll["maxOverMedian"] == pytest.approx(max(peaks) / statistics.median(peaks))
    assert rows["host01"]["shareOfWorst"] == pytest.approx(peaks[2] / peaks[0])
    # The JAX CPU profile is listed with its reason, not dropped.
    assert rows["host04"]["status"] == "noAllocatorEvents"
    assert "no allocator events" in rows["host04"]["reason"]
    mp4 = client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_profile", "host": "host04"}).json()
    assert not mp4.get("memoryProfilePerAllocator")
    # Warm: the same answer from the per-host entries.
    assert client.get("/api/memory_hosts", params={"run": run}).json() == body


def test_a_hosts_conversion_error_is_its_row(make_client, tmp_path, shared_fixtures):
    run = build_multi_host(tmp_path / "log", shared_fixtures, corrupt=True)
    client = make_client(tmp_path / "log")
    body = client.get("/api/memory_hosts", params={"run": run}).json()
    rows = {r["host"]: r for r in body["hosts"]}
    assert rows["host05"]["status"] == "error"
    assert "truncated" in rows["host05"]["reason"] and rows["host05"]["file"].endswith("host05.xplane.pb")
    assert [r["host"] for r in body["hosts"]][:3] == ["host03", "host02", "host01"]
    assert body["rollup"]["hosts"] == 3 and body["rollup"]["worstHost"] == "host03"
    # asked again, the remembered failure is the same row
    assert client.get("/api/memory_hosts", params={"run": run}).json() == body


def test_refusals_have_the_one_error_shape(demo_client):
    for params, status in (({"run": "nope"}, 404), ({}, 400)):
        res = demo_client.get("/api/memory_hosts", params=params)
        assert res.status_code == status
        assert set(res.json()) == {"ok", "status", "error", "file"}
    trace = next(r["name"] for r in demo_client.get("/api/runs").json()["runs"] if r["kind"] == "chrome_trace")
    res = demo_client.get("/api/memory_hosts", params={"run": trace})
    assert res.status_code == 404 and "profile run" in res.json()["error"]


def test_rollup_without_any_peak():
    out = memory_hosts.memory_hosts([memory_hosts.error_row("a", "bad file"),
                                     memory_hosts.host_summary("b", {"profscope": {}})])
    assert out["rollup"]["hosts"] == 0 and out["rollup"]["worstHost"] is None and out["rollup"]["imbalance"] is None
    assert [r["status"] for r in out["hosts"]] == ["error", "noAllocatorEvents"]
    assert "no /host:CPU plane" in out["hosts"][1]["reason"]


def test_one_hosts_corrupt_file_leaves_the_other_hosts_readable(make_client, tmp_path, shared_fixtures):
    """Every page of a run reads its module list; one host's unreadable xplane is that
    host's 422 only, not the whole run's (it was: host01's memory profile answered host05's
    error)."""
    run = build_multi_host(tmp_path / "log", shared_fixtures, corrupt=True)
    client = make_client(tmp_path / "log")
    detail = client.get("/api/run", params={"run": run})
    assert detail.status_code == 200, detail.text
    assert "memory_viewer" in [t["name"] for t in detail.json()["tools"]] and detail.json()["modules"]
    assert client.get("/data/plugin/profile/run_tools", params={"run": run}).status_code == 200
    for host in ("host01", "host03"):
        res = client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_profile", "host": host})
        assert res.status_code == 200, (host, res.text)
    bad = client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_profile", "host": "host05"})
    assert bad.status_code == 422 and bad.json()["file"].endswith("host05.xplane.pb")
    module = detail.json()["modules"][0]
    bad = client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_viewer", "host": "host05",
                                                           "module_name": module})
    assert bad.status_code == 422 and "host05.xplane.pb" in bad.json()["file"]


def test_the_rows_are_made_in_several_workers_at_once(tmp_path, shared_fixtures):
    """Without a cluster the rows not cached yet are made in the conversion workers, on
    all their slots but one (Workspace.fan_out): with 3 slots two hosts convert at once
    (seen in the pool's own count of running children), into the rows a 2-slot server
    makes one after another; the corrupt host is still its own error row."""
    import threading
    import time

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.storage import LogDir

    name = build_multi_host(tmp_path / "log", shared_fixtures, corrupt=True)

    def rows(slots: int) -> tuple[dict, int]:
        ws = Workspace(LogDir(str(tmp_path / "log")), DiskCache(tmp_path / f"cache{slots}", workers=WorkerPool(concurrency=slots)))
        most, stop = [0], threading.Event()

        def watch():
            while not stop.is_set():
                most[0] = max(most[0], ws.cache.workers.stats["running"])
                time.sleep(0.002)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            body = ws.memory_hosts(ws.run(name))
        finally:
            stop.set()
            watcher.join()
        assert ws.cache.workers.stats["runs"] == 5  # one worker per host either way
        return body, most[0]

    one_by_one, most = rows(2)
    assert most == 1
    at_once, most = rows(3)
    assert most == 2
    assert at_once == one_by_one
    assert {r["host"]: r["status"] for r in at_once["hosts"]}["host05"] == "error"


def test_oom_risk_of_the_run_forks_a_worker_per_host_only_for_big_hosts(tmp_path, shared_fixtures, monkeypatch):
    """OOM risk of a whole run assesses every host: serially in one worker, inline. Its
    hosts go to a worker each, several at once, only when they are big enough to
    outweigh the forks (workspace.FORK_WORTH_BYTES; these real hosts are 0.1-0.9 MB, so
    the threshold is lowered to see that path). Same answer either way."""
    import gzip

    import orjson

    from profscope.app import workspace
    from profscope.app.queries import OomRiskQuery
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.storage import LogDir
    from profscope.app import tool_table

    name = build_multi_host(tmp_path / "log", shared_fixtures)

    def oom(cache: str) -> tuple[dict, int]:
        ws = workspace.Workspace(LogDir(str(tmp_path / "log")), DiskCache(tmp_path / cache, workers=WorkerPool(concurrency=3)))
        body = orjson.loads(gzip.decompress(ws.tool_data(ws.run(name), tool_table.get("oom_risk"), OomRiskQuery())))
        return body, ws.cache.workers.stats["runs"]

    small, forks = oom("small")
    assert forks == 1
    monkeypatch.setattr(workspace, "FORK_WORTH_BYTES", 0)
    big, forks = oom("big")
    assert forks == 1 + 4
    assert big == small and len(big["hosts"]) == 4
