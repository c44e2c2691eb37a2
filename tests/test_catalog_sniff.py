"""Chrome traces under the names users give them (``trace.json``, ``rank-0.json.gz``,
``eager_trace.json.gz``), found by their first bytes through the LogDir (local and
``memory://``), next to JSON files that are no traces and JAX ``*.prof`` files; gzipped
memory timelines; each file looked into once per version. Inputs are renamed copies of
the real traces in ``shared/fixtures/public_profiles`` and of the bundled PyTorch demo."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import fsspec
import pytest

from profscope.cli import demo_logdir
from profscope.formats import sniff
from profscope.model.file_kinds import FileKind, classify, trace_stem
from profscope.app.discovery import discover
from profscope.model.catalog import RunKind
from profscope.storage import LogDir

TORCH_DEMO = Path(demo_logdir()) / "torch"
JAX_PROFILES = Path(__file__).parent / "data" / "jax_memory_profiles"


@pytest.fixture(scope="module")
def files(shared_fixtures) -> dict[str, bytes]:
    """Relative path -> bytes of a log directory as users have it."""
    public = shared_fixtures / "public_profiles"
    traces = public / "traces"
    mlp = gzip.decompress((TORCH_DEMO / "mlp_train.pt.trace.json.gz").read_bytes())
    mi250 = json.loads(gzip.decompress((traces / "hta_mi250_rocm62.trace.json.gz").read_bytes()))
    return {
        # PyTorch's recipe: prof.export_chrome_trace("trace.json"), plain JSON, with its
        # export_memory_timeline("trace.memory_timeline.json.gz") beside it
        "trace.json": mlp,
        "trace.memory_timeline.json.gz": gzip.compress((TORCH_DEMO / "mlp_train.memory_timeline.json").read_bytes()),
        "dist/rank-0.json.gz": (traces / "hta_alexnet.trace.json.gz").read_bytes(),
        "eager/eager_trace.json.gz": (traces / "tracelens_b200_eager.trace.json.gz").read_bytes(),
        # TraceLens puts ~26 KB of "metadata" before "traceEvents"
        "h100/bert.json.gz": (traces / "tracelens_h100_bert_small.trace.json.gz").read_bytes(),
        # the Trace Event Format's array shape, events of a real trace
        "legacy/events.json": json.dumps(mi250["traceEvents"]).encode(),
        # a named trace with a gzipped companion
        "torch/leak.pt.trace.json.gz": (TORCH_DEMO / "leak.pt.trace.json.gz").read_bytes(),
        "torch/leak.memory_timeline.json.gz": gzip.compress((TORCH_DEMO / "leak.memory_timeline.json").read_bytes()),
        # JSON that is no trace
        "manifest.json": (public / "manifest.json").read_bytes(),
        "torch/expected.json": (TORCH_DEMO / "expected.json").read_bytes(),
        "config.json": json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                   "config": {"traceEvents": []}}).encode(),
        "side/host.memory_profile.json.gz": gzip.compress(b'{"memoryProfilePerAllocator": {}, "numHosts": 1}'),
        "memory_timeline_only.json": (TORCH_DEMO / "mlp_train.memory_timeline.json").read_bytes(),
        "empty.json": b"",
        "broken.json.gz": b"\x1f\x8b\x08\x00garbage",
        # jax.profiler.save_device_memory_profile("memory.prof"): gzipped pprof, a run
        # once its head shows a Profile (tests/data/jax_memory_profiles: JAX made it)
        "jax/memory.prof": (JAX_PROFILES / "mlp" / "memory.prof").read_bytes(),
        # cProfile's *.prof (marshal, no gzip): looked into, not a run
        "py/cpu.prof": b"\xfb\x00\x00\x00\x00" * 20,
        # inside a profile session a JSON file is the session's, never looked into
        "exp/plugins/profile/2026_01_01/host.xplane.pb": b"\x00",
        "exp/plugins/profile/2026_01_01/trace.json": mlp,
    }


TRACE_RUNS = {
    "trace.json": ["trace.json", "trace.memory_timeline.json.gz"],
    "dist/rank-0.json.gz": ["dist/rank-0.json.gz"],
    "eager/eager_trace.json.gz": ["eager/eager_trace.json.gz"],
    "h100/bert.json.gz": ["h100/bert.json.gz"],
    "legacy/events.json": ["legacy/events.json"],
    "torch/leak.pt.trace.json.gz": ["torch/leak.memory_timeline.json.gz", "torch/leak.pt.trace.json.gz"],
}


def _write(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def _check(runs) -> None:
    by_name = {r.name: r for r in runs}
    assert set(by_name) == {*TRACE_RUNS, "exp/2026_01_01", "jax/memory.prof"}
    assert by_name["jax/memory.prof"].kind is RunKind.PPROF
    for name, paths in TRACE_RUNS.items():
        run = by_name[name]
        assert run.kind is RunKind.CHROME_TRACE
        assert [f.path for f in run.files] == paths
        assert [f.path for f in run.files_of(FileKind.CHROME_TRACE)] == [name]
        assert len(run.files_of(FileKind.MEMORY_TIMELINE)) == len(paths) - 1
    session = by_name["exp/2026_01_01"]
    assert session.kind is RunKind.PROFILE and session.hosts == ["host"]


def test_local_logdir(files, tmp_path):
    _write(tmp_path, files)
    logdir = LogDir(str(tmp_path), listing_ttl=0)
    reads = []
    real = logdir.head
    logdir.head = lambda info, n: reads.append((info.path, n)) or real(info, n)
    _check(discover(logdir.listing()))
    looked = sorted(p for p, _ in reads)
    # only *.json[.gz] outside sessions that no name rule claims and *.prof, each once,
    # HEAD_BYTES at most
    assert looked == sorted(["jax/memory.prof", "py/cpu.prof",
        "trace.json", "dist/rank-0.json.gz", "eager/eager_trace.json.gz", "h100/bert.json.gz", "legacy/events.json",
        "manifest.json", "torch/expected.json", "config.json", "side/host.memory_profile.json.gz",
        "memory_timeline_only.json", "broken.json.gz", "empty.json",
    ])
    assert {n for _, n in reads} == {sniff.HEAD_BYTES}

    # listing again reads nothing: what was learnt is kept per file identity
    reads.clear()
    _check(discover(logdir.listing(refresh=True)))
    assert reads == []

    # a file rewritten (new size and mtime) is looked into again, and only it
    p = tmp_path / "manifest.json"
    p.write_bytes(files["trace.json"])
    os.utime(p, (1_700_000_000, 1_700_000_000))
    runs = discover(logdir.listing(refresh=True))
    assert [path for path, _ in reads] == ["manifest.json"]
    assert "manifest.json" in {r.name for r in runs}


def test_memory_filesystem(files):
    fs = fsspec.filesystem("memory")
    for rel, data in files.items():
        fs.pipe(f"/sniff/logs/{rel}", data)
    try:
        _check(discover(LogDir("memory://sniff/logs", listing_ttl=0).listing()))
    finally:
        fs.rm("/sniff", recursive=True)


def test_workspace_reads_a_sniffed_trace(files, tmp_path):
    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace

    logs = tmp_path / "logs"
    _write(logs, {k: files[k] for k in ("trace.json", "trace.memory_timeline.json.gz", "manifest.json", "jax/memory.prof")})
    ws = Workspace(LogDir(str(logs), listing_ttl=0), DiskCache(tmp_path / "cache"))
    assert [r.name for r in ws.runs()] == ["trace.json", "jax/memory.prof"]
    run = ws.run("trace.json")
    assert [f.path for _, f in ws.trace_sources(run)] == ["trace.json"]
    from fastapi.testclient import TestClient

    from profscope.server import create_app

    client = TestClient(create_app(ws))
    files = client.get("/api/run", params={"run": "trace.json"}).json()["files"]
    assert [(f["path"], f["kind"]) for f in files] == [("trace.json", "chrome_trace"),
                                                       ("trace.memory_timeline.json.gz", "memory_timeline")]
    tools = client.get("/data/plugin/profile/run_tools", params={"run": "trace.json"}).json()
    assert "memory_profile" in tools and "trace_viewer@" in tools


def test_sniffing_rules():
    kineto = b'{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {"id": 0, "name": "x"'  # cut mid-value
    assert sniff.is_chrome_trace(kineto)
    assert sniff.is_chrome_trace(gzip.compress(kineto))
    assert sniff.is_chrome_trace(b'\xef\xbb\xbf {"displayTimeUnit": "ns", "traceEvents": [')
    assert sniff.is_chrome_trace(b'[{"name": "a", "args": {"x": [1, {"y": 2}]}, "ph": "X", "ts": 1')
    assert sniff.is_chrome_trace(gzip.compress(b"[\n" + b'{"ph":"B","ts":1},' * 5000)[:300])  # a gzip stream cut short
    assert not sniff.is_chrome_trace(b'{"schemaVersion": 2, "mediaType": "application/vnd.docker"}')  # Docker manifest
    assert not sniff.is_chrome_trace(b'{"config": {"traceEvents": []}, "x": "\\"traceEvents\\""}')  # nested / in a string
    assert not sniff.is_chrome_trace(b'[{"name": "a", "args": {"ph": 1}}, {"ph": "X"}]')  # first element has no ph
    assert not sniff.is_chrome_trace(b"[[1, 2], [[0, 1]]]")  # export_memory_timeline
    assert not sniff.is_chrome_trace(b"[]")
    assert not sniff.is_chrome_trace(b"")
    assert not sniff.is_chrome_trace(b"\x1f\x8b\x08\x00garbage")
    assert not sniff.is_chrome_trace(b"\x0a\x04\x08\x01")


def test_names():
    assert classify("memory.prof") is FileKind.DEVICE_MEMORY_PROFILE
    assert classify("x.memory_timeline.json.gz") is FileKind.MEMORY_TIMELINE
    assert classify("trace.json") is FileKind.OTHER  # its content decides
    assert trace_stem("trace.json") == "trace" and trace_stem("rank-0.json.gz") == "rank-0"
    assert trace_stem("x.pt.trace.json.gz") == "x"
