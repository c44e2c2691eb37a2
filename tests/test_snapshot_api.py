"""PyTorch memory snapshot runs through the API: devices as hosts, the views, safety."""

from __future__ import annotations

import os
import pickle
import shutil

import pytest

FIXTURE = "Wedsonlin_assignment2-systems/medium_128_{}_memory_snapshot.pickle"


@pytest.fixture
def snapshot_client(make_client, tmp_path, shared_fixtures):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    for name in ("training", "inference"):
        shutil.copy(shared_fixtures / "torch_snapshots" / FIXTURE.format(name), logdir / f"{name}.pickle")
    return make_client(logdir), logdir


def _view(client, view, run="training.pickle", **params):
    return client.get(f"/api/snapshot/{view}", params={"run": run, **params})


def test_devices_are_the_hosts(snapshot_client):
    client, _ = snapshot_client
    assert client.get("/data/plugin/profile/hosts", params={"run": "training.pickle"}).json() == [{"hostname": "cuda:0"}]
    assert client.get("/api/run", params={"run": "training.pickle"}).json()["hosts"] == ["cuda:0"]
    # XProf's data API answers a snapshot run in XProf's memory_profile schema, keyed by
    # the host (device), with the overview's peak (the overview itself is on /api).
    assert client.get("/data/plugin/profile/run_tools", params={"run": "training.pickle"}).json() == ["memory_profile"]
    data = client.get("/data/plugin/profile/data", params={"run": "training.pickle", "tag": "memory_profile", "host": "cuda:0"}).json()
    assert data["memoryIds"] == ["cuda:0"]
    peak = data["memoryProfilePerAllocator"]["cuda:0"]["profileSummary"]["peakStats"]
    assert int(peak["heapAllocatedBytes"]) == _view(client, "overview").json()["summary"]["peak"]["bytes"]


def test_views_agree_with_each_other(snapshot_client):
    """The training fixture's peak of requested bytes is 7,013,335,044 (fixture README)."""
    client, _ = snapshot_client
    summary = _view(client, "overview").json()["summary"]
    assert summary["peak"]["bytes"] == 7_013_335_044
    final = _view(client, "state").json()  # no event: the final state
    assert final["totalEvents"] == summary["traceEntries"]
    assert final["totals"]["activeBytes"] == summary["finalActiveBytes"]
    timeline = _view(client, "timeline").json()
    assert max(timeline["total"]["bytes"]) == summary["peak"]["bytes"]
    stacks = _view(client, "stacks").json()
    assert stacks["ids"] and len(stacks["ids"]) == len(stacks["parents"]) == len(stacks["values"])
    assert _view(client, "stack", stack=1).json()["frames"]
    diff = _view(client, "compare", other="inference.pickle").json()
    assert diff["summary"]["onlyA"]["bytes"] > 0 and diff["sites"]
    same = _view(client, "compare", other="training.pickle").json()
    assert same["sites"] == [] and same["summary"]["deltaBytes"] == 0


@pytest.mark.parametrize(
    "view, params, status",
    [("nope", {}, 404), ("state", {"event": "99999999"}, 400), ("state", {"event": "x"}, 400),
     ("timeline", {"host": "cuda:7"}, 404), ("compare", {"other": "nope.pickle"}, 404)],
)
def test_bad_view_requests(snapshot_client, view, params, status):
    client, _ = snapshot_client
    res = _view(client, view, **params)
    assert res.status_code == status and res.json()["ok"] is False


class _Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def test_a_pickle_that_asks_for_a_global_is_refused_and_nothing_runs(make_client, tmp_path):
    marker = str(tmp_path / "pwned-by-snapshot")
    logdir = tmp_path / "logs"
    logdir.mkdir()
    (logdir / "evil.pickle").write_bytes(pickle.dumps({"segments": [], "device_traces": [[_Evil(marker)]]}))
    (logdir / "cut.pickle").write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]})[:-5])
    client = make_client(logdir)
    res = _view(client, "overview", run="evil.pickle")
    assert res.status_code == 422 and "refused" in res.json()["error"] and res.json()["file"].endswith("evil.pickle")
    assert not os.path.exists(marker)
    res = _view(client, "overview", run="cut.pickle")
    assert res.status_code == 422 and res.json()["file"].endswith("cut.pickle")
    # Other runs in the same log directory are undisturbed.
    assert client.get("/data/plugin/profile/runs").status_code == 200


def test_a_snapshot_is_parsed_once_per_cache(tmp_path, shared_fixtures, monkeypatch):
    """A second server on the same cache folder reads the saved columns: the pickle is
    not parsed again (load_snapshot would fail here)."""
    import shutil

    from fastapi.testclient import TestClient

    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.formats import snapshot_pickle as fmt
    from profscope.server import create_app
    from profscope.storage import LogDir

    name = "medium_128_training_memory_snapshot.pickle"
    (tmp_path / "logs").mkdir()
    shutil.copy(shared_fixtures / "torch_snapshots/Wedsonlin_assignment2-systems" / name, tmp_path / "logs" / name)

    def client():
        return TestClient(create_app(Workspace(LogDir(str(tmp_path / "logs")), DiskCache(tmp_path / "cache"))))

    first = client().get("/api/snapshot/stacks", params={"run": name, "event": 100})
    assert first.status_code == 200

    def refuse(*a, **k):
        raise AssertionError("the pickle was parsed again")

    monkeypatch.setattr(fmt, "load_snapshot", refuse)
    again = client().get("/api/snapshot/stacks", params={"run": name, "event": 101})
    assert again.status_code == 200, again.text
    assert again.json()["event"] == 101
