"""Issue 38 item 4: files profscope recognises but does not read are listed with the reason
(``/api/runs``' ``unsupported``, ``profscope runs``, the dashboard), never dropped unsaid.

The log directory is made of real files: the public fixtures' xplane, git-LFS pointer and
snapshot, the demo's XLA dump and PyTorch memory timeline, placed where profscope cannot
read them (an xplane outside a session, a timeline without its trace, an HloProto off
XLA's dump naming), beside the same kinds where it can. A ``*.xplane.riegeli`` is
recognised by its name, as XProf's profile_io.py does; no writer of one exists here
(jaxlib 0.10.2 and xprof 2.24.2 write ``*.xplane.pb`` only; see docs), so its bytes are
the session's XSpace. The snapshot of a pickle protocol the reader refuses is a real
snapshot with its PROTO byte raised, the one thing a newer pickle changes first.
"""

from __future__ import annotations

import cProfile
import json
import subprocess
import sys
from pathlib import Path

import pytest

from profscope.app.discovery import discover
from profscope.app.unsupported_files import unsupported_files
from profscope.errors import BadInput
from profscope.formats import snapshot_pickle
from profscope.model.file_kinds import FileKind, classify
from profscope.storage import LogDir
from profscope.cli import demo_logdir

DEMO = Path(demo_logdir())
SESSION = "exp/plugins/profile/2026_01_01"
JAX_PROFILES = Path(__file__).parent / "data" / "jax_memory_profiles"


def _xplane(public: Path) -> Path:
    return next((public / "xplane" / "tf_gpu").rglob("*.xplane.pb"))


def write_logdir(public: Path, root: Path) -> Path:
    """The log directory above, written into ``root`` (``public``: the public fixtures)."""
    xplane = _xplane(public).read_bytes()
    snapshot = (public / "snapshots" / "niu_fwd_bwd_200_mixed.pickle").read_bytes()
    dump = DEMO / "dumps" / "mlp"
    hlo = next(dump.glob("*cpu_after_optimizations.hlo.pb"))
    files = {
        # read: a session's xplane, a snapshot, a trace with its timeline, a dump folder
        f"{SESSION}/host0.xplane.pb": xplane,
        "snap/good.pickle": snapshot,
        "torch/mlp_train.pt.trace.json.gz": (DEMO / "torch" / "mlp_train.pt.trace.json.gz").read_bytes(),
        "torch/mlp_train.memory_timeline.json": (DEMO / "torch" / "mlp_train.memory_timeline.json").read_bytes(),
        f"dumps/mlp/{hlo.name}": hlo.read_bytes(),
        # jax.profiler.save_device_memory_profile's own file (tests/data, made by JAX on CPU)
        "jax/memory.prof": (JAX_PROFILES / "mlp" / "memory.prof").read_bytes(),
        # recognised, not read
        f"{SESSION}/host1.xplane.riegeli": xplane,
        "loose/host.xplane.pb": xplane,
        "lfs/memory.pickle": (public / "snapshots" / "kbjiang_memory_256_lfs_pointer.pickle").read_bytes(),
        "snap/newer.pickle": snapshot[:1] + bytes([6]) + snapshot[2:],
        "alone/mlp.memory_timeline.json": (DEMO / "torch" / "mlp_train.memory_timeline.json").read_bytes(),
        "exported/model.hlo.pb": hlo.read_bytes(),
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    # jax.profiler.save_device_memory_profile's name, written by cProfile (a real writer)
    (root / "py").mkdir(exist_ok=True)
    cProfile.run("sum(range(9))", str(root / "py" / "cpu.prof"))
    return root


@pytest.fixture(scope="module")
def logdir(shared_fixtures, tmp_path_factory) -> Path:
    return write_logdir(shared_fixtures / "public_profiles", tmp_path_factory.mktemp("unsupported"))


NOT_READ = {  # file -> (kind, words its reason must hold)
    f"{SESSION}/host1.xplane.riegeli": ("xplane_riegeli", "riegeli"),
    "loose/host.xplane.pb": ("xplane", "plugins/profile/<session>"),
    "lfs/memory.pickle": ("torch_snapshot", "git lfs pull"),
    "snap/newer.pickle": ("torch_snapshot", "protocol 6"),
    "alone/mlp.memory_timeline.json": ("memory_timeline", "Chrome trace"),
    "exported/model.hlo.pb": ("hlo_proto", "module_<id>"),
    "py/cpu.prof": ("device_memory_profile", "not a gzipped pprof Profile"),
}


def _catalog(root: Path):
    listing = LogDir(str(root), listing_ttl=0).listing()
    runs = discover(listing)
    return listing, runs, unsupported_files(listing, runs)


def test_every_recognised_file_is_read_or_listed_with_its_reason(logdir):
    """Before: the riegeli XSpace, the loose xplane, the lone timeline and the misnamed
    HloProto made no run and no word; the LFS pointer and the newer pickle were runs that
    only failed when opened."""
    listing, runs, unsupported = _catalog(logdir)
    listed = {u["file"]: u for u in unsupported}
    for path, (kind, words) in NOT_READ.items():
        assert path in listed, f"{path} is dropped without a word: {sorted(listed)}"
        assert listed[path]["kind"] == kind and words in listed[path]["reason"], listed[path]
    in_runs = {f.path for r in runs for f in r.files}
    for info in listing.files.values():
        if classify(info.name) is not FileKind.OTHER:
            assert info.path in in_runs or info.path in listed, f"{info.path} recognised, but neither read nor listed"
    # what reads is not listed
    for path in (f"{SESSION}/host0.xplane.pb", "snap/good.pickle", "torch/mlp_train.pt.trace.json.gz",
                 "torch/mlp_train.memory_timeline.json", "jax/memory.prof"):
        assert path not in listed and path in in_runs, path
    # a file inside a run names it
    assert listed[f"{SESSION}/host1.xplane.riegeli"]["run"] == "exp/2026_01_01"
    assert listed["loose/host.xplane.pb"]["run"] is None


def test_the_listing_agrees_with_the_snapshot_reader(logdir):
    """What the listing says of a pickle is what the reader says when it is opened."""
    with pytest.raises(BadInput, match="unsupported pickle protocol 6"):
        snapshot_pickle.load_snapshot((logdir / "snap/newer.pickle").read_bytes(), "snap/newer.pickle")
    with pytest.raises(BadInput, match="git-LFS pointer"):
        snapshot_pickle.load_snapshot((logdir / "lfs/memory.pickle").read_bytes(), "lfs/memory.pickle")


def test_api_runs_carries_them(logdir, make_client):
    body = make_client(logdir).get("/api/runs").json()
    _, _, unsupported = _catalog(logdir)
    assert body["unsupported"] == unsupported
    assert {u["file"] for u in body["unsupported"]} >= set(NOT_READ)
    assert all(set(u) == {"file", "kind", "reason", "run"} for u in body["unsupported"])


def test_cli_runs_prints_them(logdir, tmp_path):
    cmd = [sys.executable, "-m", "profscope", "runs", str(logdir), "--cache-dir", str(tmp_path / "c")]
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    _, _, unsupported = _catalog(logdir)
    assert f"recognised but not read ({len(unsupported)}):" in text
    for u in unsupported:
        assert f"  {u['file']}  [{u['kind']}]  {u['reason']}" in text
    rows = json.loads(subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=120, check=True).stdout)
    assert [r for r in rows if r["kind"] != "unsupported"][0] == rows[0]  # the runs first
    assert {r["name"]: r["reason"] for r in rows if r["kind"] == "unsupported"} == {u["file"]: u["reason"] for u in unsupported}


def test_cli_errors_that_find_no_run_say_what_is_not_read(logdir, tmp_path):
    """`profscope report` / `analyze` of a folder or file profscope recognises but does not
    read exited 2 with "no run ..." alone, as if nothing had been found."""
    only = tmp_path / "only"
    for rel in ("loose/host.xplane.pb", "py/cpu.prof"):
        (only / rel).parent.mkdir(parents=True, exist_ok=True)
        (only / rel).write_bytes((logdir / rel).read_bytes())
    _, _, unsupported = _catalog(only)
    cache = ["--cache-dir", str(tmp_path / "c")]
    res = subprocess.run([sys.executable, "-m", "profscope", "report", str(only), *cache],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "no run in" in res.stderr
    for u in unsupported:
        assert f"{u['file']}: {u['reason']}" in res.stderr
    res = subprocess.run([sys.executable, "-m", "profscope", "analyze", str(only / "loose" / "host.xplane.pb"), *cache],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "outside a profile session folder" in res.stderr, res.stderr


def test_the_agents_list_runs_carries_them(logdir, tmp_path):
    """The MCP server's list_runs (app/agent_tools.py) answers what /api/runs does."""
    from profscope.app import agent_tools
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache

    ws = Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(tmp_path / "cache"))
    _, _, unsupported = _catalog(logdir)
    assert agent_tools.list_runs(ws)["unsupported"] == unsupported
    assert agent_tools.list_runs(ws, prefix="loose/")["unsupported"] == [u for u in unsupported if u["file"].startswith("loose/")]
