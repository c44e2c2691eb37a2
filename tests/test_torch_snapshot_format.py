"""profscope.formats.snapshot_pickle: safe loading of every snapshot era into columns."""

from __future__ import annotations

import collections
import gzip
import io
import json
import os
import pickle
import random

import numpy as np
import pytest

from profscope.errors import BadInput
from profscope.formats.snapshot_pickle import load_snapshot
from profscope.testing import torch_snapshot as b

FILES = b.FIXTURE_FILES


class PlainRestricted(pickle.Unpickler):
    """The test's own, independent restricted unpickler."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("pid")


def plain(data: bytes):
    return PlainRestricted(io.BytesIO(data)).load()


@pytest.fixture(scope="module")
def snaps(shared_fixtures):
    root = shared_fixtures / "torch_snapshots"
    return {f: ((root / f).read_bytes(), load_snapshot((root / f).open("rb"), str(root / f))) for f in FILES}


@pytest.mark.parametrize("name", FILES)
def test_fixture_numbers_match_independent_count(snaps, name):
    data, s = snaps[name]
    d = plain(data)
    segs = d["segments"]
    blocks = [bl for sg in segs for bl in sg["blocks"]]
    assert len(s.segments) == len(segs) and len(s.blocks) == len(blocks)
    active = s.blocks.state == s.state_code("active_allocated")
    assert int(s.blocks.size[active].sum()) == sum(bl["size"] for bl in blocks if bl["state"] == "active_allocated")
    assert int(s.blocks.requested_size[active].sum()) == sum(
        bl["requested_size"] for bl in blocks if bl["state"] == "active_allocated")
    assert int(s.segments.total_size.sum()) == sum(sg["total_size"] for sg in segs)
    assert s.devices == sorted({sg["device"] for sg in segs} | {i for i, t in enumerate(d["device_traces"]) if t})
    assert len(s.traces) == len(d["device_traces"])
    for dev, tr in enumerate(d["device_traces"]):
        mt = s.traces[dev]
        got = collections.Counter(s.action_names[c] for c in mt.action.tolist())
        assert got == collections.Counter(e["action"] for e in tr)
        assert mt.addr.tolist() == [e["addr"] for e in tr]
        assert mt.size.tolist() == [e["size"] for e in tr]
        assert mt.time_us.tolist() == [e.get("time_us", -1) for e in tr]
        # every entry's stack round-trips through the deduplicated tables
        for i, e in enumerate(tr):
            want = [(f["filename"], f["line"], f["name"]) for f in e.get("frames", [])]
            assert s.stack_frames(int(mt.stack[i])) == want
            if "compile_context" in e:
                assert s.strings[mt.compile_context[i]] == e["compile_context"]
                assert s.strings[mt.user_metadata[i]] == e["user_metadata"]
    # block stacks and addresses (legacy: computed from the segment)
    k = 0
    for sg in segs:
        off = sg["address"]
        for bl in sg["blocks"]:
            fr = bl["frames"] if "frames" in bl else (bl["history"][0]["frames"] if bl.get("history") else [])
            assert s.stack_frames(int(s.blocks.stack[k])) == [(f["filename"], f["line"], f["name"]) for f in fr]
            assert int(s.blocks.address[k]) == bl.get("address", off)
            off += bl["size"]
            k += 1
    # deduplicated tables really are deduplicated
    frames = list(zip(s.frame_filename.tolist(), s.frame_line.tolist(), s.frame_name.tolist()))
    assert len(set(frames)) == len(frames)
    assert len(set(s.stacks)) == len(s.stacks) and s.stacks[0] == ()
    assert len(set(s.strings)) == len(s.strings)


@pytest.mark.parametrize("name", FILES)
def test_summary_json_facts(snaps, shared_fixtures, name):
    summary = json.loads((shared_fixtures / "torch_snapshots" / "summary.json").read_text())[name]
    _, s = snaps[name]
    active = s.blocks.state == s.state_code("active_allocated")
    assert len(s.segments) == summary["num_segments"]
    assert len(s.blocks) == summary["num_blocks"]
    assert int(s.segments.total_size.sum()) == summary["total_reserved_bytes(sum segment total_size)"]
    assert int(s.blocks.size[active].sum()) == summary["allocated_bytes(sum active_allocated block size)"]
    assert int(s.blocks.requested_size[active].sum()) == summary["sum_active_allocated_block_requested_size"]
    assert int(s.segments.allocated_size.sum()) == summary["sum_segment_allocated_size"]
    assert s.allocator_settings == summary.get("allocator_settings")
    for dev, facts in summary["device_traces"].items():
        tr = s.traces[int(dev)]
        assert len(tr) == facts["entries"]
        assert dict(collections.Counter(s.action_names[c] for c in tr.action.tolist())) == facts["actions"]
    states = collections.Counter(s.state_names[c] for c in s.blocks.state.tolist())
    assert dict(states) == summary["block_states"]
    types = collections.Counter(s.strings[c] for c in s.segments.segment_type.tolist())
    assert dict(types) == summary["segment_types"]


def test_eras_detected(snaps):
    assert snaps[FILES[0]][1].blocks.address_computed.all()
    assert not snaps[FILES[2]][1].blocks.address_computed.any()
    train = snaps[FILES[4]][1]
    assert len(train.external_annotations) == 2
    assert train.pickle_protocol == 4 and train.format == "pickle"
    assert (train.traces[0].time_us >= 0).all()
    assert (snaps[FILES[0]][1].traces[0].time_us == -1).all()
    assert train.segments.pool_id.tolist()[0] == [0, 0]
    assert (snaps[FILES[0]][1].segments.pool_id == -1).all()


def _same(a, c):
    assert a.strings == c.strings and a.stacks == c.stacks and a.devices == c.devices
    for f in ("frame_filename", "frame_line", "frame_name"):
        assert np.array_equal(getattr(a, f), getattr(c, f))
    for col in a.segments.__dataclass_fields__:
        assert np.array_equal(getattr(a.segments, col), getattr(c.segments, col)), col
    for col in a.blocks.__dataclass_fields__:
        assert np.array_equal(getattr(a.blocks, col), getattr(c.blocks, col)), col
    for ta, tc in zip(a.traces, c.traces, strict=True):
        for col in ta.__dataclass_fields__:
            assert np.array_equal(getattr(ta, col), getattr(tc, col)), col
    assert a.oom_events == c.oom_events and a.external_annotations == c.external_annotations
    assert a.allocator_settings == c.allocator_settings


@pytest.mark.parametrize("name", [FILES[1], FILES[4]])
def test_json_html_gzip_forms_give_the_same_model(snaps, name):
    data, s = snaps[name]
    d = plain(data)
    html = b.to_memory_viz_html(d)
    j = json.dumps(d).encode()  # tuples become lists, as a JSON export would have them
    for raw, fmt in ((j, "json"), (html, "html"), (gzip.compress(data), "pickle"),
                     (gzip.compress(html), "html"), (pickle.dumps(d, protocol=2), "pickle"),
                     (pickle.dumps(d, protocol=5), "pickle")):
        other = load_snapshot(raw, "x")
        assert other.format == fmt
        _same(s, other)


def _resolved(s):
    """A snapshot's content with string and stack ids replaced by what they name (the
    two readers intern in different orders)."""
    frame = lambda i: (s.strings[s.frame_filename[i]], int(s.frame_line[i]), s.strings[s.frame_name[i]])
    stack = lambda k: tuple(frame(i) for i in s.stacks[k])
    string = lambda i: s.strings[i] if i >= 0 else None
    out = {"devices": s.devices, "ooms": [{**o, "stack": stack(o["stack"])} for o in s.oom_events],
           "settings": s.allocator_settings, "annotations": s.external_annotations,
           "era": s.era_keys, "overflow": s.trace_overflow, "format": (s.format, s.pickle_protocol),
           "blocks": [(int(a), int(z), s.state_names[st], stack(k)) for a, z, st, k in
                      zip(s.blocks.address, s.blocks.size, s.blocks.state, s.blocks.stack)],
           "segments": [(int(a), int(z), stack(k)) for a, z, k in
                        zip(s.segments.address, s.segments.total_size, s.segments.stack)]}
    for tr in s.traces:
        stacks = {k: stack(k) for k in np.unique(tr.stack).tolist()}
        out[f"trace{tr.device}"] = [
            (s.action_names[a], ad, z, st, t, stacks[k], string(c), string(u), f)
            for a, ad, z, st, t, k, c, u, f in zip(
                tr.action.tolist(), tr.addr.tolist(), tr.size.tolist(), tr.stream.tolist(),
                tr.time_us.tolist(), tr.stack.tolist(), tr.compile_context.tolist(),
                tr.user_metadata.tolist(), tr.device_free.tolist())]
    return out


def _inputs(snaps):
    yield from ((name, data) for name, (data, _) in snaps.items())
    for name in ("expandable_oom_multidevice", "ring_buffer", "legacy_2023"):
        d = getattr(b, name)()
        for protocol in (2, 3, 4, 5):
            yield f"{name}/p{protocol}", b.to_pickle(d, protocol)
        yield f"{name}/html", b.to_memory_viz_html(d)
    # a trace longer than one APPENDS batch, ending in a lone APPEND (1000 + 1 entries)
    d = b.ring_buffer()
    d["device_traces"][0] = [b.entry("alloc", 4096 * i, 512, i, fr=({"filename": "f.py", "line": i % 7, "name": "g"},))
                             for i in range(1001)]
    yield "1001 entries", pickle.dumps(d, protocol=4)
    # Several batches (the streaming reader's own tokenizer takes batches after the
    # first), with what it must leave to the opcode reader in the middle of later ones:
    # an oom, an unknown action, a float time, a frame seen for the first time, and
    # tracebacks shared by an allocation and its frees.
    sites = [[{"filename": f"m{k}.py", "line": j, "name": f"f{j}"} for j in range(k + 3)] for k in range(5)]
    entries = []
    for i in range(3500):
        fr = sites[i % 5] if i != 3100 else sites[0] + [{"filename": "late.py", "line": 1, "name": "new"}]
        e = {"action": "alloc" if i % 3 else "free_completed", "addr": 0x7F0000000000 + 512 * (i // 3), "size": 512 * (1 + i % 7),
             "stream": i % 2, "time_us": 1_700_000_000_000_000 + i, "frames": fr,
             "compile_context": "N/A", "user_metadata": "" if i % 11 else "tag"}
        if i == 2500:
            e = {**e, "action": "oom", "device_free": 123}
        if i == 2800:
            e["action"] = "mystery_action"
        if i == 3000:
            e["time_us"] = 1.7e15
        entries.append(e)
    d = b.ring_buffer()
    d["device_traces"] = [entries, [dict(e) for e in entries[:1500]]]
    for protocol in (2, 4, 5):
        yield f"3500 entries/p{protocol}", pickle.dumps(d, protocol=protocol)


def test_streaming_reader_refuses_entries_shared_between_traces():
    """A pickle that refers back to a trace entry it already wrote (no PyTorch writes one)
    cannot be streamed: the entry was converted and dropped. The error says so."""
    d = b.ring_buffer()
    entries = [b.entry("alloc", 512 * i, 512, i) for i in range(1500)]
    d["device_traces"] = [entries, entries[:10]]
    data = pickle.dumps(d, protocol=4)
    assert len(load_snapshot(data, "shared.pickle", streaming=False).traces[1]) == 10
    with pytest.raises(BadInput, match=r"shared.pickle: .*device_traces\[1\]\[0\] refers back to an entry"):
        load_snapshot(data, "shared.pickle", streaming=True)


def test_streaming_reader_gives_the_same_snapshot(snaps):
    """The streaming reader (large files) and the C unpickler (small ones) agree on every
    real fixture and builder, in every protocol."""
    seen = 0
    for name, data in _inputs(snaps):
        a = load_snapshot(data, name, streaming=False)
        c = load_snapshot(io.BytesIO(data), name, streaming=True)
        assert _resolved(a) == _resolved(c), name
        seen += sum(len(t) for t in a.traces)
    assert seen > 20_000


# -- malicious and broken input -------------------------------------------------------


class _Reduce:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _evil_payloads(marker):
    cmd = f"touch {marker}"
    wrap = lambda x: {"segments": [], "device_traces": [[x]]}
    yield "os.system", pickle.dumps(wrap(_Reduce(os.system, (cmd,))), protocol=2)
    yield "builtins.eval", pickle.dumps(wrap(_Reduce(eval, (f"__import__('os').system({cmd!r})",))), protocol=4)
    yield "builtins.exec", pickle.dumps(_Reduce(exec, (f"open({str(marker)!r}, 'w')",)), protocol=5)
    # copyreg trick: _reconstructor builds an arbitrary class instance
    yield "copyreg._reconstructor", (
        b"\x80\x02ccopyreg\n_reconstructor\nq\x00cos\n_wrap_close\nq\x01c__builtin__\nobject\nq\x02N\x87q\x03Rq\x04.")
    # a protocol-0 style GLOBAL inside a protocol-2 pickle, and STACK_GLOBAL
    yield "posix.system", b"\x80\x02cposix\nsystem\n(X" + len(cmd).to_bytes(4, "little") + cmd.encode() + b"tR."
    yield "STACK_GLOBAL", (b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c" + bytes([len(cmd)]) + cmd.encode() + b"\x85R.")
    yield "persistent id", b"\x80\x02X\x03\x00\x00\x00abcQ."


@pytest.mark.parametrize("streaming", [False, True])
def test_malicious_pickles_are_refused_and_nothing_runs(tmp_path, streaming):
    marker = tmp_path / "pwned"
    for what, payload in _evil_payloads(marker):
        with pytest.raises(BadInput) as exc:
            load_snapshot(payload, "evil.pickle", streaming=streaming)
        msg = exc.value.message
        assert exc.value.file == "evil.pickle" and msg.startswith("evil.pickle: refused:"), msg
        if what == "persistent id":
            assert "persistent id" in msg
        else:
            assert "global" in msg and what.split(".")[-1].replace("STACK_GLOBAL", "system") in msg
        # embedded in HTML or gzip: same refusal
        import base64
        html = (b'<html><script>const local_files = [{"name": "snapshot.pickle", "base64": "'
                + base64.b64encode(payload) + b'"}]</script></html>')
        for raw in (gzip.compress(payload), html):
            with pytest.raises(BadInput, match="refused"):
                load_snapshot(raw, "evil.pickle", streaming=streaming)
        assert not marker.exists(), f"{what} ran"


@pytest.mark.parametrize("streaming", [False, True])
def test_truncated_pickles_at_many_cut_points(snaps, streaming):
    data, _ = snaps[FILES[3]]
    rng = random.Random(0)
    samples = 6 if streaming else 60  # the streaming reader is the slower one
    cuts = sorted({1, 2, 3, 10, 100, len(data) - 1, len(data) - 2} | {rng.randrange(1, len(data)) for _ in range(samples)})
    for cut in cuts:
        for raw in (data[:cut], io.BytesIO(data[:cut]), io.BytesIO(gzip.compress(data[:cut]))):
            with pytest.raises(BadInput) as exc:
                load_snapshot(raw, "cut.pickle", streaming=streaming)
            assert exc.value.file == "cut.pickle" and exc.value.message.startswith("cut.pickle: "), cut


def test_file_objects_and_bytes_give_the_same_model(snaps, tmp_path):
    data, s = snaps[FILES[4]]
    (tmp_path / "s.pickle.gz").write_bytes(gzip.compress(data) + b"")
    _same(s, load_snapshot(data, "x"))
    with open(tmp_path / "s.pickle.gz", "rb") as f:
        _same(s, load_snapshot(f, "x"))
    with pytest.raises(BadInput, match="after the pickle"):
        load_snapshot(io.BytesIO(data + b"junk"), "x")
    load_snapshot(io.BytesIO(data + b"\x00\x00"), "x")  # _memory_viz NUL padding is fine


@pytest.mark.parametrize("raw, reason", [
    (b"", "empty"),
    (pickle.dumps([1, 2, 3]), "top level is a list"),
    (pickle.dumps({"a": 1}), "no 'segments'"),
    (pickle.dumps({"segments": 5, "device_traces": []}), "wrong structure"),
    (pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "addr": "x"}]]}), "wrong structure"),
    (pickle.dumps({"segments": [{"blocks": [{"size": []}]}], "device_traces": []}), "wrong structure"),
    (bytes(random.Random(1).randrange(256) for _ in range(4096)), "not a snapshot"),
    (b"\x80\x02" + bytes(random.Random(2).randrange(256) for _ in range(4096)), "snapshot"),
    (b'{"segments": [', "JSON"),
    (gzip.compress(b"hello", mtime=0)[:-5], "gzip"),  # mtime=0: the id is the bytes; xdist workers must agree
    (b"<html><body>no snapshot</body></html>", "no \"base64\""),
    (pickle.dumps({"segments": [], "device_traces": []}) + b"junk", "after the pickle"),
    (b"\x80\x01N.", "protocol 1"),
])
@pytest.mark.parametrize("streaming", [False, True])
def test_bad_input_names_the_file(raw, reason, streaming):
    with pytest.raises(BadInput) as exc:
        load_snapshot(raw, "bad.bin", streaming=streaming)
    assert exc.value.file == "bad.bin"
    assert exc.value.message.startswith("bad.bin: ")
    assert reason in exc.value.message, exc.value.message


# -- builders: what the real files lack -----------------------------------------------


def test_expandable_oom_multidevice_private_pool_overflow():
    d = b.expandable_oom_multidevice()
    s = load_snapshot(b.to_pickle(d), "built.pickle")
    assert s.devices == [0, 1] and len(s.traces) == 2
    t0 = s.traces[0]
    names = [s.action_names[c] for c in t0.action.tolist()]
    assert names == ["segment_map", "alloc", "alloc", "free_requested", "free_completed", "segment_unmap", "oom"]
    assert s.trace_overflow is True
    assert s.oom_events == [{"device": 0, "index": 6, "size": 64 * b.GB, "device_free": 123 * b.MB,
                             "stream": 0, "time_us": d["device_traces"][0][6]["time_us"],
                             "stack": int(t0.stack[6])}]
    assert t0.device_free.tolist() == [-1] * 6 + [123 * b.MB]
    assert s.stack_frames(int(t0.stack[6])) == [("??", 0, b.CPP_FRAME["name"]), ("/src/train.py", 42, "forward")]
    assert s.segments.is_expandable.tolist() == [True, False, False]
    assert s.segments.pool_id.tolist() == [[0, 0], [0, 0], [1, 0]]
    assert s.segments.stream.tolist() == [0, 7, 7]
    assert s.segments.device.tolist() == [0, 1, 1]
    t1 = s.traces[1]
    assert [s.strings[i] for i in t1.user_metadata.tolist()] == ["", "", "graph"]
    assert [s.strings[i] for i in t1.compile_context.tolist()] == ["N/A", "N/A", "[0/0] fwd"]
    assert [a["stage"] for a in s.external_annotations] == ["START", "END"]
    assert s.allocator_settings["expandable_segments"] is True
    # identical frames in different entries share one frame row and one stack
    assert t0.stack[1] == t0.stack[2] and len(s.frame_line) == 3


def test_ring_buffer_and_no_overflow_flag():
    s = load_snapshot(b.to_json(b.ring_buffer()), "ring.json")
    assert s.format == "json" and s.trace_overflow is False
    t = s.traces[0]
    assert (t.time_us == -1).all() and (t.stack == 0).all() and (t.compile_context == -1).all()
    assert [s.action_names[c] for c in t.action.tolist()] == ["free_requested", "free_completed", "alloc"]


def test_legacy_2023_history_blocks():
    s = load_snapshot(b.to_pickle(b.legacy_2023(), protocol=3), "old.pickle")
    base = 0x200000
    assert s.blocks.address.tolist() == [base, base + 512, base + 2048]
    assert s.blocks.address_computed.all()
    assert s.blocks.requested_size.tolist() == [500, 0, 2000]  # last one from history real_size
    assert s.stack_frames(int(s.blocks.stack[0])) == [("/src/train.py", 42, "forward")]
    assert s.blocks.stack[1] == 0 and len(s.stack_frames(int(s.blocks.stack[2]))) == 2
    assert [s.state_names[c] for c in s.blocks.state.tolist()] == ["active_allocated", "inactive", "active_allocated"]
    assert s.segments.block_start.tolist() == [0] and s.segments.block_count.tolist() == [3]


def test_unknown_action_and_state_are_kept():
    d = {"segments": [{"device": 0, "address": 0, "total_size": 1, "blocks": [{"address": 0, "size": 1, "state": "weird"}]}],
         "device_traces": [[{"action": "new_thing", "addr": 1, "size": 2}]]}
    s = load_snapshot(pickle.dumps(d), "u.pickle")
    assert s.action_names[s.traces[0].action[0]] == "new_thing"
    assert s.state_names[s.blocks.state[0]] == "weird"


def test_progress_is_reported():
    seen = []

    class Recorder:
        def update(self, fraction=None, message=None):
            seen.append(fraction)

    load_snapshot(b.to_pickle(b.expandable_oom_multidevice()), "p", progress=Recorder())
    assert seen and seen[-1] == 1.0


def test_saved_model_reads_back_the_same(snaps, tmp_path):
    """The columns kept in the cache folder give back the same snapshot."""
    from profscope.model.snapshot import load_model, save_model

    for k, (name, data) in enumerate(_inputs(snaps)):
        s = load_snapshot(data, name)
        folder = tmp_path / str(k)
        folder.mkdir()
        save_model(s, folder)
        back = load_model(folder)
        assert _resolved(back) == _resolved(s), name
        assert back.strings == s.strings and back.stacks == s.stacks
