"""A text-only XLA dump (``*-buffer-assignment.txt`` + ``*-live-range.txt``, no HLO proto):
the memory viewer shows the heap over program order and its peak from XLA's live ranges,
and the OOM risk rates the module on that same peak (issue 33). On the two-batch JAX
program of scripts/make_oom_programs.py (``two_batch_text_dump``: the same compiles as
``two_batch_dump``, texts only), checked against a replay of the two files written here."""

from __future__ import annotations

import re

import pytest

from tests.test_oom_risk_verdict import two_batch  # noqa: F401  (the session fixture)

_VALUE = re.compile(r"^ value: <\d+ ([^\s{]+)(\{[\d,]*\})?(?: @\d+)?> \(size=(\d+),", re.M)
_RANGE = re.compile(r"^    (\S+?\{[\d,]*\}):(-?\d+)-(-?\d+)$", re.M)


def _replay(ba_text: str, lr_text: str) -> tuple[list[int], int]:
    """Independent of profscope: each value's size from the buffer assignment, live at
    every schedule time from its start to its end (both included)."""
    sizes = {name + (index or "{}"): int(size) for name, index, size in _VALUE.findall(ba_text)}
    end_time = int(re.match(r"HloLiveRange \(max (\d+)\)", lr_text).group(1))
    heap = [0] * (end_time + 1)
    for key, start, end in _RANGE.findall(lr_text.split("BufferLiveRange:", 1)[1].split("Live ranges at", 1)[0]):
        for t in range(max(0, int(start)), min(end_time, int(end)) + 1):
            heap[t] += sizes[key]
    block = lr_text.split("(peak):", 1)[1].split("Stack trace", 1)[0]
    return heap, sum(int(b) for b in re.findall(r": (\d+) bytes \(cumulative", block))


@pytest.fixture
def text_dump(make_client, two_batch):  # noqa: F811
    folder = two_batch[0] / "two_batch_text_dump"
    assert not list(folder.glob("*.hlo.pb*"))  # text only
    return make_client(two_batch[0]), folder


def test_memory_viewer_draws_the_live_range_heap(text_dump):
    client, folder = text_dump
    modules = client.get("/data/plugin/profile/module_list", params={"run": "two_batch_text_dump"}).text.split(",")
    assert len(modules) == 2
    for module in modules:
        stem = next(folder.glob(f"*.{module.split('(')[0]}.*-buffer-assignment.txt")).name[: -len("-buffer-assignment.txt")]
        heap, xla_block = _replay((folder / f"{stem}-buffer-assignment.txt").read_text(), (folder / f"{stem}-live-range.txt").read_text())
        mv = client.get("/data/plugin/profile/data", params={"run": "two_batch_text_dump", "tag": "memory_viewer",
                                                             "module_name": module}).json()
        assert mv["textOnly"] and "cannot be shown" not in mv["note"]
        lr = mv["liveRange"]
        assert lr["heapSizes"] == heap and lr["unsizedValues"] == 0
        assert lr["peakBytes"] == max(heap) and lr["peakTime"] == heap.index(max(heap))
        assert sum(v["bytes"] for v in lr["peakValues"]) == lr["peakBytes"]
        # XLA's own "(peak)" block is the heap at XLA's moment, which it picks with each
        # value's instruction-shape size: never above the maximum.
        assert lr["xlaPeakBytes"] == xla_block == heap[lr["xlaPeakTime"]] <= lr["peakBytes"]
        # The OOM risk rates the module on the same figure.
        body = client.get("/data/plugin/profile/data", params={"run": "two_batch_text_dump", "tag": "oom_risk",
                                                               "module_name": module}).json()
        assert body["peakBytes"] == lr["peakBytes"] and body["usage"][0]["bytes"] == lr["peakBytes"]


def test_text_dump_is_rated_on_the_big_step_too(text_dump):
    client, _ = text_dump
    body = client.get("/data/plugin/profile/data", params={"run": "two_batch_text_dump", "tag": "oom_risk",
                                                           "device_memory": "6MiB"}).json()
    assert body["risk"] == "OOM" and body["module"].startswith("jit_train_step_big(")
    assert body["moduleChoice"]["rule"] == "worst step module"


def test_a_live_range_claiming_a_huge_schedule_is_clamped(make_client, two_batch, tmp_path):  # noqa: F811
    """``HloLiveRange (max N)`` is the schedule's length; a file claiming 10^15 (and a
    range to match) must not size the heap by it: the heap stays the sequence's length."""
    import shutil

    src = two_batch[0] / "two_batch_text_dump"
    dest = tmp_path / "logs" / "dump"
    dest.mkdir(parents=True)
    for f in src.glob("*jit_train_step.*"):
        shutil.copy(f, dest / f.name)
    (lr,) = dest.glob("*-live-range.txt")
    text = lr.read_text()
    n = int(re.match(r"HloLiveRange \(max (\d+)\)", text).group(1))
    text = text.replace(f"HloLiveRange (max {n})", "HloLiveRange (max 999999999999999)", 1)
    text = text.replace("  BufferLiveRange:\n", "  BufferLiveRange:\n    batch_0_.1{}:0-999999999999999\n", 1)
    lr.write_text(text)
    client = make_client(tmp_path / "logs")
    (module,) = client.get("/data/plugin/profile/module_list", params={"run": "dump"}).text.split(",")
    res = client.get("/data/plugin/profile/data", params={"run": "dump", "tag": "memory_viewer", "module_name": module})
    assert res.status_code == 200, res.text
    assert len(res.json()["liveRange"]["heapSizes"]) == n + 1
