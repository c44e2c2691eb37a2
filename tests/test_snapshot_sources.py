"""A snapshot's stack frames and their source (issue 37 item 3): a frame whose file sits
under a source root (the log directory, or --source-root) carries ``source`` in the stack
answer and GET /api/source answers its lines; any other frame has ``source: null``, so the
page draws it as plain text (never a dead link)."""

from __future__ import annotations

from profscope.testing import torch_snapshot
from profscope.testing.planted import client_for


def write_snapshot_with_source(root):
    """``segment_freed_mid_trace`` (frames ``/src/train.py`` lines 42 and 77, and a C++ frame
    ``??``) with ``src/train.py`` under the log directory: found by its path suffix."""
    snap = torch_snapshot.segment_freed_mid_trace()
    (root / "snap.pickle").write_bytes(torch_snapshot.to_pickle(snap))
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text("".join(f"line_{i} = {i}  # train.py line {i}\n" for i in range(1, 101)))
    return snap


def _stack_of_event(client, event: int) -> dict:
    ev = client.get("/api/snapshot/events", params={"run": "snap.pickle", "host": "cuda:0", "start": event, "end": event + 1}).json()
    sid = ev["rows"]["stackId"][0]
    r = client.get("/api/snapshot/stack", params={"run": "snap.pickle", "host": "cuda:0", "stack": sid, "filtered": "0"})
    assert r.status_code == 200, r.text
    return r.json()


def test_frames_under_a_root_link_to_their_lines(tmp_path):
    (tmp_path / "logs").mkdir()
    write_snapshot_with_source(tmp_path / "logs")
    client = client_for(tmp_path / "logs", tmp_path / "cache")
    frames = _stack_of_event(client, 1)["frames"]  # the 16 MiB alloc: ?? then /src/train.py:42
    by_file = {f["filename"]: f for f in frames}
    assert by_file["??"]["source"] is None
    py = by_file["/src/train.py"]
    assert py["source"] == {"file": "/src/train.py", "line": 42, "path": "src/train.py"}
    lines = client.get("/api/source", params={"run": "snap.pickle", "file": py["source"]["file"], "line": 42, "context": 3}).json()
    assert lines["line"] == 42 and lines["lines"][42 - lines["first_line"]] == "line_42 = 42  # train.py line 42"
    # the other allocation's frame (line 77) of the same file: its own line
    assert {f["line"] for f in _stack_of_event(client, 7)["frames"] if f["source"]} == {77}


def test_frames_outside_every_root_are_plain_text(tmp_path):
    """The same snapshot without its source beside it: no frame links anywhere."""
    (tmp_path / "logs").mkdir()
    snap = torch_snapshot.segment_freed_mid_trace()
    (tmp_path / "logs" / "snap.pickle").write_bytes(torch_snapshot.to_pickle(snap))
    (tmp_path / "train.py").write_text("x = 1\n" * 100)  # beside the log directory, not under it
    client = client_for(tmp_path / "logs", tmp_path / "cache")
    for event in (1, 6, 7):
        assert all(f["source"] is None for f in _stack_of_event(client, event)["frames"])
