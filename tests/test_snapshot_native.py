"""profscope.formats._pickle_scan: the one-pass native snapshot reader gives the tree
reader's model, column for column and table for table, and leaves everything unusual
(refused, broken or merely odd pickles) to the tree reader, which names the file."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from profscope.errors import BadInput
from profscope.formats import snapshot_pickle as sp
from profscope.model.gc_pause import gc_paused
from profscope.model.snapshot import Snapshot
from profscope.testing import torch_snapshot as b

pytestmark = pytest.mark.skipif(sp._native is None, reason="the native reader is not built")

ROOT = Path(__file__).resolve().parents[1]


def _diff(a: Snapshot, c: Snapshot) -> list[str]:
    """The fields where two models differ (arrays: dtype and every value)."""
    out = []

    def same(x, y) -> bool:
        if isinstance(x, np.ndarray):
            return isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
        return type(x) is type(y) and x == y

    for f in fields(Snapshot):
        x, y = getattr(a, f.name), getattr(c, f.name)
        if f.name == "traces":
            if len(x) != len(y):
                out.append("traces")
            for i, (p, q) in enumerate(zip(x, y)):
                out += [f"traces[{i}].{g.name}" for g in fields(p) if not same(getattr(p, g.name), getattr(q, g.name))]
        elif f.name in ("segments", "blocks"):
            out += [f"{f.name}.{g.name}" for g in fields(x) if not same(getattr(x, g.name), getattr(y, g.name))]
        elif not same(x, y):
            out.append(f.name)
    return out


def native(data: bytes, name: str = "n.pickle", chunk: int | None = None, monkeypatch=None) -> Snapshot:
    """The native reader alone (an error where it would leave the file to the others)."""
    if chunk is not None:
        monkeypatch.setattr(sp, "NATIVE_CHUNK", chunk)
    kind, payload = sp._decode_container(data, name)
    with gc_paused():
        return sp._native_read(io.BytesIO(payload), name, None, len(payload), "pickle" if kind == "pickle" else kind)


def tree(data: bytes, name: str = "n.pickle") -> Snapshot:
    return sp.load_snapshot(data, name, streaming=False)


def _fixtures(shared_fixtures) -> list[Path]:
    out = [shared_fixtures / "torch_snapshots" / f for f in b.FIXTURE_FILES]
    out += sorted(p for p in (shared_fixtures / "public_profiles" / "snapshots").glob("*.pickle")
                  if p.read_bytes()[:1] == b"\x80")
    return out


def test_real_fixtures_identical(shared_fixtures):
    files = _fixtures(shared_fixtures)
    assert len(files) >= 7
    for p in files:
        data = p.read_bytes()
        a, c = tree(data, str(p)), native(data, str(p))
        assert _diff(a, c) == [], p
        assert sum(len(t) for t in c.traces) == sum(len(t) for t in a.traces) > 0, p


def test_real_fixtures_through_load_snapshot_from_files(shared_fixtures):
    """load_snapshot on an open file takes the native reader (the default) and gives the
    same model; PROFSCOPE_NATIVE=0 turns it off."""
    for p in _fixtures(shared_fixtures):
        with p.open("rb") as f:
            c = sp.load_snapshot(f, str(p))
        assert _diff(tree(p.read_bytes(), str(p)), c) == [], p


def test_native_switch(monkeypatch):
    monkeypatch.delenv("PROFSCOPE_NATIVE", raising=False)
    assert sp.native_enabled()
    monkeypatch.setenv("PROFSCOPE_NATIVE", "0")
    assert not sp.native_enabled()
    called = []
    monkeypatch.setattr(sp, "_native_read", lambda *a: called.append(a))
    sp.load_snapshot(b.to_pickle(b.ring_buffer()), "x.pickle")
    assert called == []


def _builders():
    for name in ("expandable_oom_multidevice", "ring_buffer", "legacy_2023"):
        d = getattr(b, name)()
        for protocol in (2, 3, 4, 5):
            yield f"{name}/p{protocol}", b.to_pickle(d, protocol)
        yield f"{name}/html", b.to_memory_viz_html(d)


@pytest.mark.parametrize("name,data", list(_builders()))
def test_builders_every_protocol_and_html(name, data):
    assert _diff(tree(data, name), native(data, name)) == [], name


def _many_entries(n=3500, devices=2) -> dict:
    """Several APPENDS batches and devices, tracebacks shared by list and by frames,
    distinct compile_context / user_metadata strings appearing device by device (the
    tree reader interns new ones in the order of a set), an oom, missing keys."""
    sites = [[{"filename": f"m{k}.py", "line": j, "name": f"f{j}"} for j in range(k + 3)] for k in range(7)]
    shared = sites[3]
    traces = []
    for dev in range(devices):
        entries = []
        for i in range(n):
            fr = shared if i % 5 == 0 else list(sites[i % 7])  # one list object, or a new list of shared frames
            e = {"action": ("alloc", "free_requested", "free_completed")[i % 3],
                 "addr": 0x7F0000000000 + 512 * (i // 3) + dev, "size": 512 * (1 + i % 7),
                 "stream": i % 2, "time_us": 1_700_000_000_000_000 + i, "frames": fr,
                 "compile_context": f"cc{(i * 7 + dev) % 23}", "user_metadata": "" if i % 11 else f"tag{i % 13}"}
            if i % 17 == 0:
                del e["compile_context"], e["time_us"]
            if i % 19 == 0:
                e["frames"] = []
            if i % 29 == 0:
                e["frames"] = None
            if i == 1234:
                e.update(action="oom", device_free=123 << 20)
            entries.append(e)
        traces.append(entries)
    d = b.ring_buffer()
    d["device_traces"] = traces
    return d


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_many_entries_memo_sharing_every_protocol(protocol):
    data = pickle.dumps(_many_entries(), protocol=protocol)
    a, c = tree(data), native(data)
    assert _diff(a, c) == []
    assert len(a.oom_events) == 2 and len(set(a.strings)) == len(a.strings)


def test_pieces_of_any_size(monkeypatch):
    """The bytes come in pieces: an opcode or entry cut at a piece's end waits for the next."""
    data = pickle.dumps(_many_entries(400), protocol=4)
    want = tree(data)
    for chunk in (1, 2, 7, 64, 1000):
        assert _diff(want, native(data, chunk=chunk, monkeypatch=monkeypatch)) == [], chunk


def test_entries_the_fast_path_leaves_to_the_opcode_loop():
    """Entries fast_entry does not read (a float or a tuple under another key, a frame
    dict written inside the traceback, a new string under a long key) go through the
    opcode loop and entry_row: same rows."""
    d = _many_entries(300, 1)
    for i, e in enumerate(d["device_traces"][0]):
        if i % 3 == 0:
            e["weight"] = 0.5
        if i % 4 == 0:
            e["frames"] = [{"filename": f"new{i}.py", "line": i, "name": "g"}] + list(e["frames"] or [])
        if i % 5 == 0:
            e["x" * 300] = "y" * 300
    data = pickle.dumps(d, protocol=4)
    a, c = tree(data), native(data)
    assert _diff(a, c) == []
    assert "weight" in c.era_keys["trace_entry"]


def test_generated_big_snapshot_shape(tmp_path):
    """scripts/make_big_snapshot.py's synthetic snapshot (the benchmark's input), small."""
    out = tmp_path / "big.pickle"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_big_snapshot.py"), str(out), "--target-mb", "2"],
                   check=True, stdout=subprocess.DEVNULL)
    data = out.read_bytes()
    assert _diff(tree(data), native(data)) == []


def test_gzip_file(tmp_path):
    data = pickle.dumps(_many_entries(500), protocol=4)
    p = tmp_path / "s.pickle.gz"
    p.write_bytes(gzip.compress(data))
    with p.open("rb") as f:
        c = sp.load_snapshot(f, str(p))
    assert _diff(tree(data, str(p)), c) == []


# -- what the native reader leaves to the tree reader -----------------------------------


def _unusual(data: bytes) -> None:
    with pytest.raises((sp._native.Unusual, sp._Fallback, BadInput)):
        native(data)


def test_a_global_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    for protocol in (2, 4, 5):
        data = pickle.dumps({"segments": [], "device_traces": [[Evil()]]}, protocol=protocol)
        _unusual(data)
        with pytest.raises(BadInput, match=r"evil\.pickle: refused: the pickle asks for global") as e:
            sp.load_snapshot(data, "evil.pickle")
        assert e.value.file == "evil.pickle"
        path = tmp_path / "evil.pickle"
        path.write_bytes(data)
        with path.open("rb") as f, pytest.raises(BadInput, match="refused"):
            sp.load_snapshot(f, str(path))
    stack_global = b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85R."
    _unusual(stack_global)
    with pytest.raises(BadInput, match="refused"):
        sp.load_snapshot(stack_global, "evil.pickle")
    assert not marker.exists()


def test_truncated_pickles_name_the_file(tmp_path):
    data = pickle.dumps(_many_entries(200, 1), protocol=4)
    for cut in (3, 100, len(data) // 3, len(data) // 2, len(data) - 1):
        _unusual(data[:cut])
        p = tmp_path / "cut.pickle"
        p.write_bytes(data[:cut])
        with p.open("rb") as f, pytest.raises(BadInput, match=r"cut\.pickle: (truncated|not a snapshot)") as e:
            sp.load_snapshot(f, str(p))
        assert e.value.file == str(p)


def test_unknown_actions_keep_the_tree_readers_order():
    """An action torch may add later gets the next code; the tree reader converts the
    device where it first appears entry by entry (traceback, then strings, per entry) and
    later devices column by column: the tables come out in the same order."""
    d = _many_entries(600, 3)
    d["device_traces"][0][5]["action"] = "mystery"  # device 0: checked, then known
    d["device_traces"][1][9]["action"] = "mystery"  # device 1: known, fast
    d["device_traces"][2][400]["action"] = "another"  # device 2: checked again
    for dev, tr in enumerate(d["device_traces"]):
        for i, e in enumerate(tr):
            e["compile_context"] = f"d{dev} c{(i * 5) % 31}"
            e["user_metadata"] = f"u{(i * 3) % 17}"
            if i % 7 == 0:
                e["frames"] = [{"filename": f"d{dev}.py", "line": i % 13, "name": "h"}]
    data = pickle.dumps(d, protocol=4)
    a, c = tree(data), native(data)
    assert a.action_names[-2:] == ["mystery", "another"]
    assert _diff(a, c) == []


def test_a_traceback_that_grows_after_use_is_left_to_the_tree_reader():
    """A trace list used as its own entries' frames (a pickle refers to it while it is
    being filled): the tree reader sees it full, so the scanner, which saw it empty,
    hands the file over."""
    lst: list = []
    d = {"segments": [], "device_traces": [lst]}
    for i in range(3):
        lst.append({"action": "alloc", "addr": i, "size": 1, "frames": lst})
    data = pickle.dumps(d, protocol=4)
    _unusual(data)
    assert _diff(tree(data), sp.load_snapshot(data, "n.pickle")) == []
    assert tree(data).stacks[-1] == (0, 0, 0)


@pytest.mark.parametrize("where", ["twice in device_traces", "as blocks too", "under another key"])
def test_a_trace_list_found_elsewhere_is_left_to_the_tree_reader(where):
    d = _many_entries(30, 1)
    lst = d["device_traces"][0]
    if where == "twice in device_traces":
        d["device_traces"].append(lst)
    elif where == "as blocks too":
        d["segments"][0]["blocks"] = lst
    else:
        d["extra"] = lst
    data = pickle.dumps(d, protocol=4)
    _unusual(data)
    try:
        want = tree(data)
    except BadInput:
        with pytest.raises(BadInput):
            sp.load_snapshot(data, "n.pickle")
        return
    assert _diff(want, sp.load_snapshot(data, "n.pickle")) == []


def test_empty_tracebacks_share_one_list():
    d = _many_entries(200, 2)
    for e in d["device_traces"][0][::3]:
        e["frames"] = []  # a new empty list each time, as torch writes an entry without frames
    data = pickle.dumps(d, protocol=4)
    assert _diff(tree(data), native(data)) == []


@pytest.mark.parametrize("case", ["float addr", "entry shared", "bool size", "set",
                                  "tuple of three", "trailing data", "huge int"])
def test_unusual_files_get_the_tree_readers_answer(case):
    d = _many_entries(50, 2)
    e = d["device_traces"][0][7]
    if case == "float addr":
        e["addr"] = 1.5
    elif case == "entry shared":
        d["device_traces"][1] = d["device_traces"][0][:10]
    elif case == "bool size":
        e["size"] = True
    elif case == "set":
        d["allocator_settings"] = {"x": {1, 2}}
    elif case == "tuple of three":
        d["segments"][0]["segment_pool_id"] = (1, 2, 3)
    elif case == "huge int":
        e["addr"] = 2**70 + 5
    data = pickle.dumps(d, protocol=4)
    if case == "trailing data":
        data += b"junk"
    _unusual(data)
    try:
        want = tree(data, "u.pickle")
    except BadInput as err:
        with pytest.raises(BadInput, match=str(err).split(":")[0]):
            sp.load_snapshot(data, "u.pickle")
        return
    assert _diff(want, sp.load_snapshot(data, "u.pickle")) == []
