"""The disk cache: atomic writes, one conversion per cold key, keys that follow the input."""

from __future__ import annotations

import gzip
import threading
import time

import orjson
import pytest

from profscope.cache.store import DiskCache, cache_key
from profscope.app.workspace import Workspace
from profscope.errors import BadInput, BadRequest, NotFound
from profscope.storage import LogDir


def test_concurrent_cold_requests_convert_once(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    calls = tmp_path / "calls"  # conversions run in forked workers: they count in a file

    def compute(progress):
        with open(calls, "a") as f:
            f.write("x")
        progress.update(0.5, "halfway")
        time.sleep(0.5)
        return {"value": 42}

    key = cache_key("tool", 1, "input|1|2", {})
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_compute_json(key, "t", compute))) for _ in range(6)]
    for t in threads:
        t.start()
    seen_progress = []
    while not seen_progress and any(t.is_alive() for t in threads):
        seen_progress = [j for j in cache.progress.snapshot() if j["message"] == "halfway"]
        time.sleep(0.01)
    for t in threads:
        t.join()
    assert calls.read_text() == "x"
    assert results == [{"value": 42}] * 6
    assert seen_progress[0]["fraction"] == 0.5  # the worker's progress reaches the board
    assert cache.progress.snapshot() == []  # finished jobs leave the board
    stored = cache.get(key)
    assert orjson.loads(gzip.decompress(stored)) == {"value": 42}
    assert not list(tmp_path.rglob("*.part"))  # no temp files left behind


def test_a_bad_input_is_remembered_and_a_request_error_is_not(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    calls = tmp_path / "calls"
    key = cache_key("x")

    def corrupt(_progress):
        with open(calls, "a") as f:
            f.write("x")
        raise BadInput("logs/a.xplane.pb: truncated XSpace profile", file="logs/a.xplane.pb")

    for _ in range(3):  # converted once; then answered from the remembered failure
        with pytest.raises(BadInput, match="truncated") as e:
            cache.get_or_compute(key, "x", corrupt)
        assert e.value.file == "logs/a.xplane.pb" and e.value.status == 422
    assert calls.read_text() == "x"
    assert cache.get(key) is None
    # A new profscope version tries again (a reader may have been fixed).
    record = next((tmp_path / "cache").rglob("*.failed.json"))
    record.write_bytes(record.read_bytes().replace(b'"version":"', b'"version":"0.old'))
    assert cache.get_or_compute_json(key, "x", lambda p: [1]) == [1]

    other = cache_key("y")

    def missing(_progress):
        raise NotFound("no host 'h'")

    with pytest.raises(NotFound):
        cache.get_or_compute(other, "y", missing)
    assert cache.get_or_compute_json(other, "y", lambda p: [2]) == [2]


def test_an_unexpected_error_in_a_conversion_is_a_422(tmp_path):
    cache = DiskCache(tmp_path)

    def boom(_progress):
        raise ValueError("corrupt")

    with pytest.raises(BadInput, match="ValueError: corrupt"):
        cache.get_or_compute(cache_key("x"), "reading bad.pb", boom)


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
            time.sleep(0.15)
        return 1

    # The printer runs here, in the server process, beside the worker that converts.
    t = threading.Thread(target=cache.get_or_compute, args=(cache_key("slow"), "converting big.xplane.pb", slow))
    t.start()
    while t.is_alive():
        printer.tick()
        time.sleep(0.05)
    printer.tick()
    text = out.getvalue()
    assert "[profscope] converting big.xplane.pb: step" in text and "%" in text
    assert text.strip().splitlines()[-1].startswith("[profscope] converting big.xplane.pb: done in")


def test_a_big_json_result_is_stored_at_igzip_level_1_and_reads_back_the_same(tmp_path):
    """A result of BIG_JSON bytes or more is compressed by ISA-L's igzip at its level 1
    (3-4x zlib's fastest, docs/performance.md), a small one at its best (3); both are
    plain gzip that the gzip module reads back as the same JSON. The level by the size:
    igzip's header says the same (XFL 0) for every level but 0."""
    from isal import igzip

    from profscope.cache.store import BIG_JSON

    cache = DiskCache(tmp_path / "cache")
    small = {"steps": [{"id": i, "name": f"step {i}"} for i in range(2000)]}
    big = {"steps": [{"id": i, "name": f"step {i}", "type_ps": {"1": i * 7, "4": i * 3}}
                     for i in range(BIG_JSON // 40)]}
    assert len(orjson.dumps(big)) >= BIG_JSON > len(orjson.dumps(small))
    for name, value, level in (("small", small, 3), ("big", big, 1)):
        key = cache_key("tool", 1, name, {})
        assert cache.get_or_compute_json(key, name, lambda p, v=value: v) == value
        stored = cache.get(key)
        js = orjson.dumps(value)
        sizes = {lv: len(igzip.compress(js, lv, mtime=0)) for lv in (1, 3)}
        assert sizes[1] != sizes[3] and len(stored) == sizes[level], name
        assert gzip.decompress(stored) == js
