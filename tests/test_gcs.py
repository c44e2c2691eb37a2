"""gs:// log directories through a real gcsfs client against a real local GCS emulator."""

from __future__ import annotations

import os
import socket
import time

import pytest

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # before gcsfs is imported

BUCKET = "profiles"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def emulator():
    from gcp_storage_emulator.server import create_server

    port = _free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def bucket_logdir(emulator, demo_logdir):
    import gcsfs

    fs = gcsfs.GCSFileSystem(endpoint_url=emulator, token="anon", skip_instance_cache=True)
    for path in demo_logdir.rglob("*"):
        if path.is_file():
            fs.pipe(f"{BUCKET}/logs/{path.relative_to(demo_logdir).as_posix()}", path.read_bytes())
    return f"gs://{BUCKET}/logs"


@pytest.fixture
def gcs_client(make_client, emulator, bucket_logdir):
    return make_client(bucket_logdir, endpoint_url=emulator, token="anon")


def test_bucket_serves_the_same_runs_as_its_local_copy(gcs_client, demo_client):
    local = demo_client.get("/data/plugin/profile/runs").json()
    remote = gcs_client.get("/data/plugin/profile/runs").json()
    assert remote == local and len(remote) >= 4
    for run in remote:
        for endpoint in ("hosts", "run_tools", "module_list"):
            a = demo_client.get(f"/data/plugin/profile/{endpoint}", params={"run": run})
            b = gcs_client.get(f"/data/plugin/profile/{endpoint}", params={"run": run})
            assert (b.status_code, b.text) == (a.status_code, a.text), (run, endpoint)


def test_bucket_identity_uses_the_object_generation(emulator, bucket_logdir):
    from profscope.storage import LogDir

    logdir = LogDir(bucket_logdir, storage_options={"endpoint_url": emulator, "token": "anon"})
    files = logdir.files()
    xplanes = [f for f in files.values() if f.name.endswith(".xplane.pb")]
    assert xplanes and all(f.version for f in xplanes)
    assert all(f.size > 0 for f in xplanes)


def test_new_objects_appear_after_the_listing_ttl(emulator, bucket_logdir, demo_logdir):
    import gcsfs

    from profscope.storage import LogDir

    logdir = LogDir(bucket_logdir, storage_options={"endpoint_url": emulator, "token": "anon"}, listing_ttl=0.2)
    before = set(logdir.files())
    fs = gcsfs.GCSFileSystem(endpoint_url=emulator, token="anon", skip_instance_cache=True)
    src = next(demo_logdir.glob("mlp/plugins/profile/*/demo-host.xplane.pb"))
    fs.pipe(f"{BUCKET}/logs/new/plugins/profile/2027_01_01_00_00_00/h2.xplane.pb", src.read_bytes())
    time.sleep(0.3)
    after = set(logdir.files())
    assert after - before == {"new/plugins/profile/2027_01_01_00_00_00/h2.xplane.pb"}
    fs.rm(f"{BUCKET}/logs/new/plugins/profile/2027_01_01_00_00_00/h2.xplane.pb")


def test_bucket_paths_cannot_escape_the_prefix(gcs_client, emulator):
    import gcsfs

    fs = gcsfs.GCSFileSystem(endpoint_url=emulator, token="anon", skip_instance_cache=True)
    fs.pipe(f"{BUCKET}/private/plugins/profile/s/h.xplane.pb", b"secret")
    for params in ({"session_path": "../private/plugins/profile/s"}, {"session_path": f"gs://{BUCKET}/private/plugins/profile/s"}, {"run_path": "gs://other-bucket/x"}):
        res = gcs_client.get("/data/plugin/profile/runs", params=params)
        assert res.status_code == 400 and res.json()["ok"] is False
    res = gcs_client.get("/data/plugin/profile/runs", params={"session_path": f"gs://{BUCKET}/logs/dumps/mlp"})
    assert res.status_code == 200 and res.json() == []


def test_traces_under_any_json_name_are_sniffed_with_ranged_reads(emulator, demo_logdir):
    """``rank-0.json.gz`` is found by its first bytes, read with a ranged request through
    gcsfs; a JSON file that is no trace stays out."""
    import gcsfs

    from profscope.formats import sniff
    from profscope.app.discovery import discover
    from profscope.model.catalog import RunKind
    from profscope.storage import LogDir

    fs = gcsfs.GCSFileSystem(endpoint_url=emulator, token="anon", skip_instance_cache=True)
    trace = (demo_logdir / "torch" / "mlp_train.pt.trace.json.gz").read_bytes()
    assert len(trace) > sniff.HEAD_BYTES
    fs.pipe(f"{BUCKET}/sniff/dist/rank-0.json.gz", trace)
    fs.pipe(f"{BUCKET}/sniff/config.json", b'{"schemaVersion": 2, "mediaType": "x"}')
    logdir = LogDir(f"gs://{BUCKET}/sniff", storage_options={"endpoint_url": emulator, "token": "anon"})
    sizes = []
    real = logdir.head
    logdir.head = lambda info, n: (lambda b: sizes.append(len(b)) or b)(real(info, n))
    runs = discover(logdir.listing())
    assert [(r.name, r.kind) for r in runs] == [("dist/rank-0.json.gz", RunKind.CHROME_TRACE)]
    assert sorted(sizes) == [38, sniff.HEAD_BYTES]  # the head only, not the whole object
    fs.rm(f"{BUCKET}/sniff", recursive=True)


def test_remote_files_are_copied_once_per_version_into_the_cache_folder(emulator, demo_logdir, tmp_path):
    """A remote file is read from one whole copy under the cache folder, keyed by its
    version: the log directory is never written, and a rewritten object is fetched again."""
    import gcsfs

    from profscope.storage import LogDir

    fs = gcsfs.GCSFileSystem(endpoint_url=emulator, token="anon", skip_instance_cache=True)
    src = next(demo_logdir.glob("mlp/plugins/profile/*/demo-host.xplane.pb")).read_bytes()
    fs.pipe(f"{BUCKET}/copies/a.xplane.pb", src)
    logdir = LogDir(f"gs://{BUCKET}/copies", storage_options={"endpoint_url": emulator, "token": "anon"},
                    listing_ttl=0, copy_dir=tmp_path / "objects")
    assert logdir.read_bytes("a.xplane.pb") == src
    copies = list((tmp_path / "objects").rglob("*a.xplane.pb"))
    assert len(copies) == 1 and copies[0].read_bytes() == src
    assert fs.find(f"{BUCKET}/copies") == [f"{BUCKET}/copies/a.xplane.pb"]
    fs.pipe(f"{BUCKET}/copies/a.xplane.pb", b"changed")
    assert logdir.read_bytes("a.xplane.pb") == b"changed"
    assert len(list((tmp_path / "objects").rglob("*a.xplane.pb"))) == 2
    fs.rm(f"{BUCKET}/copies", recursive=True)
