"""Hostile packs in the shared cache (issue 32 item 3; cache/pack.py, cache/shared.py).

A replica's commit is create-only, its pack a plain upload: whoever writes to the bucket
can replace a committed entry's pack. Each kind of replacement that
profscope.testing.hostile_packs builds is put in place of every pack a real replica
committed (a real trace index and JSON results of a real profile), in a real GCS emulator
through gcsfs, and a second replica then (1) copies each entry writing no more bytes than
the commit names, as the kernel counts them (``wchar`` of /proc/self/io: every write(2)
of this process, the download's included; a socket's are not), and refuses it, and (2)
answers every view 200 with the first replica's data, converting the entries itself."""

from __future__ import annotations

import io
import os

import orjson
import pytest

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # before gcsfs is imported

from fastapi.testclient import TestClient  # noqa: E402

from profscope.app.workspace import Workspace  # noqa: E402
from profscope.cache import pack  # noqa: E402
from profscope.cache.shared import RECORD_VERSION, SharedRecord  # noqa: E402
from profscope.cache.store import DiskCache  # noqa: E402
from profscope.cache.worker import WorkerPool  # noqa: E402
from profscope.server import create_app  # noqa: E402
from profscope.storage import LogDir  # noqa: E402
from profscope.storage.object_store import ObjectStore  # noqa: E402
from profscope.testing import hostile_packs  # noqa: E402
from profscope.testing.gcs_emulator import GcsEmulator  # noqa: E402
from profscope.testing.pod_session import build_pod_session  # noqa: E402

BUCKET = "packs"
HOST = "host01"
# Every view of one host that reads a shared entry: the trace index (a folder) and the
# JSON results (one gzip file each) that trace_viewer@ and the memory profile keep.
VIEWS = [("/api/trace/window", {}), ("/api/trace/summary", {}),
         ("/data/plugin/profile/data", {"tag": "trace_viewer@"}),
         ("/data/plugin/profile/data", {"tag": "memory_profile"})]
# Bytes this process may write during a copy besides the entry's: the warning the refusal
# logs, which pytest captures into a temporary file.
LOG_SLACK = 16 << 10


@pytest.fixture(scope="module")
def emulator():
    with GcsEmulator(BUCKET) as url:
        yield url


def _store(emulator, prefix: str) -> ObjectStore:
    return ObjectStore(f"gs://{BUCKET}/{prefix}", storage_options={"endpoint_url": emulator, "token": "anon"})


def _client(logdir, cache: DiskCache) -> TestClient:
    return TestClient(create_app(Workspace(LogDir(str(logdir), listing_ttl=0), cache)))


def _answers(client: TestClient) -> list:
    out = []
    for path, params in VIEWS:
        res = client.get(path, params={"run": "pod", "host": HOST, **params})
        assert res.status_code == 200, (path, params, res.status_code, res.text[:300])
        out.append(res.json())
    return out


@pytest.fixture(scope="module")
def honest(emulator, tmp_path_factory):
    """A session of real profiles; replica A's answers to every view of HOST, and the
    objects of the record it published them to (name -> bytes)."""
    root = tmp_path_factory.mktemp("honest")
    build_pod_session(root / "logs", hosts=2)
    store = _store(emulator, "honest")
    a = DiskCache(root / "a", workers=WorkerPool(enabled=False), shared=SharedRecord(store, writer="a"))
    answers = _answers(_client(root / "logs", a))
    a.shared.flush()
    assert a.shared.stats["published"] >= 2 and a.shared.stats["errors"] == 0, a.shared.stats
    top = f"{BUCKET}/honest/"
    objects = {p[len(top):]: store.fs.cat_file(p) for p in store.fs.find(f"{BUCKET}/honest")}
    kinds = {orjson.loads(v)["kind"] for k, v in objects.items() if k.endswith(".commit")}
    assert kinds == {"dir", "blob"}, kinds  # a trace index and JSON results
    return root / "logs", answers, objects


def _plant(store: ObjectStore, objects: dict[str, bytes], tamper) -> list[tuple[str, dict]]:
    """The honest record copied to ``store`` with every pack replaced by ``tamper(pack)``
    (the commits as they were); (key, commit) of each entry."""
    commits = []
    for name, data in sorted(objects.items()):
        if name.endswith("/entry.tar"):
            store.write(name, tamper(data))
        elif name.endswith(".commit"):
            assert store.create(name, data)
            m = orjson.loads(data)
            commits.append((m["key"], m))
        else:
            store.write(name, data)
    return commits


def _written() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


@pytest.mark.parametrize("kind", sorted(hostile_packs.KINDS))
def test_a_hostile_pack_is_refused_having_written_no_more_than_its_commit_names(kind, honest, emulator, tmp_path):
    logdir, answers, objects = honest
    store = _store(emulator, f"hostile-{kind}")
    make = hostile_packs.KINDS[kind]
    small = {"tar_bomb": lambda p: make(p, expanded=64 << 20)}.get(kind, make)  # 64 MiB: 64 KB gzipped
    commits = _plant(store, objects, small)

    # (1) each copy, alone: refused, and no more written than the commit names
    record = SharedRecord(store, writer="b")
    for i, (key, m) in enumerate(commits):
        named = sum(size for _, size, _ in m["files"])
        dest = tmp_path / f"copy{i}"
        dest.mkdir()
        before = _written()
        assert not record._fetch(key, m, dest), (kind, m["kind"])
        written = _written() - before
        assert written <= named + LOG_SLACK, (kind, m["kind"], written, named)
        assert "PackRefused" in record.stats["lastError"], record.stats
    assert record.stats["refused"] == len(commits) and record.stats["fetched"] == 0, record.stats

    # (2) a replica on that record converts the entries itself: the same answers, all 200
    b = DiskCache(tmp_path / "b", workers=WorkerPool(enabled=False), shared=SharedRecord(store, writer="b"))
    assert _answers(_client(logdir, b)) == answers
    b.shared.flush()
    assert b.shared.stats["fetched"] == 0 and b.shared.stats["refused"] == len(commits), b.shared.stats
    assert b.shared.stats["lostRace"] == len(commits)  # the hostile commits stay; b keeps its own copy


def test_an_honest_pack_is_copied_byte_for_byte(honest, emulator, tmp_path):
    """The same checks pass every pack a replica writes: the second replica copies and
    converts nothing."""
    logdir, answers, objects = honest
    store = _store(emulator, "copied")
    commits = _plant(store, objects, lambda p: p)
    b = DiskCache(tmp_path / "b", workers=WorkerPool(enabled=False), shared=SharedRecord(store, writer="b"))
    started = []
    b.progress.start = lambda k, label, _start=b.progress.start: started.append(label) or _start(k, label)
    assert _answers(_client(logdir, b)) == answers
    assert started == [] and b.shared.stats["fetched"] == len(commits) and b.shared.stats["refused"] == 0


def _counting(data: bytes):
    f = io.BytesIO(data)
    f.read_total = 0
    read = f.read

    def counted(n=-1):
        chunk = read(n)
        f.read_total += len(chunk)
        return chunk

    f.read = counted
    return f


def _pack_of(objects: dict[str, bytes], kind: str) -> tuple[bytes, dict]:
    """An honest pack of a ``kind`` entry and the files its commit names."""
    for name, data in sorted(objects.items()):
        if name.endswith(".commit") and orjson.loads(data)["kind"] == kind:
            return objects[name[:-len(".commit")] + "/a/entry.tar"], pack.named_files(orjson.loads(data))
    raise AssertionError(kind)


def _on_disk(folder) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_a_pack_is_read_no_further_than_the_first_byte_past_its_commit(honest, tmp_path):
    """The pack stream itself, with no object size to check first (as when an entry is
    large enough that a bomb fits within its bound): never more read from it than
    :func:`pack.pack_bound` + 1 bytes, nothing written past the sizes the commit names.
    A gzip bomb stops at its first block, a member header that gives another size than
    the commit's at that header, a metadata header over 64 KiB before tarfile reads it,
    one under 64 KiB at the bound, and an honest pack followed by junk after its last file."""
    _, _, objects = honest
    index_pack, files = _pack_of(objects, "dir")
    bound = pack.pack_bound(files)
    named = sum(size for size, _ in files.values())
    cases = [("bomb", hostile_packs.tar_bomb(index_pack, expanded=64 << 20), "not an uncompressed tar"),
             ("beyond", hostile_packs.beyond_sizes(index_pack), r"is [\d,]+ bytes, its commit says"),
             ("meta", hostile_packs.metadata_bomb(index_pack, size=8 << 20), "metadata header"),
             ("renamed", hostile_packs.renamed(index_pack), "which its commit does not name"),
             ("garbled", hostile_packs.garbled(index_pack), "not its SHA-256")]
    for name, data, error in cases:
        src = _counting(data)
        with pytest.raises(pack.PackRefused, match=error):
            pack.extract(src, files, tmp_path / name)
        assert src.read_total <= bound + 1 and _on_disk(tmp_path / name) <= named, (name, src.read_total, bound)
    assert len(cases[1][1]) > len(cases[2][1]) > bound  # what was not read

    blob_pack, blob_files = _pack_of(objects, "blob")  # one small file: a 60 KB header is past its bound
    src = _counting(hostile_packs.metadata_bomb(blob_pack, size=60_000))
    with pytest.raises(pack.PackRefused, match="goes on past"):
        pack.extract(src, blob_files, tmp_path / "past")
    assert src.read_total == pack.pack_bound(blob_files) + 1 and _on_disk(tmp_path / "past") == 0

    junk = _counting(index_pack + os.urandom(1 << 20))
    assert pack.extract(junk, files, tmp_path / "junk") <= len(index_pack)
    assert junk.read_total <= bound + 1 and _on_disk(tmp_path / "junk") == named


def test_a_commit_of_the_earlier_layout_is_converted_here_and_published_with_checksums(honest, emulator, tmp_path):
    """Record version 1 named sizes only, so a garbled pack of the right sizes passed:
    such a commit is not read (its layout is another folder); the replica converts the
    entry and publishes it in the current layout, which other replicas then copy."""
    logdir, answers, objects = honest
    store = _store(emulator, "earlier")
    for name, data in objects.items():  # the same entries, as version 1 wrote them
        name = name.replace(f"v{RECORD_VERSION}/", "v1/", 1)
        if name.endswith(".commit"):
            m = orjson.loads(data)
            m.update(version=1, files=[[rel, size] for rel, size, _ in m["files"]])
            data = orjson.dumps(m)
        store.write(name, data)
    b = DiskCache(tmp_path / "b", workers=WorkerPool(enabled=False), shared=SharedRecord(store, writer="b"))
    assert _answers(_client(logdir, b)) == answers
    b.shared.flush()
    assert b.shared.stats["fetched"] == 0 and b.shared.stats["published"] >= 2, b.shared.stats
    c = DiskCache(tmp_path / "c", workers=WorkerPool(enabled=False), shared=SharedRecord(store, writer="c"))
    assert _answers(_client(logdir, c)) == answers
    assert c.shared.stats["fetched"] == b.shared.stats["published"] and c.shared.stats["published"] == 0


def test_a_json_result_committed_under_another_file_name_is_converted_here(emulator, tmp_path):
    """A commit of a JSON result whose one file is not the result's (its pack and
    checksums consistent, as a writer of the bucket could make them): the copy holds no
    result, so the replica converts it, where it once raised FileNotFoundError (a 500)."""
    from profscope.cache.store import cache_key

    store = _store(emulator, "other-name")
    key = cache_key("test", "other-name")
    (tmp_path / "other.json.gz").write_bytes(b"\x1f\x8b not the result")
    with open(tmp_path / "entry.tar", "wb") as f:
        files = pack.write_pack([("other.json.gz", tmp_path / "other.json.gz")], f)
    store.write(f"v{RECORD_VERSION}/{key[:2]}/{key}/x/entry.tar", (tmp_path / "entry.tar").read_bytes())
    assert store.create(f"v{RECORD_VERSION}/{key[:2]}/{key}.commit", orjson.dumps(
        {"version": RECORD_VERSION, "key": key, "kind": "blob", "writer": "x", "files": files, "time": 0}))
    b = DiskCache(tmp_path / "b", workers=WorkerPool(enabled=False), shared=SharedRecord(store, writer="b"))
    assert b.get_or_compute_json(key, "x", lambda p: {"converted": "here"}) == {"converted": "here"}
    b.shared.flush()
    assert b.shared.stats["fetched"] == 1 and b.shared.stats["lostRace"] == 1  # copied, held no result
