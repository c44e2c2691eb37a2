"""A profile's steps read in the background once its timeline answers (app/traces.py
``_prefetch_after``, ``profscope serve`` unless ``--no-prefetch``).

An index the timeline built holds display rows, not the host plane's context stats that
XProf's step grouping reads, so the first Steps & ops answer after a trace link used to
read the whole file again (issue 34's "from a built trace index" bar: jax308 2.1-2.3 CPU
s). Now the timeline's first window has the steps read in a conversion worker while the
pool is idle, and Steps & ops then reads them from the cache. What is checked here, on
real profiles (the demo's JAX CPU profile, whose steps come from XProf's grouping of the
host plane, and the public two-host TF GPU xplane, whose steps come from the
device planes), through real forked workers:

- the prefetch makes the steps entry, and Steps & ops then runs no conversion for them;
  its answer is byte for byte the answer of a server that never prefetched;
- XProf's ``trace_viewer@`` answer prefetches too, for every host it selects;
- a busy pool is left alone: a prefetch that finds a conversion running takes no slot,
  and the next window tries again;
- a file that cannot be read ends its prefetch quietly, and the Steps & ops request then
  gets the file's error (a 4xx naming it), not a 500;
- an index built for Steps & ops (which holds its host steps) and a Chrome trace start
  no prefetch; the workspace does not prefetch unless told (the CLI's ``serve`` does).
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import orjson
import pytest

from profscope.app import keys
from profscope.app.queries import TraceQuery, XprofTraceQuery
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache, cache_key
from profscope.cli import _workspace, build_parser
from profscope.errors import ProfscopeError
from profscope.storage import LogDir

ROOT = Path(__file__).parents[1]
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"
PUBLIC = ("tf_gpu", "tpu_inference_corrupt")


@pytest.fixture(scope="module")
def logdir(shared_fixtures, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prefetch_logdir")
    shutil.copytree(DEMO / "convnet", out / "convnet")
    shutil.copytree(DEMO / "torch", out / "torch")
    for name in PUBLIC:
        shutil.copytree(shared_fixtures / "public_profiles" / "xplane" / name, out / name)
    for p in out.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)  # the fixtures are read-only
    return out


def _ws(logdir: Path, cache: Path, prefetch: bool = True) -> Workspace:
    ws = Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(cache))
    ws.prefetch = prefetch
    return ws


def _run(ws: Workspace, prefix: str):
    return next(r for r in ws.runs() if r.name.startswith(prefix + "/"))


def _steps_key(ws: Workspace, run, host: str) -> str:
    return keys.derived(keys.XPLANE_STEPS, ws.logdir.url, run.xplane(host).identity())


def _prefetches() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "profscope-prefetch"]


def _join_prefetches() -> None:
    for t in _prefetches():
        t.join(120)  # a hang backstop, not a speed bound
        assert not t.is_alive(), "a prefetch did not end"


@pytest.mark.parametrize("prefix", ["convnet", "tf_gpu"])
def test_the_first_window_prefetches_the_steps_steps_ops_reads(logdir, tmp_path, prefix):
    ws = _ws(logdir, tmp_path / "cache")
    run = _run(ws, prefix)
    host = run.hosts[0]
    key = _steps_key(ws, run, host)
    ws.trace_window(run, TraceQuery())
    _join_prefetches()
    assert ws.cache.has(key)
    runs = ws.cache.workers.stats["runs"]
    steps = ws.xplane_steps(run, host)
    assert ws.cache.workers.stats["runs"] == runs  # read from the cache: no conversion
    assert steps["step_db"]["steps"]
    # the same answers as a server that never prefetched (its steps read when asked)
    plain = _ws(logdir, tmp_path / "plain", prefetch=False)
    plain_run = _run(plain, prefix)
    plain.trace_window(plain_run, TraceQuery())
    assert not _prefetches() and not plain.cache.has(key)
    assert orjson.dumps(steps) == orjson.dumps(plain.xplane_steps(plain_run, host))
    got, want = ws.steps_ops(run, TraceQuery()), plain.steps_ops(plain_run, TraceQuery())
    assert orjson.dumps(got, option=orjson.OPT_SORT_KEYS) == orjson.dumps(want, option=orjson.OPT_SORT_KEYS)


def test_xprof_trace_viewer_prefetches_every_selected_host(logdir, tmp_path):
    ws = _ws(logdir, tmp_path / "cache")
    run = _run(ws, "tf_gpu")
    assert len(run.hosts) == 2
    ws.trace_xprof_json(run, XprofTraceQuery(hosts=",".join(run.hosts)))
    _join_prefetches()
    assert all(ws.cache.has(_steps_key(ws, run, h)) for h in run.hosts)


def test_a_busy_pool_is_left_alone_and_a_later_window_tries_again(logdir, tmp_path):
    ws = _ws(logdir, tmp_path / "cache")
    run = _run(ws, "convnet")
    key = _steps_key(ws, run, run.hosts[0])
    release = tmp_path / "release"

    def blocker(_progress):  # a conversion in a forked worker, until the file appears
        deadline = time.monotonic() + 120
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return {"done": True}

    busy = threading.Thread(target=ws.cache.get_or_compute, args=(cache_key("blocker"), "blocker", blocker))
    busy.start()
    try:
        deadline = time.monotonic() + 60
        while ws.cache.workers.stats["running"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ws.cache.workers.stats["running"] == 1
        ws.trace_window(run, TraceQuery())
        _join_prefetches()
        assert not ws.cache.has(key)  # the running conversion was not joined by a prefetch
    finally:
        release.touch()
        busy.join(120)
    ws.trace_window(run, TraceQuery(start_ms=0.0, end_ms=1.0))
    _join_prefetches()
    assert ws.cache.has(key)


def test_an_unreadable_file_ends_its_prefetch_and_its_request_says_why(logdir, tmp_path):
    ws = _ws(logdir, tmp_path / "cache")
    run = _run(ws, "tpu_inference_corrupt")
    host = run.hosts[0]
    key = _steps_key(ws, run, host)
    # what a window's prefetch runs, here in this thread
    ws._prefetch([(key, "its steps", lambda: ws.xplane_steps(run, host, load=False))])
    assert not ws.cache.has(key)
    with pytest.raises(ProfscopeError) as err:
        ws.xplane_steps(run, host)
    assert 400 <= err.value.status < 500 and err.value.file and "tpu_inference_2.xplane.pb" in err.value.file


def test_no_prefetch_where_nothing_is_to_be_read(logdir, tmp_path):
    # an index Steps & ops built holds the host steps it grouped: nothing to read again
    ws = _ws(logdir, tmp_path / "cache")
    run = _run(ws, "convnet")
    ws.steps_ops(run, TraceQuery())
    key = _steps_key(ws, run, run.hosts[0])
    made = ws.cache.has(key)
    ws.trace_window(run, TraceQuery())
    assert not _prefetches()
    assert ws.cache.has(key) == made
    # a PyTorch trace's steps are read from its index (tools/step_breakdown.py)
    torch_run = next(r for r in ws.runs() if r.name.startswith("torch"))
    ws.trace_window(torch_run, TraceQuery())
    assert not _prefetches()


def test_serve_prefetches_unless_told_not_to(logdir, tmp_path):
    assert Workspace(LogDir(str(logdir)), DiskCache(tmp_path / "c0")).prefetch is False
    cache = ["--cache-dir", str(tmp_path / "c1"), "--no-capture"]
    assert _workspace(build_parser().parse_args(["serve", str(logdir), *cache])).prefetch is True
    assert _workspace(build_parser().parse_args(["serve", str(logdir), *cache, "--no-prefetch"])).prefetch is False


def test_a_big_traces_deeper_zoom_levels_are_made_after_its_first_xprof_window(logdir, tmp_path, monkeypatch):
    """Past ``XPROF_LEVELS_MAX`` events an XProf window makes only the zoom levels it
    loads, so each deeper zoom waited for its own (jax308: 0.4-1.2 s each for levels 5 to
    10). Once a filtered window has answered, the rest are made in the background; a
    deeper window then runs no conversion and answers what it answers without the
    prefetch. The demo's JAX CPU profile stands for a big trace: the thresholds lowered,
    as the forked workers inherit them."""
    from profscope.tools import trace_visibility as tv
    from profscope.tools import trace_xprof

    for module, name in ((tv, "XPROF_FILTER_MIN_EVENTS"), (trace_xprof, "XPROF_FILTER_MIN_EVENTS"), (tv, "XPROF_LEVELS_MAX")):
        monkeypatch.setattr(module, name, 100)
    ws = _ws(logdir, tmp_path / "cache")
    run = _run(ws, "convnet")
    host = run.hosts[0]
    first = orjson.loads(ws.trace_xprof_json(run, XprofTraceQuery()))
    _join_prefetches()
    index_key = ws._trace_index_key(host, run.xplane(host))
    assert ws.cache.built_dir(keys.derived(keys.TRACE_ZOOM_LEVELS, ws.logdir.url, index_key, tv.N_LEVELS - 1))
    lo, hi = first["fullTimespan"]
    deep = XprofTraceQuery(start_time_ms=lo + (hi - lo) * 0.4, end_time_ms=lo + (hi - lo) * 0.401)
    span_ps, res = round((hi - lo) * 1e9), 8000  # XProf's default resolution
    assert tv.levels_needed(tv.resolution_ps(span_ps // 1000, res)) > tv.levels_needed(tv.resolution_ps(span_ps, res))
    runs = ws.cache.workers.stats["runs"]
    got = ws.trace_xprof_json(run, deep)
    assert ws.cache.workers.stats["runs"] == runs  # the levels were there: no conversion
    plain = _ws(logdir, tmp_path / "plain", prefetch=False)
    plain_run = _run(plain, "convnet")
    plain.trace_xprof_json(plain_run, XprofTraceQuery())
    assert not _prefetches()
    plain_runs = plain.cache.workers.stats["runs"]
    assert plain.trace_xprof_json(plain_run, deep) == got and orjson.loads(got)["traceEvents"]
    assert plain.cache.workers.stats["runs"] == plain_runs + 1  # without it: its own levels, made then
