"""The demo's PyTorch snapshots (src/profscope/demo/logdir/torch_snapshots/): the facts
its README states are what the reader and the snapshot tools compute from the files, and
every file it lists is there, with its licence. The README is written by hand (the files
are copies, not generated), so this test is what keeps it true."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

import profscope
from profscope.formats.snapshot_pickle import load_snapshot
from profscope.tools import memory_profile_snapshot as V

HERE = Path(profscope.__file__).parent / "demo" / "logdir" / "torch_snapshots"
README = (HERE / "README.md").read_text(encoding="utf-8")


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def test_every_listed_file_is_there_with_its_licence():
    rows = re.findall(r"^\| `([^`]+\.pickle)` \| (\S+) \(commit", README, flags=re.M)
    assert {name for name, _ in rows} == {p.name for p in HERE.glob("*.pickle")}
    licences = {p.name for p in (HERE / "LICENSES").iterdir()}
    for _, repo in rows:
        assert f"{repo.replace('/', '_')}.LICENSE" in licences, repo


@pytest.fixture(scope="module")
def training():
    path = HERE / "cs336_train_step_amp.pickle"
    with open(path, "rb") as f:
        snap = load_snapshot(f, path.name)
    return path, V.overview(snap, 0)["summary"]


def test_the_stated_size_and_digest(training):
    path, _ = training
    size, head, tail = re.search(r"`cs336_train_step_amp.pickle` \(([\d,]+) bytes, SHA-256 `(\w+)…(\w+)`\)", README).groups()
    assert path.stat().st_size == _number(size)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest.startswith(head) and digest.endswith(tail)


def test_the_stated_trace_counts_and_peaks(training):
    _, summary = training
    text = " ".join(README.split())  # the README wraps its sentences
    m = re.search(r"([\d,]+) trace events \(alloc ([\d,]+), free_requested ([\d,]+), free_completed ([\d,]+), "
                  r"segment_alloc ([\d,]+)\), peak allocated ([\d,]+) bytes at event ([\d,]+), peak reserved ([\d,]+) bytes", text)
    assert m, "the README's sentence about the training snapshot's trace changed shape"
    events, alloc, freq, fcomp, seg, peak, at, reserved = (_number(g) for g in m.groups())
    assert summary["traceEntries"] == events
    assert summary["actions"] == {"alloc": alloc, "free_requested": freq, "free_completed": fcomp, "segment_alloc": seg}
    assert (summary["peak"]["bytes"], summary["peak"]["event"]) == (peak, at)
    assert summary["peakReserved"]["bytes"] == reserved
    # a newcomer sees a timeline: thousands of events, with stacks on every one
    assert events > 1000 and summary["stacks"]["traceEntriesWithStack"] == events


def test_the_others_have_one_entry_traces():
    # the README says so: they show a final allocator state, not a timeline
    for name in ("flexgen_oom.pickle", "flexgen_1.3b.pickle", "sketchkv_2024.pickle"):
        with open(HERE / name, "rb") as f:
            snap = load_snapshot(f, name)
        devices = V.overview(snap, 0)["devices"]
        assert devices and all(d["traceEntries"] <= 1 for d in devices), name
