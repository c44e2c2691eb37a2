"""XProf 2.24.2's own web frontend as a client of profscope: its static files (from the
pinned wheel that `make` fetches into .cache/ before the tests, never a dependency; no
test downloads it) and profscope's data API on one origin, opened in Debian's Chromium
with the network cut to 127.0.0.1.

Checks that XProf's memory viewer, memory profile and trace viewer draw profscope's
answers for the bundled demo and the real accelerator profiles in ../shared/fixtures,
with no page error: the numbers XProf prints are recomputed here from the JSON profscope
sent, and the trace viewer's model and canvas hold exactly the slices and processes of
profscope's answer. Screenshots go to test-artifacts/ for a person to look at.

XProf's page fetches Google Charts from www.gstatic.com at run time. With the network
cut, its Google-Charts charts (memory viewer heap chart and bars, memory profile
timeline and breakdown table) stay empty and its console says ``google is not defined``;
everything else it draws is checked. docs/xprof_compat.md has the details.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from contextlib import contextmanager
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from urllib.error import HTTPError
from urllib.parse import parse_qs, quote, urlencode, urljoin, urlparse
from urllib.request import urlopen

import pytest
from playwright.sync_api import Error as PlaywrightError

from profscope.cache.store import DiskCache
from profscope.app.workspace import Workspace
from profscope.server import create_app
from profscope.storage import LogDir
from profscope.testing.local_server import serve_in_thread
from profscope.testing.xprof_frontend import FrontendUnavailable, xprof_frontend_app, xprof_static
from tests.conftest import ARTIFACTS

pytestmark = pytest.mark.browser

PREFIX = "/data/plugin/profile"

# Hosts XProf's page reaches for by itself, whatever the server: Google Charts' loader
# (www.gstatic.com, then www.gstatic.cn, index.html) and a Google font (styles). The
# test refuses them as an offline machine would; any other outside request fails it.
XPROF_OUTSIDE_HOSTS = {"www.gstatic.com", "www.gstatic.cn", "fonts.googleapis.com", "fonts.gstatic.com"}

# Console errors that XProf 2.24.2 logs against any server on an offline machine; the
# test demands that nothing else shows up.
KNOWN_XPROF_ERRORS = (
    # Google Charts could not load: chart components call the global ``google`` (in
    # loadGoogleChart, drawHeapChart, ...).
    re.compile(r"^XProf Error: ReferenceError: google is not defined\b"),
    # navigateTools() routes to a multi-host tool (trace_viewer@) with queryParams
    # {hosts: [..]}, an array; navigateWithUrl() then calls hosts.split(",") on it.
    # Happens before any tool data is requested, on every trace viewer load.
    re.compile(r"^XProf Error: TypeError: \w+\.split is not a function\s+at \w+\.navigateWithUrl"),
)
# A profile without allocator events: XProf 2.24.2's own converter answers memory_profile
# with the same {"memoryProfilePerAllocator": {}, "memoryIds": [], ...} as profscope, and
# its page reads memoryProfilePerAllocator[memoryIds[0]] before saying there is nothing.
EMPTY_MEMORY_PROFILE_ERROR = re.compile(
    r"^XProf Error: TypeError: Cannot read properties of undefined \(reading 'sampledTimelineSnapshots'\)")

# The real accelerator profiles served to XProf's page (tpu_inference_corrupt has its own
# log directory: XProf's page opens on the first run in the list, which it would be;
# test_start_up_on_an_unreadable_run).
SHARED_PROFILES = ("tf_gpu", "tpu_inference", "mi300_jax08_gemm")

LOAD_TIMEOUT_MS = 120_000  # the first request of a run converts its profile


# -- serving XProf's frontend with profscope's API -----------------------------------------

@pytest.fixture(scope="session")
def xprof_static_dir() -> Path:
    try:
        return xprof_static()
    except FrontendUnavailable as e:
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(str(e))


@contextmanager
def _serve(app):
    """``app`` on 127.0.0.1 at a free port, in a thread of this process."""
    with serve_in_thread(app) as port:
        yield f"http://127.0.0.1:{port}"


@contextmanager
def _xprof_server(logdir: Path, cache: Path, static_dir: Path):
    ws = Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(cache))
    with _serve(xprof_frontend_app(create_app(ws), static_dir)) as url:
        yield url


def _copy_profiles(shared_fixtures: Path, names, logdir: Path) -> None:
    """The named public xplane folders copied into ``logdir``: files only, without the
    fixtures' read-only modes (the log-directory scan does not follow symlinks)."""
    for name in names:
        src = shared_fixtures / "public_profiles" / "xplane" / name
        for f in src.rglob("*"):
            if f.is_file():
                dest = logdir / name / f.relative_to(src)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, dest)


@pytest.fixture(scope="module")
def demo_xprof(xprof_static_dir, demo_logdir, tmp_path_factory):
    with _xprof_server(demo_logdir, tmp_path_factory.mktemp("cache"), xprof_static_dir) as url:
        yield url


# PyTorch inputs XProf cannot read itself, answered in XProf's memory_profile schema
# (tools/memory_profile_xprof.py): a CUDA memory snapshot and a PyTorch profiler GPU trace.
TORCH_INPUTS = (("snapshots", "niu_fwd_bwd_200_mixed.pickle"), ("traces", "tracelens_h100_bert_small.trace.json.gz"),
                ("traces", "kineto_resnet50_v100.pt.trace.json.gz"))


@pytest.fixture(scope="module")
def torch_xprof(xprof_static_dir, shared_fixtures, tmp_path_factory):
    logdir = tmp_path_factory.mktemp("torch_logdir")
    for folder, name in TORCH_INPUTS:
        shutil.copyfile(shared_fixtures / "public_profiles" / folder / name, logdir / name)
    with _xprof_server(logdir, tmp_path_factory.mktemp("cache"), xprof_static_dir) as url:
        yield url


@pytest.fixture(scope="module")
def builder_xprof(xprof_static_dir, tmp_path_factory):
    """A TPU profile with utilisation counters (``allocator_xplane.tpu_counters``): no
    public profile has a ``_counters_`` line."""
    from profscope.testing.timelines import builder_logdir

    logdir = builder_logdir(tmp_path_factory.mktemp("builder_logdir"), {"tpu_counters": "tpu-host"})
    with _xprof_server(logdir, tmp_path_factory.mktemp("cache"), xprof_static_dir) as url:
        yield url


@pytest.fixture(scope="module")
def shared_xprof(xprof_static_dir, shared_fixtures, tmp_path_factory):
    # copied (7 MB): see _copy_profiles
    logdir = tmp_path_factory.mktemp("shared_logdir")
    _copy_profiles(shared_fixtures, SHARED_PROFILES, logdir)
    with _xprof_server(logdir, tmp_path_factory.mktemp("cache"), xprof_static_dir) as url:
        yield url


def _get(server: str, route: str, **params):
    try:
        with urlopen(f"{server}{PREFIX}/{route}?{urlencode(params)}", timeout=300) as res:
            body = res.read()
    except HTTPError as e:  # the answer's error says what went wrong
        raise AssertionError(f"{route} {params}: {e.code} {e.read()[:2000]!r}") from None
    return json.loads(body) if res.headers.get_content_type() == "application/json" else body.decode()


def _json(response) -> object:
    """The JSON answer to a request XProf's frontend made.

    Chromium drops a response's body once the frame that asked navigates away (a
    loaded CI run lost tf_gpu's ``trace_viewer@`` answer so: "No data found for
    resource with given identifier"); then the same URL is asked again, which profscope
    answers with the same bytes (its answers are deterministic and cached).
    """
    try:
        return response.json()
    except PlaywrightError:
        with urlopen(response.url, timeout=300) as res:
            return json.loads(res.read())


def _run(server: str, prefix: str) -> str:
    runs = [r for r in _get(server, "runs") if r.startswith(prefix + "/")]
    assert len(runs) == 1, runs
    return runs[0]


# -- the browser ----------------------------------------------------------------------------

class XProfPage:
    """A page of XProf's frontend in a fresh browser context that reaches only ``server``;
    records what it tried outside and every page error and console error."""

    def __init__(self, browser, server: str):
        self.server = server
        self.outside: list[str] = []
        self.errors: list[str] = []
        self.allowed_errors = list(KNOWN_XPROF_ERRORS)
        self.ctx = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
        allowed = urlparse(server).netloc

        def route(r):
            if urlparse(r.request.url).netloc == allowed or r.request.url.startswith(("data:", "blob:")):
                r.continue_()
            else:
                self.outside.append(r.request.url)
                r.abort()

        self.ctx.route("**/*", route)
        self.page = self.ctx.new_page()
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("console", self._console)

    def _console(self, m):
        if m.type != "error":
            return
        # Chromium reports each refused outside request as a console error of its own.
        if m.text.startswith("Failed to load resource: net::ERR_FAILED") and m.location.get("url") in self.outside:
            return
        if not any(p.search(m.text) for p in self.allowed_errors):
            self.errors.append(f"console: {m.text}")

    def open(self, tool: str, **query) -> None:
        self.page.goto(f"{self.server}{PREFIX}/{tool}?{urlencode(query, quote_via=quote)}")

    def check(self) -> None:
        hosts = {urlparse(u).hostname for u in self.outside}
        assert hosts <= XPROF_OUTSIDE_HOSTS, f"XProf's page tried unexpected hosts: {self.outside}"
        assert not self.errors, "errors in XProf's page:\n" + "\n".join(self.errors)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"xprof_frontend_{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def xprof_page(browser):
    pages = []

    def make(server: str) -> XProfPage:
        pages.append(XProfPage(browser, server))
        return pages[-1]

    yield make
    try:
        for p in pages:
            p.check()
    finally:
        for p in pages:
            p.ctx.close()


def _xprof_bytes(n: float) -> str:
    """XProf's byte formatter (bundle.js ``Va``): binary units, two decimals."""
    if 0 < n < 1:
        raise ValueError("XProf prints sub-byte values in exponent form")
    s = 0 if n == 0 else max(0, math.floor(math.log(n) / math.log(1024)))
    return f"{_to_fixed(n / 1024 ** s, 2)} {['', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi'][s]}B"


def _to_fixed(x: float, digits: int) -> str:
    """JavaScript's ``x.toFixed(digits)``: an exact tie rounds up (837.125 -> 837.13),
    where Python's format rounds it to even."""
    return str(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


# -- trace viewer ---------------------------------------------------------------------------

# What XProf's trace viewer (catapult's tf-trace-viewer in the iframe) built from the
# answer: its model's processes, slices and counter samples, and what its canvases hold.
TRACE_MODEL = """() => {
  const tv = document.getElementsByTagName("tf-trace-viewer")[0];
  const m = tv && tv._model;
  if (!m || tv._isLoading) return null;
  const procs = Object.values(m.processes);
  const sum = (xs, f) => xs.reduce((n, x) => n + f(x), 0);
  return {
    processes: procs.map(p => p.name),
    slices: sum(procs, p => sum(Object.values(p.threads), t => t.sliceGroup.length)),
    counterSamples: sum(procs, p => sum(Object.values(p.counters), c => sum(c.series, s => s.samples.length))),
    counterSeries: sum(procs, p => Object.values(p.counters).length),
    counterNames: procs.flatMap(p => Object.values(p.counters).map(c => c.name)),
    warnings: m.importWarnings_.map(w => w.message),
    text: document.body.innerText,
  };
}"""
# Pixels of the timeline canvases with a saturated colour (slices; the background, grid
# and labels are grey or white).
CANVAS_COLOURED = """() => Math.max(0, ...Array.prototype.map.call(document.getElementsByTagName("canvas"), c => {
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4)
    if (d[i + 3] > 0 && Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 40) n++;
  return n;
}))"""


# catapult's importer, finishing a flow at its consumer slice, merges the consumer's args
# into the flow's (the producer's) and warns on each name both have. XProf 2.24.2 gives
# every streamed event args {"uid": serial} (trace_events.h, for the event-details
# request), so against XProf's own server too every flow between two slices warns so.
FLOW_UID_WARNING = re.compile(
    r"^Different phases of .* provided values for argument uid\. The last provided value will be used\.$")


def _check_import_warnings(warnings: list[str]) -> None:
    others = [w for w in warnings if not FLOW_UID_WARNING.match(w)]
    assert not others, f"XProf's trace importer warned: {others[:10]}"


def _trace_frame(page):
    deadline = time.monotonic() + LOAD_TIMEOUT_MS / 1000
    while time.monotonic() < deadline:
        for f in page.frames:
            if "/trace_viewer_index.html" in f.url:
                return f
        page.wait_for_timeout(200)  # not time.sleep: Playwright must keep routing requests
    raise AssertionError(f"XProf did not open its trace viewer frame: {[f.url for f in page.frames]}")


def _in_trace_frame(page, js: str, timeout_ms: int, arg=None):
    """XProf's trace frame and what ``js`` returned there once truthy.

    XProf's trace viewer sets its frame's URL on every navigation event (bundle.js
    ``update()``: ``this.url = .../trace_viewer_index.html?...&trace_data_url=``). The
    first frame's data URL names no host; once the host list arrives XProf routes again
    with ``hosts=``, and the frame reloads at a URL with ``host=`` and ``hosts=`` (seen
    with a ``framenavigated`` listener). On a loaded machine that can come after the
    first frame asked for its data (CI at 1215a3c: "Execution context was destroyed" in
    convnet's wait). So a destroyed context means: find the frame again and wait again.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        frame = _trace_frame(page)
        left = max(1, int((deadline - time.monotonic()) * 1000))
        try:
            return frame, frame.wait_for_function(js, arg=arg, timeout=left).json_value()
        except PlaywrightError as e:
            if "context was destroyed" not in str(e) and "detached" not in str(e) or time.monotonic() > deadline:
                raise


def _frame_answer(frame, first) -> dict:
    """The ``trace_viewer@`` answer the settled frame built its model from: ``first``'s
    when the frame asked that URL, else the frame's own (profscope answers a URL with the
    same bytes every time)."""
    url = urljoin(frame.url, parse_qs(urlparse(frame.url).query)["trace_data_url"][0])
    asked, got = urlparse(url), urlparse(first.url)
    if (asked.path, parse_qs(asked.query)) == (got.path, parse_qs(got.query)):
        return _json(first)
    with urlopen(url, timeout=300) as res:
        return json.loads(res.read())


TRACE_CASES = [
    ("builder_xprof", "tpu_counters", "/device:TPU:"),
    ("demo_xprof", "mlp", "/host:CPU"),
    ("demo_xprof", "transformer", "/host:CPU"),
    ("demo_xprof", "convnet", "/host:CPU"),
    ("demo_xprof", "tf_bfc", "/host:CPU"),
    ("shared_xprof", "tf_gpu", "/device:GPU:"),
    ("shared_xprof", "tpu_inference", "/device:TPU:"),
    ("shared_xprof", "mi300_jax08_gemm", "/device:GPU:"),
]


@pytest.mark.parametrize("server_fixture, run_prefix, device", TRACE_CASES, ids=[c[1] for c in TRACE_CASES])
def test_trace_viewer(request, xprof_page, server_fixture, run_prefix, device):
    server = request.getfixturevalue(server_fixture)
    run = _run(server, run_prefix)
    xp = xprof_page(server)
    is_trace_data = lambda r: f"{PREFIX}/data?" in r.url and "tag=trace_viewer%40" in r.url  # noqa: E731
    with xp.page.expect_response(is_trace_data, timeout=LOAD_TIMEOUT_MS) as first:
        xp.open("trace_viewer@", run=run, tag="trace_viewer@")
    assert first.value.status == 200, first.value.text()[:500]
    frame, model = _in_trace_frame(xp.page, TRACE_MODEL, LOAD_TIMEOUT_MS)
    answer = _frame_answer(frame, first.value)

    events = answer["traceEvents"]
    sent_processes = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    sent_slices = sum(1 for e in events if e.get("ph") == "X")
    # XProf 2.24.2 writes a counter as one C event per series with its samples as
    # ``entries`` (trace_events_to_json.h AddCounterEvent; the tpu_counters profile)
    sent_samples = sum(len(e["entries"]) if "entries" in e else len(e.get("args", {}))
                       for e in events if e.get("ph") == "C")
    sent_series = sum(1 for e in events if e.get("ph") == "C")
    assert sent_slices > 0
    _check_import_warnings(model["warnings"])
    # Every slice and counter sample profscope sent is in XProf's model, and every
    # process, under its name, is a track heading on screen.
    assert model["slices"] == sent_slices
    assert model["counterSamples"] == sent_samples
    assert model["counterSeries"] == sent_series
    if run_prefix == "tpu_counters":  # a TPU's nine % util series (and two of TPU:1's)
        assert sent_series == 11 and sent_samples == answer["totalCounterEvents"] == 1205
        assert sum(name.endswith("% util") for name in model["counterNames"]) == 11
    assert set(model["processes"]) == sent_processes
    for name in sent_processes:
        assert name in model["text"]
    assert any(device in name for name in sent_processes), sent_processes
    # And the canvas really shows slices (a blank or grey-only canvas scores 0).
    _in_trace_frame(xp.page, f"() => ({CANVAS_COLOURED})() > 2000", 30_000)
    xp.screenshot(f"trace_viewer_{run_prefix}")


def test_trace_viewer_two_hosts(xprof_page, shared_xprof):
    """tf_gpu has two hosts; XProf asks for both with hosts=a,b and shows both."""
    run = _run(shared_xprof, "tf_gpu")
    hosts = [h["hostname"] for h in _get(shared_xprof, "hosts", run=run, tag="trace_viewer@")]
    assert len(hosts) == 2
    xp = xprof_page(shared_xprof)
    is_trace_data = lambda r: f"{PREFIX}/data?" in r.url and "tag=trace_viewer%40" in r.url  # noqa: E731
    with xp.page.expect_response(is_trace_data, timeout=LOAD_TIMEOUT_MS) as first:
        xp.open("trace_viewer@", run=run, tag="trace_viewer@", hosts=",".join(hosts))
    frame, model = _in_trace_frame(xp.page, TRACE_MODEL, LOAD_TIMEOUT_MS)
    answer = _frame_answer(frame, first.value)
    assert model["slices"] == sum(1 for e in answer["traceEvents"] if e.get("ph") == "X")
    for host in hosts:
        assert any(name.startswith(host + " ") for name in model["processes"]), (host, model["processes"])
    _in_trace_frame(xp.page, f"() => ({CANVAS_COLOURED})() > 2000", 30_000)
    xp.screenshot("trace_viewer_tf_gpu_two_hosts")


# PyTorch profiler GPU traces XProf cannot read itself, answered in XProf's trace_viewer@
# schema: their CPU->GPU launch flows (``s``/``f`` events) bound to slices as XProf's
# FlowV2 fields (``bind_id``, ``flow_out`` on the launch, ``flow_in`` on the kernel).
# kineto's 2021 sample writes a thread's slices with the tid "25738" and its flow starts
# with 25738, one thread for Catapult and for profscope's reader.
FLOW_TRACES = (("tracelens_b200_eager.trace.json.gz", 929), ("kineto_resnet50_v100.pt.trace.json.gz", 9096))

# The flows Catapult built from the answer: each a producer and a consumer slice.
TRACE_FLOWS = """() => {
  const tv = document.getElementsByTagName("tf-trace-viewer")[0];
  const m = tv && tv._model;
  if (!m || tv._isLoading) return null;
  return m.flowEvents.map(f => [f.startSlice ? f.startSlice.title : null, f.startSlice ? f.startSlice.start : null,
                                f.endSlice ? f.endSlice.title : null, f.endSlice ? f.endSlice.start : null]);
}"""


# The timeline canvas's pixels, and how many of them changed since ``before`` (the arrows
# drawn over the slices, in their flow's colour).
CANVAS_PIXELS = """() => {
  const c = Array.prototype.reduce.call(document.getElementsByTagName("canvas"), (a, b) => a.width * a.height >= b.width * b.height ? a : b);
  return Array.from(c.getContext("2d").getImageData(0, 0, c.width, c.height).data);
}"""
CANVAS_ARROWS = """(before) => {
  const c = Array.prototype.reduce.call(document.getElementsByTagName("canvas"), (a, b) => a.width * a.height >= b.width * b.height ? a : b);
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  if (d.length !== before.length) return 0;
  let n = 0;
  for (let i = 0; i < d.length; i += 4)
    if (Math.abs(d[i] - before[i]) + Math.abs(d[i + 1] - before[i + 1]) + Math.abs(d[i + 2] - before[i + 2]) > 60) n++;
  return n;
}"""


@pytest.fixture(scope="module")
def torch_trace_xprof(xprof_static_dir, shared_fixtures, tmp_path_factory):
    logdir = tmp_path_factory.mktemp("torch_traces")
    for name, _ in FLOW_TRACES:
        shutil.copyfile(shared_fixtures / "public_profiles" / "traces" / name, logdir / name)
    with _xprof_server(logdir, tmp_path_factory.mktemp("cache"), xprof_static_dir) as url:
        yield url


@pytest.mark.parametrize("name, arrows", FLOW_TRACES, ids=[n.split(".")[0] for n, _ in FLOW_TRACES])
def test_trace_viewer_pytorch_flows(xprof_page, torch_trace_xprof, name, arrows):
    """Every flow profscope's own timeline draws for a PyTorch trace reaches XProf's trace
    viewer: its model holds one flow per ``bind_id`` pair sent, from the launch slice to
    the kernel slice the answer bound them to, and the canvas draws the arrows."""
    server = torch_trace_xprof
    with urlopen(f"{server}/api/trace/window?{urlencode({'run': name, 'resolution': 100_000})}", timeout=300) as res:
        own = json.loads(res.read())["flows"]
    assert len(own["from"]) + own["truncated"] == arrows  # the page's arrows, point to point
    xp = xprof_page(server)
    is_trace_data = lambda r: f"{PREFIX}/data?" in r.url and "tag=trace_viewer%40" in r.url  # noqa: E731
    with xp.page.expect_response(is_trace_data, timeout=LOAD_TIMEOUT_MS) as first:
        xp.open("trace_viewer@", run=name, tag="trace_viewer@")
    assert first.value.status == 200, first.value.text()[:500]
    frame, model = _in_trace_frame(xp.page, TRACE_MODEL, LOAD_TIMEOUT_MS)
    events = _frame_answer(frame, first.value)["traceEvents"]
    pairs: dict[int, dict] = {}
    for e in events:
        if "bind_id" in e:
            pairs.setdefault(e["bind_id"], {})["out" if e.get("flow_out") else "in"] = (e["name"], e["ts"])
    assert len(pairs) == arrows and all(len(p) == 2 for p in pairs.values())
    _check_import_warnings(model["warnings"])
    flows = frame.evaluate(TRACE_FLOWS)
    # one flow per pair, each from the flow_out slice to the flow_in slice (model times in
    # ms, the answer's in µs; kineto's epoch µs keep ~0.2 µs through the model's doubles)
    assert len(flows) == arrows
    sent = sorted((p["out"][1], p["out"][0], p["in"][1], p["in"][0]) for p in pairs.values())
    built = sorted((b * 1000, a, d * 1000, c) for a, b, c, d in flows)
    for (t0, a0, t1, a1), (u0, b0, u1, b1) in zip(built, sent):
        assert (a0, a1) == (b0, b1) and abs(t0 - u0) < 1 and abs(t1 - u1) < 1, ((a0, t0, a1, t1), (b0, u0, b1, u1))
    frame, _ = _in_trace_frame(xp.page, f"() => ({CANVAS_COLOURED})() > 2000", 30_000)
    # Catapult draws a category's arrows once it is ticked under "Flow events": "All"
    # ticks the answer's one category (kineto's cat) and the canvas gains the arrows
    before = frame.evaluate(CANVAS_PIXELS)
    frame.get_by_text("Flow events").click(timeout=10_000)
    frame.get_by_role("button", name="All", exact=True).click(timeout=10_000)
    xp.page.keyboard.press("Escape")  # the dropdown's dialog closes
    frame.wait_for_function(f"(before) => ({CANVAS_ARROWS})(before) > 500", arg=before, timeout=30_000)
    xp.screenshot(f"trace_viewer_flows_{name.split('.')[0]}")
    # and zoomed in (Catapult's "w" zooms about the pointer), where single arrows show
    box = frame.locator("canvas").first.bounding_box()
    xp.page.mouse.click(box["x"] + box["width"] * 0.55, box["y"] + 8)  # the time ruler: focus, no selection
    for _ in range(8):
        xp.page.keyboard.press("w", delay=120)  # held a while: a zoom step per key-down
        xp.page.wait_for_timeout(150)
    xp.screenshot(f"trace_viewer_flows_{name.split('.')[0]}_zoomed")


# -- memory viewer --------------------------------------------------------------------------

MEMORY_VIEWER_CASES = [
    ("demo_xprof", "mlp"),
    ("demo_xprof", "transformer"),
    ("demo_xprof", "convnet"),
    ("shared_xprof", "tpu_inference"),
    ("shared_xprof", "mi300_jax08_gemm"),
]


def _biggest_module(server: str, run: str) -> str:
    """The run's module with the highest HBM peak, found through XProf's API only."""
    modules = _get(server, "module_list", run=run).split(",")
    peaks = {m: _get(server, "data", run=run, tag="memory_viewer", module_name=m, memory_space=0)["peakHeapMib"]
             for m in modules}
    return max(peaks, key=peaks.get)


@pytest.mark.parametrize("server_fixture, run_prefix", MEMORY_VIEWER_CASES, ids=[c[1] for c in MEMORY_VIEWER_CASES])
def test_memory_viewer(request, xprof_page, server_fixture, run_prefix):
    server = request.getfixturevalue(server_fixture)
    run = _run(server, run_prefix)
    module = _biggest_module(server, run)
    xp = xprof_page(server)
    is_data = lambda r: f"{PREFIX}/data?" in r.url and "tag=memory_viewer" in r.url  # noqa: E731
    with xp.page.expect_response(is_data, timeout=LOAD_TIMEOUT_MS) as first:
        xp.open("memory_viewer", run=run, tag="memory_viewer", moduleName=module)
    assert first.value.status == 200, first.value.text()[:500]
    answer = _json(first.value)
    main = xp.page.locator("memory-viewer-main")
    main.get_by_text("Peak memory allocation:").wait_for(timeout=LOAD_TIMEOUT_MS)
    text = main.inner_text()
    # The summary XProf prints from profscope's preprocess result (HBM, memory space 0).
    assert f"Module Name: {module}" in text
    assert f"Peak memory allocation: {_to_fixed(answer['peakHeapMib'], 2)} MiB, " in text, text[:600]
    assert f"{_to_fixed(answer['totalBufferAllocationMib'], 2)} MiB (with fragmentation)" in text
    if answer.get("entryComputationParametersMib"):  # proto JSON leaves zeros out
        assert f"{_to_fixed(answer['entryComputationParametersMib'], 2)} MiB total argument size" in text
    assert answer["peakHeapMib"] > 0
    xp.screenshot(f"memory_viewer_{run_prefix}")


def test_memory_viewer_after_profscopes_page(xprof_page, xprof_static_dir, demo_logdir, tmp_path):
    """profscope's own page (``view=page``) writes the module's full result beside the
    page (app/compiled_memory.py: one conversion for both); XProf's memory viewer opened
    after it gets that entry as it is (``Content-Encoding: gzip``, nothing converted or
    deflated again), equal to the answer a client without gzip gets, and prints it."""
    with _xprof_server(demo_logdir, tmp_path / "cache", xprof_static_dir) as server:
        run = _run(server, "transformer")
        # the biggest module, by profscope's ranking (its own entries: no full payload made)
        with urlopen(f"{server}/api/module_peaks?{urlencode({'run': run})}", timeout=300) as res:
            module = json.loads(res.read())[0]["moduleName"]
        query = {"run": run, "tag": "memory_viewer", "module_name": module, "memory_space": 0}
        assert _get(server, "data", **query, view="page")["peakHeapMib"] > 0
        with urlopen(f"{server}{PREFIX}/data?{urlencode(query)}", timeout=300) as res:
            plain = res.read()
        xp = xprof_page(server)
        is_data = lambda r: f"{PREFIX}/data?" in r.url and "tag=memory_viewer" in r.url  # noqa: E731
        with xp.page.expect_response(is_data, timeout=LOAD_TIMEOUT_MS) as first:
            xp.open("memory_viewer", run=run, tag="memory_viewer", moduleName=module)
        sent = first.value.headers
        assert first.value.status == 200 and sent.get("content-encoding") == "gzip", sent
        answer = _json(first.value)
        assert answer == json.loads(plain)
        main = xp.page.locator("memory-viewer-main")
        main.get_by_text("Peak memory allocation:").wait_for(timeout=LOAD_TIMEOUT_MS)
        text = main.inner_text()
        assert f"Module Name: {module}" in text
        assert f"Peak memory allocation: {_to_fixed(answer['peakHeapMib'], 2)} MiB, " in text, text[:600]
        xp.screenshot("memory_viewer_after_profscopes_page")


@pytest.fixture(scope="module")
def corrupt_first_xprof(xprof_static_dir, shared_fixtures, tmp_path_factory):
    """A log directory whose first run (XProf's page opens on it) cannot be read."""
    logdir = tmp_path_factory.mktemp("corrupt_logdir")
    _copy_profiles(shared_fixtures, ("tpu_inference_corrupt", "mi300_jax08_gemm"), logdir)
    with _xprof_server(logdir, tmp_path_factory.mktemp("cache"), xprof_static_dir) as url:
        yield url


def test_start_up_on_an_unreadable_run(xprof_page, corrupt_first_xprof):
    """XProf's page lists the tools of the first run at start-up: for a corrupt xplane
    profscope answers as XProf does (200, no tool), so the page loads and still offers
    the other sessions."""
    server = corrupt_first_xprof
    runs = _get(server, "runs")
    assert runs[0].startswith("tpu_inference_corrupt/") and len(runs) == 2
    assert _get(server, "run_tools", run=runs[0]) == []
    xp = xprof_page(server)
    with xp.page.expect_response(lambda r: f"{PREFIX}/run_tools?" in r.url, timeout=LOAD_TIMEOUT_MS) as first:
        xp.page.goto(f"{server}/")
    assert first.value.status == 200 and _json(first.value) == []
    xp.page.get_by_text("Sessions (2)").wait_for(timeout=LOAD_TIMEOUT_MS)
    xp.page.get_by_text("Tools (0)").wait_for(timeout=LOAD_TIMEOUT_MS)
    xp.screenshot("start_up_corrupt_first")


def test_memory_allocation_timeline_page(xprof_page, demo_xprof):
    """XProf's "view memory allocation timeline" link (data?tag=memory_viewer&...&
    view_memory_allocation_timeline=true) opens our own page: drawn offline, every buffer
    of the memory viewer's answer a rectangle on screen."""
    run = _run(demo_xprof, "mlp")
    module = _biggest_module(demo_xprof, run)
    params = {"run": run, "tag": "memory_viewer", "module_name": module, "memory_space": 0}
    answer = _get(demo_xprof, "data", **params)
    buffers = [b for b in answer["bufferBlocks"] if b.get("logicalBufferId", 0) != -1]
    xp = xprof_page(demo_xprof)
    xp.page.goto(f"{demo_xprof}{PREFIX}/data?{urlencode({**params, 'view_memory_allocation_timeline': 'true'})}")
    drawn = xp.page.locator("svg#allocation-timeline rect.buffer")
    assert drawn.count() == len(buffers) > 10
    box = xp.page.locator("svg#allocation-timeline").bounding_box()
    assert box and box["width"] > 1000 and box["height"] > 600
    assert not xp.outside, xp.outside
    xp.screenshot("memory_allocation_timeline_mlp")


# -- memory profile -------------------------------------------------------------------------

MEMORY_PROFILE_CASES = [
    ("demo_xprof", "tf_bfc"),
    ("shared_xprof", "tf_gpu"),
    ("shared_xprof", "tpu_inference"),
    ("shared_xprof", "mi300_jax08_gemm"),
    ("torch_xprof", "niu_fwd_bwd_200_mixed.pickle"),
    ("torch_xprof", "tracelens_h100_bert_small.trace.json.gz"),
    ("torch_xprof", "kineto_resnet50_v100.pt.trace.json.gz"),  # 8,220 CUDA:0 events: a sampled timeline
]


def _run_named(server: str, name: str) -> str:
    """A session run (``<prefix>/<session>``) or a single-file run named ``name``."""
    runs = _get(server, "runs")
    return name if name in runs else _run(server, name)


def _profscope_peak(server: str, run: str, host: str, allocator: str) -> dict:
    """What profscope's own API computes for a PyTorch run: peak, capacity (the OOM risk's:
    the device memory the trace states) and (de)allocation counts."""
    if run.endswith(".pickle"):
        with urlopen(f"{server}/api/snapshot/overview?{urlencode({'run': run, 'host': host})}", timeout=300) as res:
            s = json.loads(res.read())["summary"]
        return {"peak": s["peak"]["bytes"]}
    with urlopen(f"{server}/api/memory_profile?{urlencode({'run': run})}", timeout=300) as res:
        devices = json.loads(res.read())["devices"]
    d = next(d for d in devices if d["device"] == allocator)
    risk = _get(server, "data", run=run, tag="oom_risk")
    return {"peak": d["summary"]["peakAllocatedBytes"], "firstDevice": devices[0]["device"],
            "capacity": risk["capacityBytes"] if risk["capacitySource"] == "trace_device" else None,
            "events": d["summary"]["numEvents"],
            "allocations": d["summary"]["numAllocations"], "deallocations": d["summary"]["numDeallocations"]}


@pytest.mark.parametrize("server_fixture, run_prefix", MEMORY_PROFILE_CASES, ids=[c[1] for c in MEMORY_PROFILE_CASES])
def test_memory_profile(request, xprof_page, server_fixture, run_prefix):
    server = request.getfixturevalue(server_fixture)
    run = _run_named(server, run_prefix)
    xp = xprof_page(server)
    xp.open("memory_profile", run=run, tag="memory_profile")
    # XProf asks once with host_id=0 before it knows the host, then with its first host.
    host = _get(server, "hosts", run=run, tag="memory_profile")[0]["hostname"]
    answer = _get(server, "data", run=run, tag="memory_profile", host=host)
    allocator = answer["memoryIds"][0]  # the Memory ID XProf selects first
    profile = answer["memoryProfilePerAllocator"][allocator]
    summary, peak = profile["profileSummary"], profile["profileSummary"]["peakStats"]
    # XProf counts (de)allocations over the sampled timeline in a version-1 answer.
    snapshots = profile["sampledTimelineSnapshots" if answer.get("version") == 1 else "memoryProfileSnapshots"]
    activities = [s.get("activityMetadata", {}).get("memoryActivity") for s in snapshots]

    panel = xp.page.locator("memory-profile-summary")
    panel.get_by_text("#Allocation").wait_for(timeout=LOAD_TIMEOUT_MS)
    xp.page.get_by_text(allocator, exact=True).first.wait_for()
    text = re.sub(r"\s+", " ", panel.inner_text())
    # Each number XProf prints, as XProf formats it, from the answer profscope sent.
    assert f"#Allocation {activities.count('ALLOCATION')} " in text, text
    assert f"#Deallocation {activities.count('DEALLOCATION')} " in text, text
    assert f"Memory Capacity {_xprof_bytes(int(summary['memoryCapacity']))} " in text, text
    assert f"window {_xprof_bytes(int(summary['peakBytesUsageLifetime']))} " in text, text
    assert f"window {_xprof_bytes(int(peak['peakBytesInUse']))} " in text, text
    assert f"Heap Allocation: {_xprof_bytes(int(peak['heapAllocatedBytes']))} " in text, text
    assert activities.count("ALLOCATION") > 0
    if server_fixture == "torch_xprof":
        # The numbers XProf prints are the ones profscope's own API computes.
        ours = _profscope_peak(server, run, host, allocator)
        assert int(peak["peakBytesInUse"]) == int(peak["heapAllocatedBytes"]) == ours["peak"]
        assert f"window {_xprof_bytes(ours['peak'])} " in text, text
        if "capacity" in ours:
            # XProf's page opens on the device profscope's page opens on: the highest peak.
            assert allocator == ours["firstDevice"] == "CUDA:0"
            # The GPU's own memory (totalGlobalMem, 79.18 GiB on the H100), not its
            # reserved bytes (116 MiB there).
            assert int(summary["memoryCapacity"]) == ours["capacity"]
            # XProf's sampling rule: every event up to 1,000 of them, counted as they are.
            assert len(snapshots) == min(1000, ours["events"])
            if ours["events"] <= 1000:
                assert f"#Allocation {ours['allocations']} " in text and f"#Deallocation {ours['deallocations']} " in text
    xp.screenshot(f"memory_profile_{run_prefix.split('.')[0]}")


def test_memory_profile_without_allocator_events(xprof_page, demo_xprof):
    """A JAX CPU profile has no allocator events: XProf says so (and logs its own
    TypeError, which it also logs against its own server's identical answer)."""
    run = _run(demo_xprof, "mlp")
    assert _get(demo_xprof, "data", run=run, tag="memory_profile")["memoryIds"] == []
    xp = xprof_page(demo_xprof)
    xp.allowed_errors.append(EMPTY_MEMORY_PROFILE_ERROR)
    xp.open("memory_profile", run=run, tag="memory_profile")
    xp.page.get_by_text("There is no memory profile to display").wait_for(timeout=LOAD_TIMEOUT_MS)
    xp.screenshot("memory_profile_empty")


# -- HLO op profile ---------------------------------------------------------------------------

# A top row of XProf's op table: its time share, the wasted column, then the node's name.
OP_ROW = re.compile(r"^([0-9.]+)%\n-\n► (.+)$", re.M)


OP_PROFILE_CASES = [("mi300_jax08_gemm", "tw003", "GPU", 16), ("tpu_inference", "tpu_inference_2", "TPU", 3)]


@pytest.mark.parametrize("run_prefix, host, device, programs", OP_PROFILE_CASES, ids=[c[0] for c in OP_PROFILE_CASES])
def test_op_profile(xprof_page, shared_xprof, run_prefix, host, device, programs):
    """XProf's HLO op profile page draws profscope's op_profile of the ROCm GEMM and the
    TPU v6e profiles (issue 34): its top rows are the programs, largest first, each with
    the share of the device's busy time XProf computes from the tree profscope sent
    ("Exclude Idle" is on by default: ``byProgramExcludeIdle``)."""
    run = _run(shared_xprof, run_prefix)
    xp = xprof_page(shared_xprof)
    is_data = lambda r: f"{PREFIX}/data?" in r.url and "tag=op_profile" in r.url  # noqa: E731
    with xp.page.expect_response(is_data, timeout=LOAD_TIMEOUT_MS) as first:
        xp.open("op_profile", run=run, tag="op_profile", host=host)
    assert first.value.status == 200, first.value.text()[:500]
    tree = _json(first.value)["byProgramExcludeIdle"]
    assert len(tree["children"]) == programs
    top = tree["children"][0]["name"]
    xp.page.wait_for_function("n => document.body.innerText.includes('► ' + n)", arg=top, timeout=LOAD_TIMEOUT_MS)
    assert f"Overall {device} FLOPS utilization" in xp.page.inner_text("body")
    rows = OP_ROW.findall(xp.page.inner_text("body"))
    assert len(rows) >= min(programs, 10), xp.page.inner_text("body")[:2000]
    expected = [(_to_fixed(100 * p["metrics"]["rawTime"] / tree["metrics"]["rawTime"], 2), p["name"])
                for p in tree["children"]]
    assert rows == expected[: len(rows)]
    if run_prefix == "mi300_jax08_gemm":
        assert rows[0] == ("53.67", "jit_dot(49)")  # 1833.003 µs of the devices' 3415.244 µs busy
    xp.screenshot(f"op_profile_{run_prefix}")


# -- HLO op stats -----------------------------------------------------------------------------

HLO_STATS_CASES = [("mi300_jax08_gemm", "tw003", 16), ("tpu_inference", "tpu_inference_2", 17)]


def _hlo_stats_column_ids(static_dir: Path) -> set[str]:
    """The DataTable columns XProf's HLO op stats page looks up by id (its column-id
    constants, declared together in the bundle just before the ``hlo-stats`` component:
    ``const Tf="avg_time",If="model_flop_rate",...,ZO="SparseCore"``)."""
    bundle = (static_dir / "bundle.js").read_text()
    start = bundle.index('="avg_time",')
    block = bundle[bundle.rindex("const ", 0, start): bundle.index(";", start)]
    ids = set(re.findall(r'="([a-z_]+)"', block)) - {"SparseCore"}  # a core type, not a column
    assert {"program_id", "hlo_op_name", "total_self_time", "core_type"} <= ids, block
    return ids


@pytest.mark.parametrize("run_prefix, host, rows", HLO_STATS_CASES, ids=[c[0] for c in HLO_STATS_CASES])
def test_hlo_stats(xprof_page, shared_xprof, xprof_static_dir, run_prefix, host, rows):
    """XProf's HLO op stats page asks profscope for ``hlo_stats`` of the ROCm GEMM and the
    TPU v6e profiles and gets a DataTable holding every column the page looks up by id,
    one row per op. Its table and charts are Google Charts only: ``whenChartsLoaded``
    calls ``google.charts.safeLoad`` before it reads the answer, which an offline machine
    cannot load (the page stays on "Loading hlo data", its console says ``google is not
    defined``), so what it would draw is not checked here; tests/test_xprof_op_stats.py
    compares the answer to XProf's own, row by row."""
    run = _run(shared_xprof, run_prefix)
    xp = xprof_page(shared_xprof)
    is_data = lambda r: f"{PREFIX}/data?" in r.url and "tag=hlo_stats" in r.url  # noqa: E731
    with xp.page.expect_response(is_data, timeout=LOAD_TIMEOUT_MS) as first:
        xp.open("hlo_stats", run=run, tag="hlo_stats", host=host)
    assert first.value.status == 200, first.value.text()[:500]
    asked = dict(p.split("=", 1) for p in urlparse(first.value.url).query.split("&"))
    assert asked["host"] == host and asked["tag"] == "hlo_stats"
    table = _json(first.value)
    assert _hlo_stats_column_ids(xprof_static_dir) <= {c["id"] for c in table["cols"]}
    assert len(table["rows"]) == rows
    xp.page.wait_for_function("() => document.body.innerText.includes('Loading hlo data')", timeout=LOAD_TIMEOUT_MS)
    xp.screenshot(f"hlo_stats_{run_prefix}")


# -- overview page ----------------------------------------------------------------------------

OVERVIEW_CASES = [("shared", "mi300_jax08_gemm", "tw003", 0), ("demo", "mlp", "demo-host", 3),
                  ("shared", "tf_gpu", "ALL_HOSTS", 1)]


@pytest.mark.parametrize("server_fixture, run_prefix, host, steps", OVERVIEW_CASES, ids=[c[1] for c in OVERVIEW_CASES])
def test_overview_page(request, xprof_page, server_fixture, run_prefix, host, steps):
    """XProf's overview page draws profscope's ``overview_page`` (7 DataTables, whose
    step-time graph tests/test_xplane_step_breakdown.py compares to XProf's own): its
    performance summary shows the step-time graph's average step time and all-others
    time, and a profile without steps gets XProf's "No step marker observed" warning. The
    graph itself is a Google Chart, which an offline machine cannot load. The two-host TF
    GPU run has only XProf's merged host, ALL_HOSTS, for this tool."""
    server = request.getfixturevalue(f"{server_fixture}_xprof")
    run = _run(server, run_prefix)
    xp = xprof_page(server)
    is_data = lambda r: f"{PREFIX}/data?" in r.url and "tag=overview_page" in r.url  # noqa: E731
    with xp.page.expect_response(is_data, timeout=LOAD_TIMEOUT_MS) as first:
        xp.open("overview_page", run=run, tag="overview_page", host=host)
    assert first.value.status == 200, first.value.text()[:500]
    tables = _json(first.value)
    assert len(tables) == 7 and len(tables[1]["rows"]) == steps
    graph = tables[1]["p"]
    xp.page.wait_for_function("() => document.body.innerText.includes('Average Step Time')", timeout=LOAD_TIMEOUT_MS)
    text = xp.page.inner_text("body")
    assert re.search(rf"Average Step Time\s*\(σ = {re.escape(graph['steptime_ms_standard_deviation'])} ms\)"
                     rf"[^\d]*{re.escape(graph['steptime_ms_average'])} ms", text), text[:1500]
    assert re.search(rf"All Others Time\s*\(σ = {re.escape(graph['other_time_ms_sdv'])} ms\)\s*"
                     rf"{re.escape(graph['other_time_ms_avg'])} ms", text), text[:1500]
    assert ("No step marker observed" in text) == (steps == 0)
    xp.screenshot(f"overview_page_{run_prefix}")
