"""The trace viewer page end to end: the real server on the bundled demo (real JAX
profiles, real torch.profiler traces), Debian's Chromium driven by Playwright, network cut,
no mocks.

What a user relies on: rows and slices are drawn; zooming in (the mouse wheel, around the
cursor) refetches the window at the canvas's width so a slice hidden at the full view
(absent from that window's response) shows up, and clicking it opens its details with its
args; search finds slices and clicking a match zooms to it and selects it; the copied URL
reopens the same window and selection; keys and drags move the window; a torch trace and a
trace with 50k visible slices render. The page exposes ``window.__traceViewer`` (what it
drew where) so the test can find on screen the slices it took from the JSON API.
Screenshots go to test-artifacts/ for a person to look at."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS, profscope_server

pytestmark = pytest.mark.browser

READY = "window.__traceViewer && __traceViewer.ready()"


@pytest.fixture(scope="module")
def server_url(demo_server):
    return demo_server


@pytest.fixture(scope="module")
def mlp_run(demo_expected):
    return f"mlp/{demo_expected['programs']['mlp']['session']}"


def _get_json(server: str, path: str, **params) -> dict:
    with urlopen(f"{server.rstrip('/')}{path}?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def _view_url(server: str, **state) -> str:
    return f"{server}?{urlencode(state, quote_via=quote)}"


def _ids(window: dict) -> set[int]:
    return set(window["slices"]["id"])


def _open(open_page, server: str, **state):
    """The trace viewer in a fresh browser profile. The page draws on its own canvas; the
    4.6 MB Plotly bundle every page of the app loads is answered empty here, which saves
    seconds per page (test_browser.py opens this page with Plotly loaded)."""
    page = open_page(server)
    page.route("**/static/vendor/plotly.min.js", lambda r: r.fulfill(body="", content_type="text/javascript"))
    if state:
        page.goto(_view_url(server, **state))
    return page


def _ready(page, timeout=60_000):
    page.wait_for_function(READY, timeout=timeout)


def _hook(page, what: str, *args):
    return page.evaluate(f"(a) => __traceViewer.{what}(...a)", list(args))


def _query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def _slice(page, event_id: int) -> dict | None:
    return next((s for s in _hook(page, "visibleSlices") if s["id"] == event_id), None)


def _assert_painted(page, s: dict):
    """The canvas really has the slice's colour where the hook says it drew it."""
    rgb = _hook(page, "pixel", s["x"] + min(s["w"], 4) / 2, s["y"] + s["h"] / 2)
    assert rgb != [255, 255, 255], f"nothing painted under {s['name']!r} at ({s['x']}, {s['y']})"


def test_zoom_reveals_click_search_and_share(open_page, server_url, mlp_run):
    ARTIFACTS.mkdir(exist_ok=True)
    page = _open(open_page, server_url, run=mlp_run, tool="trace_viewer@")
    _ready(page)
    res = _hook(page, "resolution")
    full = _get_json(server_url, "/api/trace/window", run=mlp_run, resolution=res)
    assert full["resolution"] == res

    # Rows: one header per process with tracks, one row per track; slices drawn are the
    # window's (and there are slices on screen, with paint under them).
    rows = _hook(page, "rows")
    shown_tracks = [r for r in rows if r["type"] == "track"]
    assert len(shown_tracks) == len(full["tracks"])
    assert {r["name"] for r in shown_tracks} == {t["name"] for t in full["tracks"]}
    drawn = _hook(page, "visibleSlices")
    assert len(drawn) > 20
    assert {s["id"] for s in drawn} <= _ids(full)
    _assert_painted(page, max(drawn, key=lambda s: s["w"]))
    assert page.locator("#tv-window").inner_text().endswith("ms)")
    assert "of" in page.inner_text("#tv-counts")
    page.screenshot(path=str(ARTIFACTS / "trace_viewer.png"), full_page=True)

    # A slice hidden at the full view: in the finest window, absent from the one the page
    # drew. Take the longest such slice (easy to hit once zoomed).
    fine = _get_json(server_url, "/api/trace/window", run=mlp_run, resolution=100000)
    cols = fine["slices"]
    slice_tracks = {t["id"] for t in full["tracks"] if t["kind"] == "slices"}
    hidden = [i for i, ev_id in enumerate(cols["id"]) if ev_id not in _ids(full) and cols["track"][i] in slice_tracks]
    assert hidden, "the demo profile is dense enough to hide short slices at the full view"
    h = max(hidden, key=lambda i: cols["dur"][i])
    target = {k: cols[k][h] for k in ("id", "track", "start", "dur", "depth")}
    target["name"] = fine["names"][cols["name"][h]]

    # Zoom with the wheel at the slice's x until it is some 40 px wide.
    box = page.locator("#tv-canvas").bounding_box()
    plot_left = box["x"] + (box["width"] - res)
    v0, v1 = _hook(page, "window")
    x = plot_left + (target["start"] + target["dur"] / 2 - v0) / (v1 - v0) * res
    page.mouse.move(x, box["y"] + 60)
    want = max(target["dur"] * res / 40, 1e-4)
    for _ in range(40):
        v0, v1 = _hook(page, "window")
        if v1 - v0 <= want:
            break
        page.mouse.wheel(0, -240)
        page.wait_for_timeout(30)
    _ready(page)
    v0, v1 = _hook(page, "window")
    assert v1 - v0 <= want * 1.01 and v0 <= target["start"] and target["start"] + target["dur"] <= v1
    q = _query(page)
    assert float(q["start_ms"]) == pytest.approx(v0, abs=(v1 - v0) * 1e-3)
    assert float(q["end_ms"]) == pytest.approx(v1, abs=(v1 - v0) * 1e-3)
    # The zoomed window's response holds the slice; the page drew it.
    d0, d1 = _hook(page, "dataWindow")
    zoomed = _get_json(server_url, "/api/trace/window", run=mlp_run, start_ms=q["start_ms"], end_ms=q["end_ms"], resolution=res)
    assert target["id"] in _ids(zoomed)
    assert d0 == pytest.approx(float(q["start_ms"]), abs=1e-9) and d1 == pytest.approx(float(q["end_ms"]), abs=1e-9)
    s = _slice(page, target["id"])
    assert s is not None, f"slice {target} is not drawn after zooming to {v0}..{v1}"
    assert s["name"] == target["name"] and s["w"] > 10
    _assert_painted(page, s)

    # "Download window" exports exactly this window as Chrome-trace JSON, the slice in it.
    href = page.get_attribute("#tv-export-window", "href")
    exported = parse_qs(urlparse(href).query)
    assert (exported["start_ms"], exported["end_ms"]) == ([q["start_ms"]], [q["end_ms"]])
    with urlopen(server_url.rstrip("/") + href, timeout=60) as r:
        assert "attachment" in r.headers["Content-Disposition"]
        trace = json.loads(r.read())
    assert any(e.get("ph") == "X" and e["name"] == target["name"] and e["dur"] == pytest.approx(target["dur"] * 1000, abs=1e-3)
               for e in trace["traceEvents"])  # Chrome-trace µs
    assert "start_ms" not in page.get_attribute("#tv-export-all", "href")

    # Click it: the details card with every arg; the selection is in the URL.
    page.mouse.click(s["x"] + s["w"] / 2, s["y"] + s["h"] / 2)
    page.wait_for_function(f"new URLSearchParams(location.search).get('ev') === '{target['id']}'")
    page.wait_for_selector("#tv-card.selected")
    event = _get_json(server_url, "/api/trace/event", run=mlp_run, id=target["id"])
    card = page.inner_text("#tv-card")
    assert event["name"] in card
    assert event["track"]["name"] in card
    for k, v in event["args"].items():
        assert k in card
        assert (v if isinstance(v, str) else json.dumps(v))[:60] in card
    if event.get("module"):
        href = page.get_attribute("#tv-memory-link", "href")
        assert parse_qs(urlparse(href).query)["module_name"] == [event["module"]]
        assert parse_qs(urlparse(href).query)["tool"] == ["memory_viewer"]
    assert _hook(page, "selected") == str(target["id"])
    page.screenshot(path=str(ARTIFACTS / "trace_viewer_zoomed_selected.png"), full_page=True)

    # Search: the page lists what the API finds; a click zooms to the match and selects it.
    query = target["name"][: max(3, len(target["name"]) // 2)]
    found = _get_json(server_url, "/api/trace/search", run=mlp_run, q=query, limit=50)
    assert found["matches"]
    page.fill("#tv-search", query)
    page.wait_for_function(f"document.querySelectorAll('.tv-match').length === {len(found['matches'])}")
    pick = next((m for m in found["matches"] if m["id"] != target["id"]), found["matches"][0])
    page.locator(f".tv-match[data-id='{pick['id']}']").click()
    page.wait_for_function(f"new URLSearchParams(location.search).get('ev') === '{pick['id']}'")
    _ready(page)
    page.wait_for_function(f"document.querySelector('#tv-card.selected .tv-card-name')?.textContent === {json.dumps(pick['name'])}")
    v0, v1 = _hook(page, "window")
    assert v0 <= pick["start"] and pick["start"] + pick["dur"] <= v1
    assert _slice(page, pick["id"]) is not None, "the match is drawn once zoomed to"
    q = _query(page)
    assert q["q"] == query and q["ev"] == str(pick["id"])
    page.screenshot(path=str(ARTIFACTS / "trace_viewer_search.png"), full_page=True)

    # The copied URL, in another browser profile: same window, selection and search.
    link = page.url
    # (and Back in this one returns to the slice clicked before, in its window)
    page.go_back()
    page.wait_for_function(f"__traceViewer.selected() === '{target['id']}'")
    page.wait_for_function(f"document.querySelector('#tv-card.selected .tv-card-name')?.textContent === {json.dumps(target['name'])}")
    v0, v1 = _hook(page, "window")
    assert v0 <= target["start"] and target["start"] + target["dur"] <= v1
    other = _open(open_page, server_url)
    other.goto(link)
    _ready(other)
    other.wait_for_selector("#tv-card.selected")
    assert _hook(other, "window") == pytest.approx([float(q["start_ms"]), float(q["end_ms"])], abs=1e-9)
    assert _hook(other, "selected") == str(pick["id"])
    assert pick["name"] in other.inner_text("#tv-card .tv-card-name")
    assert other.input_value("#tv-search") == query
    other.wait_for_selector(f".tv-match[data-id='{pick['id']}']")
    assert _slice(other, pick["id"]) is not None
    other.screenshot(path=str(ARTIFACTS / "trace_viewer_shared_link.png"), full_page=True)

    # Reset zoom: the whole trace again, and the window leaves the URL.
    other.click("#tv-reset")
    _ready(other)
    assert _hook(other, "window") == pytest.approx(full["fullTimespan"], abs=1e-9)
    assert "start_ms" not in _query(other)


def test_keys_drag_and_range(open_page, server_url, mlp_run):
    page = _open(open_page, server_url, run=mlp_run, tool="trace_viewer@")
    _ready(page)
    full = _hook(page, "window")
    span = full[1] - full[0]
    page.locator("#tv-canvas").focus()
    for _ in range(3):
        page.keyboard.press("w")  # zoom in around the centre
    w = _hook(page, "window")
    assert w[1] - w[0] == pytest.approx(span * 0.8**3, rel=1e-3)  # bounds are rounded to ~1/10000 of the span
    assert (w[0] + w[1]) / 2 == pytest.approx((full[0] + full[1]) / 2, abs=span * 1e-3)
    page.keyboard.press("d")  # pan right
    d = _hook(page, "window")
    assert d[0] > w[0] and d[1] - d[0] == pytest.approx(w[1] - w[0], rel=1e-3)
    page.keyboard.press("a")
    assert _hook(page, "window") == pytest.approx(w, abs=span * 1e-3)
    _ready(page)
    assert _hook(page, "dataWindow") == pytest.approx(w, abs=span * 1e-5)

    # Drag the tracks: the window moves by the dragged time.
    box = page.locator("#tv-canvas").bounding_box()
    res = _hook(page, "resolution")
    left = box["x"] + box["width"] - res
    y = box["y"] + box["height"] - 20
    before = _hook(page, "window")
    page.mouse.move(left + 600, y)
    page.mouse.down()
    page.mouse.move(left + 500, y, steps=5)
    page.mouse.up()
    after = _hook(page, "window")
    assert after[0] - before[0] == pytest.approx(100 / res * (before[1] - before[0]), rel=1e-2)

    # Drag on the ruler: zoom to that range.
    page.mouse.move(left + 200, box["y"] + 10)
    page.mouse.down()
    page.mouse.move(left + 400, box["y"] + 10, steps=5)
    page.mouse.up()
    a = after[0] + 200 / res * (after[1] - after[0])
    b = after[0] + 400 / res * (after[1] - after[0])
    assert _hook(page, "window") == pytest.approx([a, b], abs=(b - a) * 1e-2)
    page.keyboard.press("0")
    assert _hook(page, "window") == pytest.approx(full)

    # A process header in the names column collapses its tracks, and expands them again.
    rows = _hook(page, "rows")
    header = rows[0]
    assert header["type"] == "process"
    page.mouse.click(box["x"] + 20, box["y"] + 38 + header["y"] + header["h"] / 2)
    collapsed = _hook(page, "rows")
    assert [r["type"] for r in collapsed].count("track") < [r["type"] for r in rows].count("track")
    assert not _hook(page, "visibleSlices")  # the demo has one process: nothing left to draw
    page.mouse.click(box["x"] + 20, box["y"] + 38 + header["y"] + header["h"] / 2)
    assert _hook(page, "rows") == rows

    # A hand-edited link with an empty window: said so, and the whole trace instead.
    page.goto(_view_url(server_url, run=mlp_run, tool="trace_viewer@", start_ms="5", end_ms="1"))
    page.wait_for_selector("#tv-bad-window")
    _ready(page)
    assert _hook(page, "window") == pytest.approx(full)


def test_torch_trace_renders(open_page, server_url, demo_logdir):
    import gzip

    run = "torch/mlp_train.pt.trace.json.gz"
    events = json.loads(gzip.decompress((demo_logdir / run).read_bytes()))["traceEvents"]
    steps = {e["name"] for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")}
    page = _open(open_page, server_url, run=run, tool="trace_viewer@", flows="all")  # every arrow, not only the selection's
    _ready(page)
    drawn = _hook(page, "visibleSlices")
    assert len(drawn) > 100
    assert steps <= {s["name"] for s in drawn}, "every ProfilerStep# slice (longer than a pixel) is drawn"
    _assert_painted(page, next(s for s in drawn if s["name"] in steps))
    assert any(r["type"] == "track" for r in _hook(page, "rows"))
    # torch's fwdbwd flows (forward op -> its backward op) are drawn as arrows
    flows = sum(1 for e in events if e.get("ph") == "f")
    assert _hook(page, "flows") == {"inWindow": flows, "drawn": flows}
    page.screenshot(path=str(ARTIFACTS / "trace_viewer_torch.png"), full_page=True)


@pytest.fixture(scope="module")
def big_trace_url(tmp_path_factory):
    """A Chrome trace with 60k slices spread evenly over 40 threads: all visible at once
    (each wider than a pixel on a 2,600 px timeline, so the server returns every one)."""
    root = tmp_path_factory.mktemp("bigtrace")
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "workers"}}]
    n_threads, per_thread = 40, 1500
    for t in range(n_threads):
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": t + 1, "args": {"name": f"worker {t}"}})
        for j in range(per_thread):  # back to back, 600 µs apart, over 0.9 s
            events.append({"ph": "X", "name": f"op{j % 97}", "pid": 1, "tid": t + 1, "ts": j * 600.0, "dur": 590.0})
    (root / "big.trace.json").write_text(json.dumps({"traceEvents": events}))
    # and one with names only, no events
    (root / "empty.trace.json").write_text(json.dumps({"traceEvents": events[:2]}))
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def test_fifty_thousand_visible_slices(open_page, big_trace_url):
    page = _open(open_page, big_trace_url)
    page.set_viewport_size({"width": 2900, "height": 1400})  # ~2,630 px of timeline, room for 40 rows
    page.goto(_view_url(big_trace_url, run="big.trace.json", tool="trace_viewer@"))
    _ready(page)
    window = _get_json(big_trace_url, "/api/trace/window", run="big.trace.json", resolution=_hook(page, "resolution"))
    assert len(window["slices"]["id"]) == 60_000
    drawn = page.evaluate("__traceViewer.visibleSlices().length")
    assert drawn == 60_000
    # Full repaints, rasterised, timed in the page. Headless Chromium rasterises in software
    # on one core (~100 ms here on a loaded 2-core machine; a GPU browser is far faster):
    # the bound catches a paint gone out of hand (DOM per slice, redraws per slice), not a
    # slow machine.
    times = sorted(page.evaluate("[0, 1, 2, 3, 4].map(() => __traceViewer.benchPaint())"))
    print(f"60k-slice repaint (rasterised): {[round(t) for t in times]} ms")
    assert times[len(times) // 2] < 400, f"painting 60k slices takes {times} ms"
    page.screenshot(path=str(ARTIFACTS / "trace_viewer_60k.png"))


def test_memory_counter_track(open_page, server_url):
    """The TF profile's allocator counter is a row; hovering it shows the bytes there."""
    run = next(r["name"] for r in _get_json(server_url, "/api/runs")["runs"] if r["name"].startswith("tf_bfc/"))
    page = _open(open_page, server_url, run=run, tool="trace_viewer@")
    _ready(page)
    res = _hook(page, "resolution")
    data = _get_json(server_url, "/api/trace/window", run=run, resolution=res)
    counter = data["counters"][0]
    assert counter["unit"] == "bytes" and counter["t"]
    rows = _hook(page, "rows")
    row = next(r for r in rows if r["kind"] == "counter" and r["name"] == next(t["name"] for t in data["tracks"] if t["id"] == counter["track"]))
    box = page.locator("#tv-canvas").bounding_box()
    left = box["x"] + box["width"] - res
    v0, v1 = _hook(page, "window")
    top = box["y"] + 38 - page.evaluate("document.getElementById('tv-scroll').scrollTop")  # below the ruler
    if top + row["y"] + row["h"] > box["y"] + box["height"]:
        page.evaluate(f"document.getElementById('tv-scroll').scrollTop = {row['y']}")
        top = box["y"] + 38 - row["y"]
    peak = max(range(len(counter["t"])), key=lambda i: counter["v"][i])
    x = left + (counter["t"][peak] - v0) / (v1 - v0) * res + 0.5
    page.mouse.move(x, top + row["y"] + row["h"] / 2)
    page.wait_for_selector("#tv-tip:not([hidden])")
    tip = page.inner_text("#tv-tip")
    # The value of the last sample at or before the cursor: the peak or a neighbour.
    near = [i for i, t in enumerate(counter["t"]) if abs(left + (t - v0) / (v1 - v0) * res - x) <= 2]
    expected = {page.evaluate("v => import('/static/lib/format.js').then((m) => m.fmtBytes(v))", counter["v"][i]) for i in near + [max(min(near) - 1, 0)]}
    assert any(e in tip for e in expected), (tip, expected)
    assert counter["name"] in tip
    page.screenshot(path=str(ARTIFACTS / "trace_viewer_counter.png"))


@pytest.fixture(scope="module")
def two_host_url(tmp_path_factory, demo_logdir):
    """A profile session with two hosts (the demo's mlp and convnet xplanes, renamed)."""
    from profscope.testing.timelines import profile_session

    root = tmp_path_factory.mktemp("twohosts")
    xplane = {name: next((demo_logdir / name).rglob("*.xplane.pb")) for name in ("mlp", "convnet")}
    profile_session(root, {"alpha": xplane["mlp"], "beta": xplane["convnet"]})
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def test_merge_hosts(open_page, two_host_url):
    run = _get_json(two_host_url, "/api/runs")["runs"][0]["name"]
    page = _open(open_page, two_host_url, run=run, tool="trace_viewer@")
    _ready(page)
    one = [r["name"] for r in _hook(page, "rows") if r["type"] == "process"]
    page.click("#tv-hosts summary")
    page.click("#tv-hosts button:has-text('All hosts')")
    page.wait_for_function("new URLSearchParams(location.search).get('hosts') === 'alpha,beta'")
    _ready(page)
    merged = _get_json(two_host_url, "/api/trace/window", run=run, hosts="alpha,beta", resolution=_hook(page, "resolution"))
    rows = _hook(page, "rows")
    procs = [r["name"] for r in rows if r["type"] == "process"]
    assert len(procs) > len(one)
    assert any("alpha" in p for p in procs) and any("beta" in p for p in procs)
    assert len([r for r in rows if r["type"] == "track"]) == len(merged["tracks"])
    assert {s["id"] for s in _hook(page, "visibleSlices")} <= _ids(merged)
    assert "hosts alpha, beta" in page.inner_text(".tv-subtitle")
    page.screenshot(path=str(ARTIFACTS / "trace_viewer_two_hosts.png"), full_page=True)


def test_the_page_draws_the_binary_answer(open_page, two_host_url):
    """The page asks for its windows as binary columns (``format=columns``, read by
    lib/columns.js) and draws them as it drew the JSON answer: the count it shows is the
    JSON answer's ``returnedEventsSize``, each slice it draws the JSON's, the second
    host's too (ids with host bits: a float64 column)."""
    run = _get_json(two_host_url, "/api/runs")["runs"][0]["name"]
    asked = []
    page = _open(open_page, two_host_url)
    page.set_viewport_size({"width": 1400, "height": 2400})  # both hosts' rows on screen
    page.on("response", lambda r: asked.append((r.url, r.headers.get("content-type"))) if "/api/trace/window" in r.url else None)
    page.goto(_view_url(two_host_url, run=run, tool="trace_viewer@", hosts="alpha,beta"))
    _ready(page)
    assert asked and all("format=columns" in u and t == "application/vnd.profscope.columns" for u, t in asked), asked
    w = _get_json(two_host_url, "/api/trace/window", run=run, hosts="alpha,beta", resolution=_hook(page, "resolution"))
    assert page.inner_text("#tv-counts").startswith(f"{w['returnedEventsSize']:,} of {w['totalEventsSize']:,} events")
    cols = w["slices"]
    at = {i: k for k, i in enumerate(cols["id"])}
    drawn = _hook(page, "visibleSlices")
    assert len(drawn) > 20 and any(s["id"] >= 1 << 40 for s in drawn)
    for s in drawn:
        k = at[s["id"]]
        assert (s["track"], s["depth"], s["start"], s["dur"], s["name"]) == (
            cols["track"][k], cols["depth"][k], cols["start"][k], cols["dur"][k], w["names"][cols["name"][k]])


def test_empty_trace_says_so(open_page, big_trace_url):
    page = _open(open_page, big_trace_url, run="empty.trace.json", tool="trace_viewer@")
    page.wait_for_selector("#tv-empty")
    assert "no events" in page.inner_text("#tv-empty")
    assert page.locator("#tv-stage").is_hidden()


def test_hlo_op_links_to_the_memory_viewer(open_page, server_url, mlp_run, demo_expected):
    """An XLA op's card names its module; the link opens the memory viewer on it."""
    found = _get_json(server_url, "/api/trace/search", run=mlp_run, q="fusion", limit=50)
    event = next(e for e in (_get_json(server_url, "/api/trace/event", run=mlp_run, id=m["id"]) for m in found["matches"]) if e.get("module"))
    assert event["module"] == demo_expected["programs"]["mlp"]["profile_module_name"]
    page = open_page(server_url)  # with Plotly: the memory viewer draws with it
    page.goto(_view_url(server_url, run=mlp_run, tool="trace_viewer@", ev=event["id"]))
    page.wait_for_selector("#tv-memory-link")
    card = page.inner_text("#tv-card")
    assert event["hloOp"] in card and event["hloModule"] in card
    page.click("#tv-memory-link")
    page.wait_for_selector("#mv-overview .mv-peak-value", timeout=60_000)
    q = _query(page)
    assert q["tool"] == "memory_viewer" and q["module_name"] == event["module"] and "ev" not in q
    page.go_back()
    page.wait_for_function(f"document.querySelector('#tv-card.selected .tv-card-name')?.textContent === {json.dumps(event['name'])}")
