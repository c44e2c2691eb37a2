"""Where the trace index finds an event's arguments: a plain local xplane's own bytes are
read back from the profile (no copy in ``args.bin``, which was as big as the profile);
a gzipped one's, and derived lines', are in ``args.bin``. Every event's details are the
same either way, on a real GPU profile; a profile gone since is a clear 404."""

from __future__ import annotations

import gzip
import random

import pytest
from fastapi.testclient import TestClient

from profscope.app.queries import TraceQuery
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.errors import NotFound
from profscope.formats import xplane_trace
from profscope.server import create_app
from profscope.storage import LogDir
from profscope.tools import trace_index as ti

GPU = "public_profiles/xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb"


def _workspace(tmp_path, shared_fixtures, gz: bool):
    session = tmp_path / "logdir" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    data = (shared_fixtures / GPU).read_bytes()
    path = session / ("gpu-host.xplane.pb" + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data) if gz else data)
    return Workspace(LogDir(str(tmp_path / "logdir"), listing_ttl=0), DiskCache(tmp_path / "cache")), path


def _reference(shared_fixtures, tmp_path):
    """The same profile's index with every argument byte in args.bin."""
    path = shared_fixtures / GPU
    with open(path, "rb") as f:
        ev = xplane_trace.read_trace(f, str(path), 0, "gpu-host")
    (tmp_path / "reference").mkdir()
    ti.build_index(ev, tmp_path / "reference")
    return ti.TraceIndex(tmp_path / "reference", decoder=xplane_trace)


@pytest.mark.parametrize("gz", [False, True])
def test_details_are_the_same_wherever_the_bytes_are(gz, shared_fixtures, tmp_path):
    ws, path = _workspace(tmp_path, shared_fixtures, gz)
    run = ws.runs()[0]
    view = ws.trace_view(run, TraceQuery())
    ix = view.hosts[0].index
    args_bin = (ix.folder / "args.bin").stat().st_size
    plain = len((shared_fixtures / GPU).read_bytes())
    if gz:
        assert ix.meta["source"] is None and args_bin > plain // 2  # the planes, decompressed
    else:
        assert ix.meta["source"] == str(path)
        assert args_bin < plain // 20  # derived lines' synthetic events only
    ref = _reference(shared_fixtures, tmp_path)
    assert ref.n == ix.n
    rows = random.Random(3).sample(range(ix.n), 400) + [0, ix.n - 1]
    with_args = 0
    for row in rows:
        got = ix.args(row)
        assert got == ref.args(row), row
        with_args += bool(got)
    assert with_args > 200


def test_a_profile_gone_since_is_a_clear_404(shared_fixtures, tmp_path):
    """An index opened after its profile was deleted (a restart, say) answers windows and
    refuses details with NotFound naming the file (an index already open keeps its map)."""
    ws, path = _workspace(tmp_path, shared_fixtures, False)
    client = TestClient(create_app(ws))
    run = ws.runs()[0]
    window = client.get("/api/trace/window", params={"run": run.name}).json()
    some = window["slices"]["id"][len(window["slices"]["id"]) // 2]
    assert client.get("/api/trace/event", params={"run": run.name, "id": some}).status_code == 200
    path.unlink()
    folder = next((tmp_path / "cache").rglob("meta.json")).parent
    reopened = ti.TraceIndex(folder, decoder=xplane_trace)
    assert reopened.window_rows(0, reopened.end_ps, 500)[0]["rows"].size
    with pytest.raises(NotFound, match="gpu-host.xplane.pb"):
        reopened.args(some & ((1 << 40) - 1))
