"""A snapshot's derived device columns (tools/memory_profile_snapshot.py ``_Dev``) saved
beside its model in the cache folder and read back by the next process: what is read back
is what a fresh derivation gives, column for column, on the real snapshots and the
builders, and the app's next worker takes it instead of deriving again (issue 40: the
page's overview and timeline are two workers, each derived ~2 s of a 1 GB snapshot)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson
import pytest

from profscope.app.queries import SnapshotQuery
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.formats import snapshot_pickle as sp
from profscope.model.snapshot import load_model, save_model
from profscope.storage import LogDir
from profscope.testing import torch_snapshot as b
from profscope.tools import memory_profile_snapshot as m


def _fixtures(shared_fixtures) -> list[Path]:
    out = [shared_fixtures / "torch_snapshots" / f for f in b.FIXTURE_FILES]
    out += sorted(p for p in (shared_fixtures / "public_profiles" / "snapshots").glob("*.pickle")
                  if p.read_bytes()[:1] == b"\x80")
    return out


def _snapshots(shared_fixtures):
    for p in _fixtures(shared_fixtures):
        yield str(p), sp.load_snapshot(p.read_bytes(), str(p))
    for name in ("expandable_oom_multidevice", "ring_buffer", "legacy_2023", "segment_freed_mid_trace"):
        yield name, sp.load_snapshot(b.to_pickle(getattr(b, name)()), f"{name}.pickle")


def _differ(a: m._Dev, c: m._Dev) -> list[str]:
    out = []
    for k in sorted(set(vars(a)) | set(vars(c))):
        x, y = getattr(a, k, None), getattr(c, k, None)
        if k == "trace":
            same = (x is None) == (y is None)
        elif isinstance(x, np.ndarray):
            same = isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y)
        else:
            same = type(x) is type(y) and x == y
        if not same:
            out.append(k)
    return out


def test_read_back_equals_a_fresh_derivation(shared_fixtures, tmp_path):
    seen = 0
    for i, (name, snap) in enumerate(_snapshots(shared_fixtures)):
        folder = tmp_path / str(i)
        folder.mkdir()
        save_model(snap, folder)
        for d in snap.devices:
            m.save_derived(snap, d, folder)
        again = load_model(folder)
        m.load_derived(again, folder)
        for d in snap.devices:
            read = m._cache(again).get(("dev", d))
            assert read is not None, (name, d)
            assert _differ(m._Dev(again, d), read) == [], (name, d)
            assert m.overview(again, d) == m.overview(snap, d), (name, d)
            assert m.timeline(again, d) == m.timeline(snap, d), (name, d)
            seen += 1
    assert seen >= 10


def test_columns_that_do_not_fit_the_trace_are_refused(tmp_path):
    snap = sp.load_snapshot(b.to_pickle(b.ring_buffer()), "r.pickle")
    save_model(snap, tmp_path)
    d = snap.devices[0]
    m.save_derived(snap, d, tmp_path)
    total = np.load(tmp_path / f"dev{d}_total.npy")
    np.save(tmp_path / f"dev{d}_total.npy", total[:-1])
    with pytest.raises(ValueError, match="do not match"):
        m.load_derived(load_model(tmp_path), tmp_path)


def test_the_next_worker_reads_the_first_views_derivation(tmp_path, monkeypatch):
    """The overview's worker parses the file and saves the device's derived columns with
    the model; the timeline's worker (a fresh process) reads them instead of deriving."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "oom.pickle").write_bytes(b.to_pickle(b.expandable_oom_multidevice()))
    ws = Workspace(LogDir(str(tmp_path / "logs")), DiskCache(tmp_path / "cache"))
    run = ws.runs()[0]
    ov = orjson.loads(gzip.decompress(ws.snapshot_view(run, "overview", SnapshotQuery())))
    derived = list((tmp_path / "cache").rglob("dev*_total.npy"))
    assert len(derived) == 1, derived
    snap = load_model(derived[0].parent)
    expected = m.timeline(snap, ov["device"])

    def no_derivation(*a):
        raise AssertionError("derived again")

    monkeypatch.setattr(m._Dev, "__init__", no_derivation)  # the forked worker inherits it
    ws2 = Workspace(LogDir(str(tmp_path / "logs")), DiskCache(tmp_path / "cache"))
    got = orjson.loads(gzip.decompress(ws2.snapshot_view(ws2.runs()[0], "timeline", SnapshotQuery())))
    assert got == orjson.loads(orjson.dumps(expected, option=orjson.OPT_SERIALIZE_NUMPY))


def _random_trace(seed: int, n: int = 3000) -> dict:
    """Allocations reusing a few addresses, several ``free_requested`` in one allocation's
    life, frees of blocks allocated before the trace (once per address, first), and
    allocations still open at the end."""
    rng = np.random.default_rng(seed)
    addrs = [0x200000 + 512 * k for k in range(40)]
    state = {a: "unseen" for a in addrs}  # unseen, open, closed
    tr = []
    while len(tr) < n:
        a = addrs[int(rng.integers(len(addrs)))]
        size = int(rng.integers(1, 4096))
        if state[a] == "open":
            act = "free_requested" if rng.random() < 0.5 else "free_completed"
        elif state[a] == "unseen" and rng.random() < 0.3:
            act = "free_completed"  # allocated before recording began
        else:
            act = "free_requested" if rng.random() < 0.2 else "alloc"
        tr.append(b.entry(act, a, size, len(tr)))
        if act == "alloc":
            state[a] = "open"
        elif act == "free_completed":
            state[a] = "closed"
    return {"segments": [], "device_traces": [tr]}


def _walk(tr: list[dict]) -> tuple[set, dict]:
    """The allocations of a trace by a plain walk: an alloc lives until the next
    alloc/free at its address, a free with none open there was allocated before the
    trace; an allocation's pending_since is the first free_requested inside its life."""
    rows, open_ = {}, {}
    for i, e in enumerate(tr):
        a = e["addr"]
        if e["action"] == "alloc":
            if a in open_:
                rows[open_[a]] = rows[open_[a]][:1] + (i,) + rows[open_[a]][2:]
            open_[a] = (i, a)
            rows[(i, a)] = (i, len(tr), a, e["size"])
        elif e["action"] == "free_completed":
            if a in open_:
                k = open_.pop(a)
                rows[k] = (rows[k][0], i, a, rows[k][3])
            else:
                rows[(-1 - i, a)] = (-1, i, a, e["size"])
    pending = {}
    for r in rows.values():
        s, end, a = r[0], r[1], r[2]
        fr = [i for i in range(max(s + 1, 0), end) if tr[i]["action"] == "free_requested" and tr[i]["addr"] == a]
        pending[r] = fr[0] if fr else -2
    return set(rows.values()), pending


@pytest.mark.parametrize("seed", range(6))
def test_derivation_equals_a_plain_walk(seed):
    d = _random_trace(seed)
    snap = sp.load_snapshot(b.to_pickle(d), "r.pickle")
    dv = m._Dev(snap, snap.devices[0])
    got = list(zip(dv.start.tolist(), dv.end.tolist(), dv.addr.tolist(), dv.size.tolist()))
    rows, pending = _walk(d["device_traces"][0])
    assert sorted(got) == sorted(rows)
    assert {r: p for r, p in zip(got, dv.pending_since.tolist())} == pending
    assert sum(1 for p in pending.values() if p >= 0) > 20
