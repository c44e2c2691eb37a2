"""The disk cache's limit (LRU eviction), its start-up clean-up and a full disk (507).

Real files, real processes: the clean-up test kills a process in the middle of a build
with SIGKILL; the full-disk test fills a real (tiny tmpfs) file system, mounted in a user
and mount namespace (``unshare -r -m``) so no root is needed.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pytest

from profscope.cache import eviction
from profscope.cache.store import DiskCache, cache_key
from profscope.cache.worker import WorkerPool
from profscope.errors import CacheFull, ProfscopeError

HOUR = 3600.0


def key(i) -> str:
    return cache_key("test_cache_limits", i)


def in_process(root, limit) -> DiskCache:
    """A cache whose builds run in this process (so a test may monkeypatch them)."""
    return DiskCache(root, limit=limit, workers=WorkerPool(enabled=False))


def age(path: Path, seconds_ago: float) -> None:
    t = time.time() - seconds_ago
    os.utime(path, (t, t))


def on_disk(root: Path) -> int:
    return sum(e.size for e in eviction.scan(root))


def keys_on_disk(root: Path) -> set[str]:
    return {e.key for e in eviction.scan(root)}


def fill_dir(nbytes: int):
    def build(_progress, folder: Path):
        (folder / "a.bin").write_bytes(b"a" * (nbytes // 2))
        (folder / "sub").mkdir()
        (folder / "sub" / "b.bin").write_bytes(b"b" * (nbytes - nbytes // 2))

    return build


# -- LRU ---------------------------------------------------------------------------------


def test_least_recently_used_goes_first_and_the_new_entry_stays(tmp_path):
    cache = in_process(tmp_path, limit=5000)
    for i in range(5):
        cache.put(key(i), b"x" * 1000)
        age(cache._path(key(i)), HOUR - i * 60)  # 0 is the oldest, 4 the newest
    cache.put(key(5), b"x" * 1000)  # 6000 > 5000: one must go
    assert keys_on_disk(tmp_path) == {key(i) for i in range(1, 6)}
    cache.put(key(6), b"y" * 2000)  # two more go: the oldest, in order
    assert keys_on_disk(tmp_path) == {key(3), key(4), key(5), key(6)}
    assert cache.size == on_disk(tmp_path) <= 5000
    # an entry over the limit on its own is still kept: it was just written, and asked for
    cache.put(key(7), b"z" * 9000)
    assert keys_on_disk(tmp_path) == {key(7)} and cache.get(key(7)) == b"z" * 9000
    assert not list(tmp_path.rglob(".tmp-*"))


def test_a_hit_refreshes_recency(tmp_path):
    cache = in_process(tmp_path, limit=3000)
    for i in range(3):
        cache.put(key(i), b"x" * 1000)
        age(cache._path(key(i)), HOUR - i * 60)
    before = cache._path(key(0)).stat().st_mtime
    assert cache.get(key(0)) == b"x" * 1000  # the oldest, used now
    assert cache._path(key(0)).stat().st_mtime > before + HOUR - 120
    cache.put(key(3), b"x" * 1000)
    assert keys_on_disk(tmp_path) == {key(0), key(2), key(3)}  # 1 went, not 0

    # a folder's hit (get_or_build_dir) refreshes it the same way
    folder = cache.get_or_build_dir(key("d"), "d", fill_dir(500))
    age(folder, HOUR)
    assert cache.get_or_build_dir(key("d"), "d", fill_dir(500)) == folder
    assert folder.stat().st_mtime > time.time() - 60


def test_a_hit_touches_at_most_once_a_minute(tmp_path):
    cache = in_process(tmp_path, limit=10**6)
    cache.put(key(0), b"x")
    path = cache._path(key(0))
    age(path, 30)  # used half a minute ago: not touched again
    stamp = path.stat().st_mtime_ns
    for _ in range(100):
        cache.get(key(0))
    assert path.stat().st_mtime_ns == stamp
    age(path, 61)
    cache.get(key(0))
    assert path.stat().st_mtime > time.time() - 5


def test_the_limit_holds_over_many_puts_and_builds(tmp_path):
    limit = 60_000
    cache = in_process(tmp_path, limit=limit)
    cache.in_use_s = 0  # no folder is being read by anyone here (see the next test)
    rng = __import__("random").Random(7)
    for i in range(300):
        if i % 5 == 0:
            cache.get_or_build_dir(key(("dir", i)), "d", fill_dir(rng.randrange(1000, 12_000)))
        else:
            cache.get_or_compute(key(i), "c", lambda _p: {"pad": "%x" % rng.getrandbits(8 * rng.randrange(100, 3000))})
        assert cache.size == on_disk(tmp_path) <= limit, i
    assert len(keys_on_disk(tmp_path)) > 5
    assert not list(tmp_path.rglob(".tmp-*"))


def test_a_folder_in_use_is_kept_over_the_limit_then_evicted(tmp_path):
    cache = in_process(tmp_path, limit=10_000)
    a = cache.get_or_build_dir(key("a"), "a", fill_dir(8000))
    b = cache.get_or_build_dir(key("b"), "b", fill_dir(8000))  # a was used just now: kept
    assert a.is_dir() and b.is_dir() and cache.size == 16_000
    assert cache.last_eviction.kept_in_use == 1
    age(a, eviction.IN_USE_S + 1)  # nobody used it for five minutes
    cache.evict()
    assert not a.exists() and b.is_dir() and cache.size == 8000
    # the next request for it builds it again, in the same place
    assert cache.get_or_build_dir(key("a"), "a", fill_dir(8000)) == a and a.is_dir()


def test_an_entry_being_built_is_never_evicted(tmp_path):
    """The key's lock is held by a build: another process evicting skips that entry."""
    cache = in_process(tmp_path, limit=1000)
    cache.put(key(0), b"x" * 900)
    age(cache._path(key(0)), HOUR)
    with cache._single_flight(key(0)):  # as if a build of key 0 (re-)wrote it now
        other = in_process(tmp_path, limit=1000)
        other.put(key(1), b"y" * 900)
        assert keys_on_disk(tmp_path) == {key(0), key(1)}
    other.put(key(2), b"z" * 200)  # (more than a tenth of the limit: see the last test)
    assert key(0) not in keys_on_disk(tmp_path)


def test_an_evicted_trace_index_is_rebuilt_for_the_next_request(tmp_path, demo_logdir):
    """A trace index is memory-mapped by the server (tools/trace_index.IndexCache), and
    some of its files are opened later: once it is evicted, the next request builds it
    again at the same path, and the open index keeps working."""
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.server import create_app
    from profscope.storage import LogDir

    cache = DiskCache(tmp_path / "cache", limit="100MB")
    client = TestClient(create_app(Workspace(LogDir(str(demo_logdir), listing_ttl=0), cache)))
    run = next(r["name"] for r in client.get("/api/runs").json()["runs"] if r["name"].startswith("transformer/"))
    first = client.get("/api/trace/window", params={"run": run})
    assert first.status_code == 200
    [index] = [e for e in eviction.scan(cache.root) if e.is_dir]
    age(index.path, HOUR)
    cache.limit = 1
    cache.evict()
    assert not index.path.exists()
    again = client.get("/api/trace/window", params={"run": run})
    assert again.status_code == 200 and again.json() == first.json()
    assert index.path.is_dir()
    found = client.get("/api/trace/search", params={"run": run, "q": "a"}).json()["matches"]
    assert client.get("/api/trace/event", params={"run": run, "id": found[0]["id"]}).status_code == 200


# -- several processes on one folder ----------------------------------------------------

WORKER = textwrap.dedent("""
    import hashlib, random, sys, time
    from profscope.cache.store import DiskCache, cache_key
    from profscope.cache.worker import WorkerPool

    root, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    cache = DiskCache(root, limit=100_000, workers=WorkerPool(enabled=False))
    cache.in_use_s = 0
    computed = evictions = 0
    real_evict = cache.evict

    def counted(protect=()):
        global evictions
        evictions += 1
        return real_evict(protect)

    cache.evict = counted

    def pad(n):  # hex of a hash stream: about half of it survives gzip
        return hashlib.shake_256(str(n).encode()).hexdigest(1000 + 100 * n)
    for i in range(150):
        n = rng.randrange(40)  # keys shared by every process: same key, same value
        k = cache_key("shared", n)

        def compute(_p, n=n):
            global computed
            computed += 1
            return {"n": n, "pad": pad(n)}

        got = cache.get_or_compute_json(k, "c", compute)
        assert got["n"] == n and got["pad"] == pad(n), n
        if i % 10 == 0:
            d = cache.get_or_build_dir(cache_key("dir", n), "d", lambda p, f, n=n: (f / "x").write_bytes(bytes([n]) * 9000))
            try:
                assert (d / "x").read_bytes() == bytes([n]) * 9000
            except FileNotFoundError:
                pass  # evicted by another process since (in_use_s = 0 here)
    print(computed, evictions)
""")


def test_processes_sharing_the_folder_keep_it_whole_and_bounded(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), str(seed)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    computed = [int(out.split()[0]) for out, _ in outs]
    evictions = [int(out.split()[1]) for out, _ in outs]
    assert sum(computed) < 4 * 150  # hits, shared between processes
    assert all(evictions), evictions  # each process evicted, while the others wrote
    # every entry left is whole (each is checked against what its key means)
    for e in eviction.scan(tmp_path):
        if not e.is_dir:
            value = orjson.loads(gzip.decompress(e.path.read_bytes()))
            assert value["pad"] == hashlib.shake_256(str(value["n"]).encode()).hexdigest(1000 + 100 * value["n"])
    assert not list(tmp_path.rglob(".tmp-*"))
    # each process counts the others' writes when it evicts (or once a minute): the folder
    # may go over by what the others wrote since; the next write brings it back
    assert on_disk(tmp_path) <= 4 * 100_000
    again = DiskCache(tmp_path, limit=100_000)
    again.in_use_s = 0
    again.evict()
    assert on_disk(tmp_path) <= 100_000
    assert again.cleanup.locks >= 1  # the lock files of the four processes were tidied


# -- start-up clean-up --------------------------------------------------------------------

BUILDER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from profscope.cache.store import DiskCache, cache_key
    from profscope.cache.worker import WorkerPool

    root, what = sys.argv[1], sys.argv[2]
    cache = DiskCache(root, workers=WorkerPool(enabled={enabled}))

    def build(progress, folder):
        for i in range(8):  # 8 MB written, then the build is stuck
            (folder / f"col{{i}}.npy").write_bytes(os.urandom(1 << 20))
        Path(root, "started").write_text(str(os.getpid()))
        time.sleep(3600)

    if what == "dir":
        cache.get_or_build_dir(cache_key("big index"), "indexing", build)
    else:  # a put stuck between writing its temporary and renaming it
        real = os.replace
        def stuck(src, dst):
            if str(src).endswith(".part"):
                Path(root, "started").write_text(str(os.getpid()))
                time.sleep(3600)
            return real(src, dst)
        os.replace = stuck
        cache.put(cache_key("big result"), os.urandom(5 << 20))
""")


def _start_stuck(root: Path, what: str, workers: bool) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", BUILDER.format(enabled=workers), str(root), what],
                            stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (root / "started").exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the builder never started"
        time.sleep(0.05)
    (root / "started").unlink()
    return proc


def _wait_lock_free(root: Path, k: str) -> None:
    """A killed server's worker child is killed with it (PR_SET_PDEATHSIG), a moment later."""
    deadline = time.monotonic() + 60
    while True:
        with eviction.try_key_lock(root, k, create=False) as free:
            pass
        if free:
            return
        assert time.monotonic() < deadline, "the key lock is still held after the kill"
        time.sleep(0.05)


@pytest.mark.parametrize("what,workers", [("dir", True), ("dir", False), ("part", False)])
def test_what_a_killed_process_left_is_removed_at_start_but_not_a_live_build(tmp_path, what, workers):
    k = cache_key("big index" if what == "dir" else "big result")
    proc = _start_stuck(tmp_path, what, workers)
    try:
        [tmp] = list(tmp_path.glob(f"*/.tmp-{k}-*"))
        live = DiskCache(tmp_path)  # another process opening the cache while it builds
        assert tmp.exists() and live.cleanup.temporaries == 0  # its builder is alive: kept
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    _wait_lock_free(tmp_path, k)
    assert tmp.exists() and eviction.tree_size(tmp) >= 5 << 20  # what a crash leaves
    t0 = time.process_time()  # CPU seconds: a busy machine must not fail it
    cache = DiskCache(tmp_path)
    took = time.process_time() - t0
    assert not tmp.exists() and not list(tmp_path.rglob(".tmp-*"))
    assert cache.cleanup.temporaries == 1 and cache.cleanup.freed >= 5 << 20
    assert not list(tmp_path.glob("*/*.lock"))  # and its stale lock file
    assert took < 2, took
    assert "removed 1 half-written temporary" in cache.describe()
    # the key is usable again
    if what == "dir":
        assert (cache.get_or_build_dir(k, "again", fill_dir(10)) / "a.bin").exists()


def test_an_orphan_temporary_without_its_key_goes_once_an_hour_old(tmp_path):
    shard = tmp_path / "ab"
    shard.mkdir()
    (shard / ".tmp-x1y2z3.d").mkdir()
    (shard / ".tmp-x1y2z3.d" / "f").write_bytes(b"1" * 100)
    (shard / ".tmp-q9w8.part").write_bytes(b"2" * 100)
    assert DiskCache(tmp_path).cleanup.temporaries == 0  # recent: may be someone's
    for p in (shard / ".tmp-x1y2z3.d" / "f", shard / ".tmp-x1y2z3.d", shard / ".tmp-q9w8.part"):
        age(p, 2 * HOUR)
    assert DiskCache(tmp_path).cleanup.temporaries == 2
    assert list(shard.iterdir()) == []


# -- the limit's settings ----------------------------------------------------------------


def test_limit_from_argument_environment_or_default(tmp_path, monkeypatch):
    monkeypatch.delenv(eviction.ENV_VAR, raising=False)
    fs = os.statvfs(tmp_path).f_blocks * os.statvfs(tmp_path).f_frsize
    cache = DiskCache(tmp_path)
    assert cache.limit == int(min(max(fs * 0.1, 1 << 30), 50 << 30, fs / 2))
    assert "default" in cache.limit_source
    assert DiskCache(tmp_path, limit="20GiB").limit == 20 << 30
    assert DiskCache(tmp_path, limit="500MB").limit == 500_000_000
    assert DiskCache(tmp_path, limit="5%").limit == int(fs * 0.05)
    monkeypatch.setenv(eviction.ENV_VAR, "3GiB")
    assert DiskCache(tmp_path).limit == 3 << 30 and "PROFSCOPE_CACHE_SIZE" in DiskCache(tmp_path).limit_source
    assert DiskCache(tmp_path, limit="1GiB").limit == 1 << 30  # the option wins
    with pytest.raises(ProfscopeError, match="not a size"):
        DiskCache(tmp_path, limit="lots")
    with pytest.raises(ProfscopeError, match="between 0 and 100"):
        DiskCache(tmp_path, limit="150%")


def test_serve_prints_the_cache_size_and_limit(tmp_path):
    DiskCache(tmp_path / "c").put(key(0), b"x" * 2048)
    proc = subprocess.Popen([sys.executable, "-m", "profscope", "serve", "--demo", "--port", "0",
                             "--cache-dir", str(tmp_path / "c"), "--cache-size", "2GiB"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
    finally:
        proc.kill()
        proc.wait()
    assert f"cache: {tmp_path / 'c'} (2.0 KiB of 2.0 GiB used; limit: --cache-size 2GiB)" in "".join(lines), lines


# -- a full disk ---------------------------------------------------------------------------

FULL_DISK = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from fastapi.testclient import TestClient
    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.cli import demo_logdir
    from profscope.server import create_app
    from profscope.storage import LogDir

    root = Path(sys.argv[1]) / "cache"
    st = os.statvfs(sys.argv[1])
    assert st.f_blocks * st.f_frsize <= 2 << 20, "not the tiny file system"
    client = TestClient(create_app(Workspace(LogDir(str(demo_logdir()), listing_ttl=0), DiskCache(root))))
    run = next(r["name"] for r in client.get("/api/runs").json()["runs"] if r["name"].startswith("transformer/"))

    def check_507(r):
        assert r.status_code == 507, (r.status_code, r.text[:500])
        body = r.json()
        assert body["ok"] is False and body["status"] == 507, body
        assert str(root) in body["error"] and body["file"] == str(root), body
        for hint in ("--cache-dir", "--cache-size", "Free some space"):
            assert hint in body["error"], body
        assert not [p for p in root.rglob(".tmp-*")], list(root.rglob(".tmp-*"))  # nothing half-written

    def fill(leave):
        st = os.statvfs(root)
        with open(Path(sys.argv[1], "filler"), "ab") as f:
            f.write(b"f" * max(0, st.f_bavail * st.f_frsize - leave))

    # the disk filled (by something else) to its last 300 kB: a trace index (900 kB)
    # fills it up while it is built
    fill(300_000)
    check_507(client.get("/api/trace/window", params={"run": run}))
    # to its very last byte: a small result, written by put, does not fit either
    fill(0)
    check_507(client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_profile", "host": "demo-host"}))
    # space freed: the same requests convert (a full disk was not remembered as a bad input)
    Path(sys.argv[1], "filler").unlink()
    r = client.get("/api/trace/window", params={"run": run})
    assert r.status_code == 200, r.text[:500]
    r = client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_profile", "host": "demo-host"})
    assert r.status_code == 200, r.text[:500]
    print("FULL-DISK-OK", r.status_code)
""")


def _tiny_fs_command(folder: Path) -> list[str] | None:
    """A command line running FULL_DISK on a 2 MiB tmpfs at ``folder``, or None.

    First a user and mount namespace (``unshare -r -m``: no privilege needed where the
    kernel allows it); else, where passwordless sudo exists (CI runners), a mount namespace
    made by root in which the script runs as this user again (``setpriv``)."""
    mount = f"mount -t tmpfs -o size=2m,uid={os.getuid()},gid={os.getgid()} none {folder}"
    run_it = f'"$0" -c "$1" {folder}'
    candidates = []
    if shutil.which("unshare"):
        candidates.append((["unshare", "-r", "-m", "sh", "-c"], f"{mount} && exec {run_it}"))
    if shutil.which("sudo") and shutil.which("setpriv"):
        back = f"setpriv --reuid={os.getuid()} --regid={os.getgid()} --clear-groups"
        candidates.append((["sudo", "-n", "unshare", "-m", "sh", "-c"], f"{mount} && exec {back} {run_it}"))
    for prefix, script in candidates:
        probe = subprocess.run([*prefix, f"{mount} && test -w {folder}"], capture_output=True, text=True)
        if probe.returncode == 0:
            return [*prefix, script, sys.executable, FULL_DISK]
    return None


def test_a_full_disk_is_a_507_naming_the_cache_folder(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    command = _tiny_fs_command(folder)
    if command is None:
        message = ("cannot mount a tiny tmpfs: `unshare -r -m` (user and mount namespaces) is refused here and "
                   "there is no passwordless sudo; allow unprivileged user namespaces (sysctl "
                   "kernel.unprivileged_userns_clone=1, and on Ubuntu 24.04 "
                   "kernel.apparmor_restrict_unprivileged_userns=0) to run this test")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "FULL-DISK-OK" in done.stdout, done.stdout + done.stderr[-3000:]


def test_a_file_size_limit_is_a_cache_full_too(tmp_path):
    """EFBIG (RLIMIT_FSIZE, which needs no privilege) in put and in a build: CacheFull,
    nothing left behind, and the cache still works for what fits."""
    script = textwrap.dedent("""
        import resource, signal, sys
        from profscope.cache.store import DiskCache, cache_key
        from profscope.cache.worker import WorkerPool
        from profscope.errors import CacheFull
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        cache = DiskCache(sys.argv[1], workers=WorkerPool(enabled=True))
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        for what in ("put", "build"):
            try:
                if what == "put":
                    cache.put(cache_key(1), b"x" * 200_000)
                else:
                    cache.get_or_build_dir(cache_key(2), "b", lambda p, f: (f / "x").write_bytes(b"y" * 200_000))
            except CacheFull as e:
                assert e.status == 507 and sys.argv[1] in e.message and "quota or file size limit" in e.message, e.message
            else:
                raise AssertionError(what + " did not fail")
        cache.put(cache_key(3), b"z" * 1000)
        assert cache.get(cache_key(3)) == b"z" * 1000
        print("EFBIG-OK")
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert "EFBIG-OK" in done.stdout, done.stdout + done.stderr[-3000:]
    assert not list(tmp_path.rglob(".tmp-*"))
    assert keys_on_disk(tmp_path) == {cache_key(3)}


def test_cache_full_is_a_507_profscope_error():
    assert issubclass(CacheFull, ProfscopeError) and CacheFull.status == 507


def test_over_the_limit_with_only_folders_in_use_small_writes_do_not_rescan(tmp_path, monkeypatch):
    cache = in_process(tmp_path, limit=10_000)
    cache.get_or_build_dir(key("a"), "a", fill_dir(8000))
    cache.get_or_build_dir(key("b"), "b", fill_dir(8000))  # over: both in use
    scans = []
    real = eviction.evict
    monkeypatch.setattr(eviction, "evict", lambda *a, **k: scans.append(1) or real(*a, **k))
    for i in range(20):
        cache.put(key(i), b"x" * 20)  # small writes a moment later: counted, no rescan
    assert scans == [] and cache.size == 16_000 + 20 * 20
    cache.put(key("big"), b"x" * 1500)  # more than a tenth of the limit: evicts again
    assert scans == [1]
    assert key(0) not in keys_on_disk(tmp_path)  # the oldest small result went
