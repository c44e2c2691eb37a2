"""s3:// and az:// (abfs://) log directories through their real fsspec clients (s3fs,
adlfs) against real local emulators the tests start: moto's S3 server with IAM enforced
(profscope.testing.s3_emulator) and Azurite (profscope.testing.azurite_emulator, installed
by `make downloads`). The same suite as tests/test_gcs.py, on both, plus every tool's
answer byte for byte against the local copy and a bucket the credentials may not read."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from profscope.storage import LogDir

PROFSCOPE = [sys.executable, "-m", "profscope"]
# A hang would be a bug: every call below has this backstop.
BACKSTOP_S = 120


@dataclass
class Store:
    """One emulator with the demo uploaded under ``<bucket>/logs``: what a test needs."""

    scheme: str
    bucket: str  # the readable bucket (S3) or container (Azure)
    options: dict  # the reader's client options
    env: dict  # the same as a profscope process reads them from its environment
    denied: tuple[str, dict, dict]  # (url, options, env) the store refuses
    fs: Any  # a client that may write (the tests' own uploads)
    extra: dict = field(default_factory=dict)

    def url(self, prefix: str = "logs") -> str:
        return f"{self.scheme}://{self.bucket}/{prefix}"


def _upload(fs, bucket: str, demo_logdir) -> None:
    fs.pipe({f"{bucket}/logs/{p.relative_to(demo_logdir).as_posix()}": p.read_bytes()
             for p in demo_logdir.rglob("*") if p.is_file()})


def _s3(demo_logdir):
    from profscope.testing.s3_emulator import S3Emulator

    s3 = S3Emulator(buckets=("profiles", "locked"), readable=("profiles",))
    with s3:
        fs = s3.filesystem("writer")
        _upload(fs, "profiles", demo_logdir)
        fs.pipe("locked/logs/a/h.xplane.pb", b"secret")
        # the reader's own key on a bucket its policy does not grant: AccessDenied
        yield Store("s3", "profiles", s3.options("reader"), s3.env("reader"),
                    ("s3://locked/logs", s3.options("reader"), s3.env("reader")), fs)


def _azure(demo_logdir):
    from profscope.testing.azurite_emulator import Azurite, AzuriteUnavailable

    wrong_key = "d3Jvbmcta2V5LWZvci1henVyaXRlLXRlc3RzLXdyb25nLWtleS13cm9uZy1rZXk="
    azurite = Azurite(containers=("profiles",))
    try:
        az = azurite.__enter__()
    except AzuriteUnavailable as e:  # as for XProf's wheel: `make downloads` installs it
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(str(e))
    try:
        fs = az.filesystem()
        _upload(fs, "profiles", demo_logdir)
        # the right container with a wrong account key: AuthorizationFailure
        yield Store("az", "profiles", az.options(), az.env(),
                    ("az://profiles/logs", az.options(wrong_key), az.env(wrong_key)), fs)
    finally:
        azurite.__exit__()


@pytest.fixture(scope="module", params=["s3", "azure"])
def store(request, demo_logdir):
    starter: Callable = {"s3": _s3, "azure": _azure}[request.param]
    gen = starter(demo_logdir)
    yield next(gen)
    gen.close()


@pytest.fixture
def store_client(make_client, store):
    return make_client(store.url(), **store.options)


def _answers(client) -> dict:
    """Every answer of the XProf data API for every run: runs, hosts, tools, modules, and
    each tool's data for each host (the memory viewer for every module)."""
    out = {}
    get = lambda path, **params: client.get(f"/data/plugin/profile/{path}", params=params)  # noqa: E731
    runs = get("runs")
    out["runs"] = (runs.status_code, runs.content)
    for run in runs.json():
        hosts = get("hosts", run=run)
        tools = get("run_tools", run=run)
        modules = get("module_list", run=run)
        out[run] = [(r.status_code, r.content) for r in (hosts, tools, modules)]
        names = [h["hostname"] for h in hosts.json()] or [None]
        for tool in tools.json():
            for host in names:
                params = {"run": run, "tag": tool, **({"host": host} if host else {})}
                if tool == "memory_viewer":
                    for module in [m for m in modules.text.split(",") if m]:
                        r = get("data", module_name=module, memory_space="0", **params)
                        out[run, tool, host, module] = (r.status_code, r.content)
                else:
                    r = get("data", **params)
                    out[run, tool, host] = (r.status_code, r.content)
    return out


def test_every_tool_answers_the_same_bytes_as_the_local_copy(store_client, demo_client):
    local = _answers(demo_client)
    remote = _answers(store_client)
    assert len(local) >= 30 and sum(1 for v in local.values() if isinstance(v, tuple) and v[0] == 200) >= 25
    assert remote.keys() == local.keys()
    for key in local:
        assert remote[key] == local[key], key


def test_object_identity_uses_the_object_etag(store):
    logdir = LogDir(store.url(), storage_options=store.options)
    xplanes = [f for f in logdir.files().values() if f.name.endswith(".xplane.pb")]
    assert xplanes and all(f.version and f.size > 0 and f.mtime for f in xplanes)


def test_new_objects_appear_after_the_listing_ttl(store, demo_logdir):
    logdir = LogDir(store.url(), storage_options=store.options, listing_ttl=0.2)
    before = set(logdir.files())
    src = next(demo_logdir.glob("mlp/plugins/profile/*/demo-host.xplane.pb"))
    new = "new/plugins/profile/2027_01_01_00_00_00/h2.xplane.pb"
    store.fs.pipe(f"{store.bucket}/logs/{new}", src.read_bytes())
    try:
        assert set(logdir.files()) == before  # within the TTL: the listing kept
        time.sleep(0.3)
        assert set(logdir.files()) - before == {new}
    finally:
        store.fs.rm(f"{store.bucket}/logs/{new}")


def test_bucket_paths_cannot_escape_the_prefix(store, store_client):
    store.fs.pipe(f"{store.bucket}/private/plugins/profile/s/h.xplane.pb", b"secret")
    try:
        for params in ({"session_path": "../private/plugins/profile/s"},
                       {"session_path": f"{store.scheme}://{store.bucket}/private/plugins/profile/s"},
                       {"run_path": f"{store.scheme}://other-bucket/x"}):
            res = store_client.get("/data/plugin/profile/runs", params=params)
            assert res.status_code == 400 and res.json()["ok"] is False, params
        res = store_client.get("/data/plugin/profile/runs", params={"session_path": store.url("logs/dumps/mlp")})
        assert res.status_code == 200 and res.json() == []
    finally:
        store.fs.rm(f"{store.bucket}/private", recursive=True)


def test_traces_under_any_json_name_are_sniffed_with_ranged_reads(store, demo_logdir):
    from profscope.app.discovery import discover
    from profscope.formats import sniff
    from profscope.model.catalog import RunKind

    trace = (demo_logdir / "torch" / "mlp_train.pt.trace.json.gz").read_bytes()
    assert len(trace) > sniff.HEAD_BYTES
    store.fs.pipe({f"{store.bucket}/sniff/dist/rank-0.json.gz": trace,
                   f"{store.bucket}/sniff/config.json": b'{"schemaVersion": 2, "mediaType": "x"}'})
    try:
        logdir = LogDir(store.url("sniff"), storage_options=store.options)
        sizes = []
        real = logdir.head
        logdir.head = lambda info, n: (lambda b: sizes.append(len(b)) or b)(real(info, n))
        runs = discover(logdir.listing())
        assert [(r.name, r.kind) for r in runs] == [("dist/rank-0.json.gz", RunKind.CHROME_TRACE)]
        assert sorted(sizes) == [38, sniff.HEAD_BYTES]  # the head only, not the whole object
    finally:
        store.fs.rm(f"{store.bucket}/sniff", recursive=True)


def test_remote_files_are_copied_once_per_version_into_the_cache_folder(store, demo_logdir, tmp_path):
    src = next(demo_logdir.glob("mlp/plugins/profile/*/demo-host.xplane.pb")).read_bytes()
    store.fs.pipe(f"{store.bucket}/copies/a.xplane.pb", src)
    try:
        logdir = LogDir(store.url("copies"), storage_options=store.options, listing_ttl=0,
                        copy_dir=tmp_path / "objects")
        assert logdir.read_bytes("a.xplane.pb") == src
        copies = list((tmp_path / "objects").rglob("*a.xplane.pb"))
        assert len(copies) == 1 and copies[0].read_bytes() == src
        assert store.fs.find(f"{store.bucket}/copies") == [f"{store.bucket}/copies/a.xplane.pb"]
        store.fs.pipe(f"{store.bucket}/copies/a.xplane.pb", b"changed")
        assert logdir.read_bytes("a.xplane.pb") == b"changed"
        assert len(list((tmp_path / "objects").rglob("*a.xplane.pb"))) == 2
    finally:
        store.fs.rm(f"{store.bucket}/copies", recursive=True)


def test_a_conversion_worker_reads_the_bucket_with_a_client_of_its_own(store, demo_logdir):
    """s3fs and adlfs run on an event-loop thread that a fork does not copy: the forked
    conversion worker (cache/worker.py) opens its own client, and reads the same bytes."""
    from profscope.cache.progress import ProgressBoard
    from profscope.cache.worker import WorkerPool

    logdir = LogDir(store.url(), storage_options=store.options)  # no copy folder: read through the client
    name = next(f for f in logdir.files() if f.endswith("demo-host.xplane.pb"))
    parent = logdir.read_bytes(name)  # the parent's client and its loop are live at the fork
    board = ProgressBoard()
    job = board.start("k", name)
    try:
        child = WorkerPool(enabled=True).run(lambda job: logdir.read_bytes(name), job, board)
    finally:
        board.finish(job)
    assert child == parent == (demo_logdir / name).read_bytes()


def test_a_bucket_without_permissions_is_a_403_naming_the_url(store, make_client):
    url, options, _ = store.denied
    client = make_client(url, **options)
    for path in ("/data/plugin/profile/runs", "/api/runs"):
        res = client.get(path)
        assert res.status_code == 403, (path, res.status_code, res.text[:300])
        body = res.json()
        assert body["ok"] is False and body["file"] == url and url in body["error"], body


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    # only the store's own variables: none of this machine's cloud settings leak in
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_"))}
    return subprocess.run([*PROFSCOPE, *args], capture_output=True, text=True, timeout=BACKSTOP_S, env={**clean, **env})


def test_the_cli_reads_credentials_and_endpoint_from_the_environment(store, demo_logdir, tmp_path):
    local = _cli("runs", str(demo_logdir), "--cache-dir", str(tmp_path / "a"), env={})
    remote = _cli("runs", store.url(), "--cache-dir", str(tmp_path / "b"), env=store.env)
    assert remote.returncode == 0 and local.returncode == 0, remote.stderr[-2000:]
    # the same runs, listed under the URL instead of the folder
    assert remote.stdout.replace(store.url(), "LOGDIR") == local.stdout.replace(str(demo_logdir), "LOGDIR")
    assert remote.stdout.count("\n") >= 10


def test_the_cli_refuses_a_bucket_without_permissions_with_exit_2(store, tmp_path):
    url, _, env = store.denied
    done = _cli("runs", url, "--cache-dir", str(tmp_path / "c"), env=env)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and url in done.stderr and "refused access" in done.stderr


@pytest.mark.parametrize("url, extra, module", [("s3://bucket/logs", "s3", "s3fs"), ("az://container/logs", "azure", "adlfs"),
                                                ("abfs://container/logs", "azure", "adlfs")])
def test_without_the_extra_the_cli_names_it(url, extra, module, tmp_path):
    """Python's own way to make a module unimportable (``sys.modules[name] = None``), in a
    process of its own: what a user without the extra sees."""
    code = (f"import sys; sys.modules[{module!r}] = None; from profscope.cli import main; "
            f"sys.exit(main(['runs', {url!r}, '--cache-dir', {str(tmp_path)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=BACKSTOP_S)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"pip install 'profscope[{extra}]'" in done.stderr and url in done.stderr


def test_an_unknown_scheme_is_refused_not_read_as_a_folder(tmp_path):
    done = _cli("runs", "hdfs://namenode/logs", "--cache-dir", str(tmp_path), env={})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "hdfs://" in done.stderr and "s3://" in done.stderr and "does not exist" not in done.stderr


def test_azurite_is_installed_by_make_never_by_a_test(tmp_path, monkeypatch):
    from profscope.testing import azurite_emulator
    from tests.fixtures.paths import REPO

    monkeypatch.setenv("PROFSCOPE_TEST_CACHE", str(tmp_path))
    with pytest.raises(azurite_emulator.AzuriteUnavailable, match=r"make downloads"):
        azurite_emulator.Azurite().__enter__()
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\ndownloads:", 1)[1].split("\n\n", 1)[0]
    assert "nodejs" in recipe.splitlines()[0] and "profscope.testing.azurite_emulator fetch" in recipe


def test_urls_split_into_protocol_root_and_account():
    from profscope.storage.logdir import _split_url, _url_options

    assert _split_url("s3://b/p/") == ("s3", "b/p")
    assert _split_url("s3a://b/p") == ("s3", "b/p")
    assert _split_url("az://c/p") == ("abfs", "c/p")
    assert _split_url("abfss://c@acct.dfs.core.windows.net/p/q") == ("abfs", "c/p/q")
    assert _url_options("abfs://c@acct.dfs.core.windows.net/p") == {"account_name": "acct"}
    assert _url_options("az://c/p") == {} and _url_options("s3://b/p") == {}
    assert _split_url("gs://b/p") == ("gcs", "b/p")
