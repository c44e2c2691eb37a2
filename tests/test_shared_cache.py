"""The cache's shared record in a bucket (cache/shared.py, storage/object_store.py; issue
18): replicas with their own cache folders (other machines, in effect) convert each entry
once and copy the rest, through a real gcsfs client against a real local GCS emulator
whose create-only uploads (``ifGenerationMatch=0``) are enforced as GCS does
(testing/gcs_emulator.py); races, a crashed lease holder, a damaged record and a dead
store; then two ``profscope serve`` processes on one bucket serving one 4-host session."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import orjson
import pytest

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # before gcsfs is imported

from profscope.app.workspace import Workspace  # noqa: E402
from profscope.cache.shared import SharedRecord  # noqa: E402
from profscope.cache.store import DiskCache, cache_key  # noqa: E402
from profscope.cache.worker import WorkerPool  # noqa: E402
from profscope.storage import LogDir  # noqa: E402
from profscope.storage.object_store import ObjectStore  # noqa: E402
from profscope.testing.gcs_emulator import GcsEmulator  # noqa: E402
from profscope.testing.pod_session import build_pod_session  # noqa: E402

BUCKET = "shared"


@pytest.fixture(scope="module")
def emulator():
    with GcsEmulator(BUCKET) as url:
        yield url


@pytest.fixture
def prefix(request):
    """A fresh record below the bucket for each test."""
    return f"gs://{BUCKET}/{request.node.name}"


def _store(emulator, prefix) -> ObjectStore:
    return ObjectStore(prefix, storage_options={"endpoint_url": emulator, "token": "anon"})


def _replica(tmp_path: Path, name: str, emulator, prefix, **record) -> DiskCache:
    shared = SharedRecord(_store(emulator, prefix), writer=name, **record)
    return DiskCache(tmp_path / name, workers=WorkerPool(enabled=False), shared=shared)


def _hashes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_emulator_refuses_a_second_create_only_upload(emulator, prefix):
    """Without the wrapped handlers the second write would overwrite: what every test
    below leans on, checked for the simple upload (a marker) and the resumable one (a
    12 MB object: gcsfs uploads over 5 MB in chunks)."""
    store = _store(emulator, prefix)
    assert store.create("m.commit", b"first")
    assert not store.create("m.commit", b"second")
    assert store.read("m.commit") == b"first"
    big = os.urandom(12 << 20)
    store.fs.pipe_file(f"{BUCKET}/{prefix.split('/', 3)[3]}/big", big, mode="create")
    with pytest.raises(FileExistsError):
        store.fs.pipe_file(f"{BUCKET}/{prefix.split('/', 3)[3]}/big", b"x" * (12 << 20), mode="create")
    assert store.read("big") == big


@pytest.fixture(scope="module")
def pod(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("pod") / "logs"
    build_pod_session(logdir, hosts=4)
    return logdir


def _index_of(ws: Workspace, host: str):
    run = ws.run("pod")
    info = dict(ws.trace_sources(run))[host]
    return ws.trace_index(run, host, info), ws._trace_index_key(host, info)


def test_a_second_replica_copies_a_trace_index_instead_of_building_it(pod, tmp_path, emulator, prefix):
    a = Workspace(LogDir(str(pod)), _replica(tmp_path, "a", emulator, prefix))
    b = Workspace(LogDir(str(pod)), _replica(tmp_path, "b", emulator, prefix))
    ix_a, key = _index_of(a, "host01")
    a.cache.shared.flush()  # published on an upload thread, after the answer
    assert a.cache.shared.stats["published"] == 1
    built_on_b = []
    b.cache.progress.start = lambda k, label, _start=b.cache.progress.start: built_on_b.append(k) or _start(k, label)
    assert b.cache.is_built(key) and b.cache.built_dir(key) is None  # in the record, not yet here
    ix_b, _ = _index_of(b, "host01")
    assert built_on_b == [] and b.cache.shared.stats["fetched"] == 1
    assert _hashes(b.cache.built_dir(key)) == _hashes(a.cache.built_dir(key))
    assert ix_b.n == ix_a.n > 0
    manifest = b.cache.shared.manifest(key)
    assert manifest["writer"] == "a" and manifest["kind"] == "dir"
    assert {r: h for r, _, h in manifest["files"]} == _hashes(a.cache.built_dir(key))  # name, size, SHA-256


def test_a_json_result_is_computed_once_across_replicas(tmp_path, emulator, prefix):
    a = _replica(tmp_path, "a", emulator, prefix)
    b = _replica(tmp_path, "b", emulator, prefix)
    key = cache_key("test", "blob")
    calls = []
    assert a.get_or_compute_json(key, "x", lambda p: calls.append("a") or {"peak": 12345}) == {"peak": 12345}
    a.shared.flush()
    assert b.get_or_compute_json(key, "x", lambda p: calls.append("b") or {"peak": -1}) == {"peak": 12345}
    assert calls == ["a"] and b.get(key) == a.get(key)


def test_two_replicas_asking_at_once_build_once_and_the_other_waits(tmp_path, emulator, prefix):
    caches = [_replica(tmp_path, name, emulator, prefix) for name in ("a", "b", "c")]
    key = cache_key("test", "race")
    builds = []

    def build(progress, folder):
        builds.append(threading.current_thread().name)
        time.sleep(1.0)  # long enough that the others find the lease, not the commit
        (folder / "part.bin").write_bytes(b"x" * 1000)

    results = {}
    threads = [threading.Thread(target=lambda c=c: results.setdefault(c.shared.writer, c.get_or_build_dir(key, "race", build)),
                                name=c.shared.writer) for c in caches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for c in caches:
        c.shared.flush()
    assert len(builds) == 1, builds
    assert sorted(results) == ["a", "b", "c"]
    assert all((p / "part.bin").read_bytes() == b"x" * 1000 for p in results.values())
    assert sum(c.shared.stats["waited"] for c in caches) == 2
    assert sum(c.shared.stats["published"] for c in caches) == 1
    assert not caches[0].shared.store.exists(f"v2/{key[:2]}/{key}.lease")  # released after the commit


def test_the_first_commit_wins_and_the_loser_removes_its_files(tmp_path, emulator, prefix):
    """Two writers that both built (a lease gone stale in between): each uploads under its
    own name, the create-only commit admits one, the other deletes its objects."""
    key = cache_key("test", "two-writers")
    store = _store(emulator, prefix)
    for name, body in (("a", b"from a"), ("b", b"from b")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_bytes(body)
    ra, rb = SharedRecord(store, writer="a"), SharedRecord(store, writer="b")
    assert ra.publish(key, [("f", tmp_path / "a/f")], kind="dir", scratch=tmp_path)
    assert not rb.publish(key, [("f", tmp_path / "b/f")], kind="dir", scratch=tmp_path)
    assert rb.stats["lostRace"] == 1
    assert ra.manifest(key)["writer"] == "a"
    assert store.exists(f"v2/{key[:2]}/{key}/a/entry.tar")
    assert not store.exists(f"v2/{key[:2]}/{key}/b/entry.tar")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # no pack left behind
    dest = tmp_path / "copy"
    dest.mkdir()
    assert rb._fetch(key, rb.manifest(key), dest) and (dest / "f").read_bytes() == b"from a"


def test_a_lease_nobody_refreshes_is_waited_for_only_until_it_goes_stale(tmp_path, emulator, prefix):
    """A holder that crashed leaves its lease: the next replica waits ``lease_s`` at most,
    then converts itself."""
    key = cache_key("test", "crashed-holder")
    store = _store(emulator, prefix)
    assert store.create(f"v2/{key[:2]}/{key}.lease", b'{"writer": "crashed", "time": %f}' % time.time())
    cache = _replica(tmp_path, "b", emulator, prefix, lease_s=1.5)
    t0 = time.monotonic()
    path = cache.get_or_build_dir(key, "x", lambda p, folder: (folder / "f").write_bytes(b"built by b"))
    waited = time.monotonic() - t0
    assert 1.0 < waited < 10, waited
    assert (path / "f").read_bytes() == b"built by b"
    cache.shared.flush()
    assert cache.shared.manifest(key)["writer"] == "b"


def test_a_failed_build_releases_its_lease_so_others_do_not_wait(tmp_path, emulator, prefix):
    from profscope.errors import BadInput

    key = cache_key("test", "bad-input")
    a = _replica(tmp_path, "a", emulator, prefix)

    def bad(progress, folder):
        raise BadInput("not a profile", file="x.xplane.pb")

    with pytest.raises(BadInput):
        a.get_or_build_dir(key, "x", bad)
    assert not a.shared.store.exists(f"v2/{key[:2]}/{key}.lease")
    assert not a.shared.committed(key)


def test_a_damaged_record_is_rebuilt_locally(tmp_path, emulator, prefix):
    """The commit names a file the bucket lost: the copy fails, is counted, and the
    replica converts the entry itself."""
    key = cache_key("test", "damaged")
    a = _replica(tmp_path, "a", emulator, prefix)
    a.get_or_build_dir(key, "x", lambda p, folder: (folder / "f").write_bytes(b"v"))
    a.shared.flush()
    a.shared.store.delete(f"v2/{key[:2]}/{key}/a/entry.tar")
    b = _replica(tmp_path, "b", emulator, prefix)
    path = b.get_or_build_dir(key, "x", lambda p, folder: (folder / "f").write_bytes(b"v"))
    assert (path / "f").read_bytes() == b"v"
    b.shared.flush()  # its own publication (a lost race: the damaged commit stays) and its pack removed
    assert b.shared.stats["errors"] == 1 and "copying" in b.shared.stats["lastError"]
    assert not any(p.name.startswith(".tmp-") for p in path.parent.iterdir())  # the failed copy removed


def test_a_store_that_fails_leaves_a_working_local_cache(tmp_path, caplog):
    """A record that cannot be written (here a folder path that is a file) costs
    conversions, never answers."""
    (tmp_path / "not-a-folder").write_bytes(b"")
    shared = SharedRecord(ObjectStore(str(tmp_path / "not-a-folder")), writer="a")
    cache = DiskCache(tmp_path / "local", workers=WorkerPool(enabled=False), shared=shared)
    key = cache_key("test", "dead-store")
    assert cache.get_or_compute_json(key, "x", lambda p: {"ok": 1}) == {"ok": 1}
    shared.flush()
    assert cache.get_or_compute_json(key, "x", lambda p: {"ok": 2}) == {"ok": 1}  # the local hit
    assert shared.stats["errors"] >= 1 and shared.stats["published"] == 0
    assert "going on with the local cache" in caplog.text


def test_a_shared_folder_record_has_the_same_semantics(tmp_path):
    """--shared-cache may be a folder (NFS): create-only by link(2), which fails on an
    existing name as GCS's precondition does."""
    store = ObjectStore(str(tmp_path / "record"))
    assert store.create("v1/ab/k.commit", b"1") and not store.create("v1/ab/k.commit", b"2")
    assert store.read("v1/ab/k.commit") == b"1"
    assert [p.name for p in (tmp_path / "record/v1/ab").iterdir()] == ["k.commit"]  # no temporaries
    a = DiskCache(tmp_path / "a", workers=WorkerPool(enabled=False), shared=SharedRecord(store, writer="a"))
    b = DiskCache(tmp_path / "b", workers=WorkerPool(enabled=False), shared=SharedRecord(store, writer="b"))
    key = cache_key("test", "folder")
    a.get_or_build_dir(key, "x", lambda p, folder: (folder / "sub").mkdir() or (folder / "sub/f").write_bytes(b"deep"))
    a.shared.flush()
    path = b.get_or_build_dir(key, "x", lambda p, folder: pytest.fail("b must copy, not build"))
    assert (path / "sub/f").read_bytes() == b"deep"


# -- two profscope serve processes, one bucket ------------------------------------------


def test_two_servers_on_one_bucket_serve_one_session_converting_each_host_once(pod, tmp_path, emulator, monkeypatch):
    """Two ``profscope serve`` processes (own --cache-dir each, as on two machines) behind
    no balancer: a user's requests alternate between them, many at once. Every answer is
    the same from both, and every entry of the record was converted by one of them only
    (the other copied it)."""
    import httpx
    from concurrent.futures import ThreadPoolExecutor

    from profscope.testing.local_server import profscope_server

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator)  # gcsfs in the servers reaches the emulator
    record = f"gs://{BUCKET}/replicas"
    common = ("serve", str(pod), "--port", "0", "--no-capture", "--workers", "0", "--shared-cache", record)
    with profscope_server(*common, "--cache-dir", str(tmp_path / "a")) as (url_a, lines_a), \
            profscope_server(*common, "--cache-dir", str(tmp_path / "b")) as (url_b, _):
        assert any(f"shared with other servers through {record}" in x for x in lines_a), lines_a
        hosts = httpx.get(f"{url_a.rstrip('/')}/api/run", params={"run": "pod"}, timeout=30).json()["hosts"]
        assert len(hosts) == 4

        def get(base, path, **params):
            res = httpx.get(f"{base.rstrip('/')}{path}", params=params, timeout=120)
            assert res.status_code == 200, (base, path, params, res.text[:300])
            return res.json()

        requests = [(base, host, path) for host in hosts for path in ("/api/trace/window", "/api/trace/summary")
                    for base in (url_a, url_b)]
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda r: (r, get(r[0], r[2], run="pod", host=r[1])), requests))
        by_request = {}
        for (base, host, path), body in answers:
            by_request.setdefault((host, path), []).append(body)
        for (host, path), (from_a, from_b) in by_request.items():
            assert from_a == from_b, (host, path)
        assert all(b["returnedEventsSize"] > 0 for (h, p), bodies in by_request.items() if p == "/api/trace/window"
                   for b in bodies)
        deadline = time.monotonic() + 60
        while (stats := [get(u, "/api/progress")["sharedCache"] for u in (url_a, url_b)]) \
                and any(s["uploading"] for s in stats):
            assert time.monotonic() < deadline, stats
            time.sleep(0.1)

    store = ObjectStore(record, storage_options={"endpoint_url": emulator, "token": "anon"})
    commits = [p for p in store.fs.find(f"{BUCKET}/replicas/v2") if p.endswith(".commit")]
    assert sum(s["published"] for s in stats) == len(commits) > len(hosts)  # indexes and JSON results
    assert sum(s["lostRace"] for s in stats) == 0 and sum(s["errors"] for s in stats) == 0, stats
    # what one made the other copied: every request was sent to both
    assert sum(s["fetched"] for s in stats) >= len(hosts), stats
    assert not [p for p in store.fs.find(f"{BUCKET}/replicas/v2") if p.endswith(".lease")]


def test_a_shared_cache_url_that_is_not_a_store_is_a_cli_error(tmp_path):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "profscope", "serve", "--demo", "--port", "0", "--no-capture",
                          "--cache-dir", str(tmp_path), "--shared-cache", "memory://x"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "memory://x" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_dask_workers_with_their_own_cache_folders_publish_and_the_server_copies(pod, tmp_path, emulator, prefix,
                                                                                 monkeypatch):
    """A cluster on other machines, in effect: the workers' cache folder is not the
    server's ($PROFSCOPE_WORKER_CACHE_DIR), so each host's index reaches the server only
    through the bucket: built once, on a worker, and copied."""
    distributed = pytest.importorskip("distributed")
    from profscope.app.scale_out import DaskConversions, local_cluster

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator)  # inherited by the worker processes
    monkeypatch.setenv("PROFSCOPE_WORKER_CACHE_DIR", str(tmp_path / "worker-cache"))
    cluster = local_cluster(1)
    client = distributed.Client(cluster)
    conv = DaskConversions(client=client)
    try:
        shared = SharedRecord(ObjectStore(prefix), writer="server")
        ws = Workspace(LogDir(str(pod)), DiskCache(tmp_path / "server", workers=WorkerPool(enabled=False), shared=shared))
        ws.scale_out = conv
        run = ws.run("pod")
        sources = ws.trace_sources(run)
        for host, info in sources:
            assert ws.trace_index(run, host, info).n > 0
        assert shared.stats["fetched"] == len(sources) == 4 and shared.stats["published"] == 0, shared.stats
        keys = {ws._trace_index_key(host, info) for host, info in sources}
        on_worker = {p.name[:-2] for p in (tmp_path / "worker-cache").rglob("*.d") if not p.name.startswith(".")}
        assert keys <= on_worker
        for key in keys:
            assert _hashes(ws.cache.built_dir(key)) == _hashes(tmp_path / "worker-cache" / key[:2] / f"{key}.d")
            assert shared.manifest(key)["writer"] != "server"
        # The memory roll-up's rows too (Workspace.fan_out): made on the worker, copied
        # from the bucket, the same rows as a server without the cluster makes itself.
        rows = ws.memory_hosts(run)
        assert shared.stats["fetched"] == 2 * len(sources) and shared.stats["published"] == 0, shared.stats
        alone = Workspace(LogDir(str(pod)), DiskCache(tmp_path / "alone", workers=WorkerPool(enabled=False)))
        assert rows == alone.memory_hosts(alone.run("pod"))
    finally:
        conv.close()
        client.close()
        cluster.close(timeout=20)


def test_a_record_naming_a_path_outside_its_entry_is_not_extracted(tmp_path, emulator, prefix):
    """A pack is taken apart only into its entry: a commit and pack that name
    ``../escape`` (written by hand here, as a hostile writer of the bucket could) fail
    the copy, and the replica converts the entry itself."""
    import io
    import tarfile

    key = cache_key("test", "hostile")
    store = _store(emulator, prefix)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    store.write(f"v2/{key[:2]}/{key}/x/entry.tar", buf.getvalue())
    assert store.create(f"v2/{key[:2]}/{key}.commit", orjson.dumps(
        {"version": 2, "key": key, "kind": "dir", "writer": "x", "time": 0,
         "files": [["../escape", 4, hashlib.sha256(b"evil").hexdigest()]]}))
    b = _replica(tmp_path, "b", emulator, prefix)
    path = b.get_or_build_dir(key, "x", lambda p, folder: (folder / "f").write_bytes(b"built"))
    assert (path / "f").read_bytes() == b"built"
    b.shared.flush()
    assert not list(tmp_path.rglob("escape")) and b.shared.stats["errors"] == 1


def test_a_forked_conversion_worker_reads_the_record_but_never_leases_or_publishes(tmp_path, emulator, prefix):
    """A forked worker exits as soon as its conversion returns: a lease it took would be
    left with nobody refreshing it (other replicas waiting 60 s), an upload it started cut
    short. So in a child the record is read only; the server process leases and publishes."""
    key = cache_key("test", "forked")
    cache = _replica(tmp_path, "a", emulator, prefix)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what a nested conversion in a worker does
        try:
            cache.get_or_build_dir(key, "x", lambda p, folder: (folder / "f").write_bytes(b"child"))
            os.write(w, b"ok")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 2) == b"ok"
    store = cache.shared.store
    assert not store.exists(f"v2/{key[:2]}/{key}.lease") and not cache.shared.committed(key)
    assert (cache.built_dir(key) / "f").read_bytes() == b"child"  # built, locally only
    other = cache_key("test", "forked-parent")
    cache.get_or_build_dir(other, "x", lambda p, folder: (folder / "f").write_bytes(b"parent"))
    cache.shared.flush()
    assert cache.shared.committed(other)  # the parent still publishes


def test_a_bad_input_fails_once_across_replicas(tmp_path, emulator, prefix):
    """Replica A's conversion fails on a bad input: B (its own folder) answers the same
    error without converting, and keeps it locally; a replica of another profscope
    version (whose reader may be fixed) converts it again."""
    from profscope.errors import BadInput

    key = cache_key("test", "bad-everywhere")
    a, b = _replica(tmp_path, "a", emulator, prefix), _replica(tmp_path, "b", emulator, prefix)
    calls = []

    def bad(progress, folder):
        calls.append(1)
        raise BadInput("truncated XSpace profile", file="host03.xplane.pb")

    with pytest.raises(BadInput):
        a.get_or_build_dir(key, "x", bad)
    with pytest.raises(BadInput) as err:
        b.get_or_build_dir(key, "x", bad)
    assert calls == [1] and err.value.message == "truncated XSpace profile" and err.value.file == "host03.xplane.pb"
    assert b.shared.stats["failures"] == 1 and b._failure_path(key).exists()
    with pytest.raises(BadInput):  # from its own folder now: the record is not asked again
        b.get_or_build_dir(key, "x", bad)
    assert b.shared.stats["failures"] == 1 and calls == [1]
    c = _replica(tmp_path, "c", emulator, prefix)
    record = orjson.loads(c.shared.store.read(f"v2/{key[:2]}/{key}.failed"))
    c.shared.store.delete(f"v2/{key[:2]}/{key}.failed")
    record["version"] = "0.0.0-other"
    assert c.shared.store.create(f"v2/{key[:2]}/{key}.failed", orjson.dumps(record))
    path = c.get_or_build_dir(key, "x", lambda p, folder: (folder / "f").write_bytes(b"fixed"))
    assert (path / "f").read_bytes() == b"fixed"
    c.shared.flush()
