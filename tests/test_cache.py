"""The disk cache: atomic writes, one conversion per cold key, keys that follow the input."""

from __future__ import annotations

import gzip
import threading
import time

import orjson
import pytest

from profscope.cache.store import DiskCache, cache_key
from profscope.cache.workspace import Workspace
from profscope.errors import BadRequest
from profscope.storage import LogDir


def test_concurrent_cold_requests_convert_once(tmp_path):
    cache = DiskCache(tmp_path)
    calls = []
    seen_progress = []

    def compute(progress):
        calls.append(1)
        progress.update(0.5, "halfway")
        seen_progress.append(cache.progress.snapshot())
        time.sleep(0.3)
        return {"value": 42}

    key = cache_key("tool", 1, "input|1|2", {})
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_compute_json(key, "t", compute))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert results == [{"value": 42}] * 6
    assert seen_progress[0][0]["fraction"] == 0.5 and seen_progress[0][0]["message"] == "halfway"
    assert cache.progress.snapshot() == []  # finished jobs leave the board
    stored = cache.get(key)
    assert orjson.loads(gzip.decompress(stored)) == {"value": 42}
    assert not list(tmp_path.rglob("*.part"))  # no temp files left behind


def test_failed_conversion_is_not_cached(tmp_path):
    cache = DiskCache(tmp_path)
    key = cache_key("x")

    def boom(_progress):
        raise ValueError("corrupt")

    with pytest.raises(ValueError):
        cache.get_or_compute(key, "x", boom)
    assert cache.get(key) is None
    assert cache.get_or_compute_json(key, "x", lambda p: [1]) == [1]


def test_key_changes_with_the_input_identity(tmp_path):
    f = tmp_path / "logs" / "a.xplane.pb"
    f.parent.mkdir()
    f.write_bytes(b"one")
    logdir = LogDir(str(tmp_path / "logs"), listing_ttl=0)
    before = logdir.info("a.xplane.pb").identity()
    f.write_bytes(b"three")
    after = logdir.info("a.xplane.pb").identity()
    assert before != after
    assert cache_key("t", 1, before) != cache_key("t", 1, after)


def test_cache_inside_the_logdir_is_refused(tmp_path):
    with pytest.raises(BadRequest, match="inside the log directory"):
        Workspace(LogDir(str(tmp_path)), DiskCache(tmp_path / ".cache"))


def test_progress_printer_reports_slow_conversions(tmp_path):
    import io

    from profscope.cache.progress_printer import ProgressPrinter

    cache = DiskCache(tmp_path)
    out = io.StringIO()
    printer = ProgressPrinter(cache.progress, out=out, after=0.1, every=0.1)

    def slow(progress):
        for i in range(4):
            progress.update((i + 1) / 4, f"step {i + 1}")
            time.sleep(0.1)
            printer.tick()
        return 1

    cache.get_or_compute(cache_key("slow"), "converting big.xplane.pb", slow)
    printer.tick()
    text = out.getvalue()
    assert "[profscope] converting big.xplane.pb: step" in text and "%" in text
    assert text.strip().splitlines()[-1].startswith("[profscope] converting big.xplane.pb: done in")
