"""Automatic capture (app/capture_watch.py): conditions, probes of real JAX jobs
(``profscope.testing.watch_job``: a job that slows down or leaks when told to), the fired
capture and its metadata (app/capture.py ``write_capture_meta``)."""

from __future__ import annotations

import json
import time

import pytest

from profscope.app.capture import CAPTURE_META_FILE, CaptureDir, CaptureSettings, read_capture_meta, write_capture_meta
from profscope.app.unsupported_files import unsupported_files
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.storage import LogDir
from profscope.testing.watch_job import watch_job


@pytest.fixture(scope="module")
def control(tmp_path_factory):
    return tmp_path_factory.mktemp("job")


@pytest.fixture(scope="module")
def job(control):
    with watch_job(control) as address:
        yield address


def test_capture_meta_round_trip_and_bad_files(tmp_path):
    meta = {"reason": "step time rose", "condition": "step_time>2x,for=3", "fired_at": 1.5, "values": {"k": 2.0},
            "mode": "capture", "targets": ["localhost:1"]}
    path = write_capture_meta(tmp_path, meta)
    assert path == tmp_path / CAPTURE_META_FILE and read_capture_meta(tmp_path) == meta
    assert [p.name for p in tmp_path.iterdir()] == [CAPTURE_META_FILE]  # no temporary left
    assert read_capture_meta(tmp_path / "none") is None
    for bad in (b"[1, 2]", b"{", b"\xff\xfe", b"[" * 100_000):
        (tmp_path / CAPTURE_META_FILE).write_bytes(bad)
        assert read_capture_meta(tmp_path) is None, bad


@pytest.fixture
def ws(demo_logdir, tmp_path):
    return Workspace(LogDir(str(demo_logdir), listing_ttl=60), DiskCache(tmp_path / "cache"),
                     capture_dir=tmp_path / "captures")


def test_a_capture_with_meta_names_its_session_and_keeps_the_reason(job, ws, tmp_path):
    cap = ws.capture
    meta = {"reason": "a test said so", "mode": "capture", "targets": [job]}
    j = cap.start(job, CaptureSettings(duration_ms=300), meta=meta, name_suffix="trigger-step_time")
    assert j.done.wait(90) and j.stage == "saved", j.to_json()
    assert j.session.endswith("_trigger-step_time") and j.to_json()["reason"] == "a test said so"
    folder = tmp_path / "captures" / "plugins" / "profile" / j.session
    assert read_capture_meta(folder) == meta
    assert sorted(p.name for p in folder.iterdir()) == sorted([CAPTURE_META_FILE, CaptureDir.host_file(job)])
    # the run lists its host only: the metadata file is no profile, nor an unread file
    assert ws.run(j.run).hosts == [CaptureDir.host_file(job).removesuffix(".xplane.pb")]
    ws.logdir.refresh("captures")
    assert CAPTURE_META_FILE not in json.dumps(unsupported_files(ws.logdir.listing(), ws.runs()))
