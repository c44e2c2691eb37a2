"""The memory viewer's charts as a user reads them (issue 16), in Debian's Chromium on the
real demo profiles (JAX on CPU: the mlp and transformer training steps, from their
xplanes' /host:metadata), network cut, no mocks.

* The heap chart's hover names the buffer each heap-simulator event allocates, frees or
  shares, with its size and the heap before and after, whichever of the two lines
  (padded, unpadded: equal on these CPU modules) wins the hover.
* Every byte axis is in binary units (KiB, MiB), also after a zoom; Plotly's own ticks
  would be SI ("7.00G").
* The peaks say "compiler heap peak"; the "buffers live at peak" counts agree wherever
  they are shown and say what they count; the bar colours have a legend.

Expected values come from the JSON API's full (not decimated) payload, whose events
tests/test_memory_viewer_heap_points.py checks against the HloProto."""

from __future__ import annotations

import json
import re
from urllib.parse import quote, urlencode
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS

MIB = 1024 * 1024
UNITS = {"B": 1, "KiB": 1024, "MiB": MIB, "GiB": 1024 * MIB}

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server_url(demo_server):
    return demo_server


def _get_json(server: str, path: str, **params):
    with urlopen(f"{server.rstrip('/')}{path}?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def _view_url(server: str, **state) -> str:
    return f"{server}?{urlencode(state, quote_via=quote)}"


def _fmt(page, n) -> str:
    return page.evaluate("b => import('/static/lib/format.js').then((m) => m.fmtBytes(b))", n)


def _open_module(open_page, server_url, demo_expected, program):
    info = demo_expected["programs"][program]
    run, module = f"{program}/{info['session']}", info["profile_module_name"]
    page = open_page(server_url)
    page.goto(_view_url(server_url, run=run, tool="memory_viewer", module_name=module))
    page.wait_for_selector("#mv-overview .mv-peak-value")
    for chart in ("#mv-heap-chart", "#mv-bars-order", "#mv-bars-size", "#mv-timeline"):
        page.wait_for_selector(f"{chart} .main-svg")
    full = _get_json(server_url, "/data/plugin/profile/data", run=run, tag="memory_viewer", module_name=module, memory_space=0)
    return page, full


def _hover_text(page) -> str:
    return page.evaluate("Array.from(document.querySelectorAll('#mv-heap-chart .hoverlayer .hovertext')).map(n => n.textContent).join('|')")


def _fx_hover(page, curve: int, i: int) -> str:
    """Hover point i of one line as the mouse would (Plotly's hover event), and its text.
    Plotly drops hovers closer together than its throttle: hover again until it shows."""
    for _ in range(20):
        page.evaluate("([c, i]) => Plotly.Fx.hover('mv-heap-chart', [{ curveNumber: c, pointNumber: i }])", [curve, i])
        page.wait_for_timeout(60)
        shown = page.evaluate("document.getElementById('mv-heap-chart')._hoverdata?.[0]")
        if shown and shown["curveNumber"] == curve and shown["pointNumber"] == i:
            return _hover_text(page)
    raise AssertionError(f"Plotly did not hover point {i} of line {curve}")


def _expected_events(full):
    """Heap point -> (kind, buffer name, bytes, heap before, heap after), from the full payload."""
    x = full["profscope"]
    known = {int(k): (v[0], v[1]) for k, v in x["heapBuffersWithoutSpan"].items()}
    for b in full["bufferBlocks"]:
        if b.get("logicalBufferId", 0) >= 0:
            known[b.get("logicalBufferId", 0)] = (b["name"], b["size"])
    heap = full["heapSizes"]
    words = {"A": "alloc", "F": "free", "S": "share"}
    out = {}
    for i, (k, buf) in enumerate(zip(x["heapEventKinds"], x["heapEventBuffers"])):
        if k in words and buf in known:
            out[i] = (words[k], known[buf][0], int(known[buf][1]), round(heap[i] * MIB), round(heap[i + 1] * MIB))
    return out


@pytest.mark.parametrize("program", ["mlp", "transformer"])
def test_heap_hover_names_the_buffer_on_either_line(open_page, server_url, demo_expected, program):
    ARTIFACTS.mkdir(exist_ok=True)
    page, full = _open_module(open_page, server_url, demo_expected, program)
    events = _expected_events(full)
    assert len(events) == full["profscope"]["heapEvents"]  # every event names its buffer
    # On CPU there is no padding: the two lines coincide, the case where the unpadded
    # one used to win the hover with only "event N / size".
    assert full["heapSizes"] == full["unpaddedHeapSizes"]
    traces = page.evaluate("document.getElementById('mv-heap-chart').data.map(t => t.name)")
    assert traces[:2] == ["heap (padded)", "heap (unpadded)"]
    # The first event of each kind, the one that makes the peak, the one after.
    peak = full.get("peakHeapSizePosition", 0)
    picks = sorted({next(i for i, e in events.items() if e[0] == kind) for kind in {e[0] for e in events.values()}} | {peak, peak + 1} & set(events))
    for i in picks:
        kind, name, size, before, after = events[i]
        for curve in (0, 1):
            text = _fx_hover(page, curve, i)
            assert f"event {i}: {kind} {name} ({_fmt(page, size)})" in text, (curve, text)
            assert f"heap {_fmt(page, before)} → {_fmt(page, after)}" in text, (curve, text)
            assert "unpadded heap before the event" in text
    # A real mouse on the line, where both lines lie on top of each other: whichever
    # line and point Plotly picks, its text names that point's buffer.
    page.evaluate("Plotly.Fx.unhover('mv-heap-chart')")
    i = next(i for i in picks if i not in (peak, peak + 1))  # away from the peak's marker
    page.locator("#mv-heap-chart").scroll_into_view_if_needed()
    x, y = page.evaluate("""(i) => {
        const div = document.getElementById('mv-heap-chart'), fl = div._fullLayout;
        const box = div.querySelector('.nsewdrag').getBoundingClientRect();
        return [box.left + fl.xaxis.l2p(div.data[0].x[i]), box.top + fl.yaxis.l2p(div.data[0].y[i])];
    }""", i)
    page.mouse.move(x, y, steps=2)
    page.wait_for_function("document.querySelector('#mv-heap-chart .hoverlayer .hovertext') !== null")
    hovered = page.evaluate("document.getElementById('mv-heap-chart')._hoverdata[0]")
    j = hovered["pointNumber"]
    assert hovered["curveNumber"] in (0, 1) and abs(j - i) <= 2
    assert f"event {j}: {events[j][0]} {events[j][1]} ({_fmt(page, events[j][2])})" in _hover_text(page)
    page.locator("#mv-heap-chart").screenshot(path=str(ARTIFACTS / f"memory_viewer_heap_hover_{program}.png"))


def _ticks(page, chart: str, axis: str = "yaxis"):
    return page.evaluate(f"""() => {{
        const a = document.getElementById('{chart}')._fullLayout.{axis};
        return {{ vals: a._vals.map(v => v.x), text: a._vals.map(v => v.text), range: a.range }};
    }}""")


def _assert_binary(ticks, scale):
    """Each drawn tick label is its value in binary units (the data are bytes / scale)."""
    assert len(ticks["text"]) >= 2, ticks
    for v, text in zip(ticks["vals"], ticks["text"]):
        if text == "0":
            assert v == 0
            continue
        m = re.fullmatch(r"([\d.,]+) (B|KiB|MiB|GiB)", text)
        assert m, f"tick {text!r} is not in binary units"
        assert float(m[1].replace(",", "")) * UNITS[m[2]] == pytest.approx(v * scale, rel=1e-3, abs=1), (text, v)


def test_every_byte_axis_is_binary(open_page, server_url, demo_expected):
    page, full = _open_module(open_page, server_url, demo_expected, "transformer")
    for chart in ("mv-heap-chart", "mv-bars-order", "mv-bars-size", "mv-timeline"):
        _assert_binary(_ticks(page, chart), MIB)
    # The heap axis reaches the peak.
    heap = _ticks(page, "mv-heap-chart")
    assert max(heap["vals"]) * MIB >= full["peakHeapMib"] * MIB * 0.8
    # Zoomed in away from 0: ticks in binary units inside the range shown.
    lo, hi = full["peakHeapMib"] * 0.6, full["peakHeapMib"] * 1.02
    page.evaluate("([lo, hi]) => Plotly.relayout('mv-heap-chart', { 'yaxis.range': [lo, hi] })", [lo, hi])
    page.wait_for_function(f"document.getElementById('mv-heap-chart')._fullLayout.yaxis._vals.every(v => v.x >= {lo} - 1e-9)")
    zoomed = _ticks(page, "mv-heap-chart")
    _assert_binary(zoomed, MIB)
    assert all(lo - 1e-9 <= v <= hi + 1e-9 for v in zoomed["vals"])
    # The overview's file sizes (bytes on x).
    info = demo_expected["programs"]["transformer"]
    page.goto(_view_url(server_url, run=f"transformer/{info['session']}", tool="overview"))
    page.wait_for_selector("#sizes .main-svg")
    _assert_binary(_ticks(page, "sizes", "xaxis"), 1)


def test_peaks_counts_and_colours_say_what_they_are(open_page, server_url, demo_expected):
    page, full = _open_module(open_page, server_url, demo_expected, "mlp")
    assert page.inner_text("#mv-overview .mv-peak").startswith("Compiler heap peak ")
    legend = page.evaluate("document.getElementById('mv-heap-chart').data.map(t => t.name)")
    assert "compiler heap peak" in legend and "peak" not in legend
    assert page.evaluate("document.getElementById('mv-heap-chart').data[2].text[0]") == \
        f"compiler heap peak {_fmt(page, round(full['peakHeapMib'] * MIB))}"

    # The counts: buffers of 16 KiB or more (one bar each) and the small ones merged.
    max_heap = full["maxHeap"]
    large = sum(1 for o in max_heap if o.get("logicalBufferId", 0) >= 0)
    small = full["profscope"]["smallBuffersAtPeak"]
    heading = page.locator("#mv-peak-count")
    assert heading.get_attribute("data-large") == str(large) and heading.get_attribute("data-small") == str(small)
    assert f"({large} of 16 KiB or more + {small} small)" in heading.inner_text()
    assert page.locator("#mv-bars-order .point path").count() == large + (1 if small else 0)
    note = page.inner_text("#mv-peak-count-note")
    assert f"{large} buffers of 16 KiB or more, one bar each; {small} smaller ones" in note
    # The padding box counts the same buffers (no padding on CPU).
    assert all(o.get("logicalBufferSizeMib", 0) == o.get("unpaddedShapeMib", 0) for o in max_heap if o.get("logicalBufferId", 0) >= 0)
    no_padding = page.locator("#mv-no-padding")
    assert no_padding.get_attribute("data-large") == str(large)
    assert f"none of the {large} buffers of 16 KiB or more" in no_padding.inner_text()

    # The legend: one entry per allocation type drawn, in the bars' own colours.
    groups = ["small" if o.get("logicalBufferId", 0) < 0 else o.get("groupName", "Temporary") for o in max_heap]
    items = page.eval_on_selector_all("#mv-bars-legend .mv-legend-item",
                                      "xs => xs.map(x => [x.dataset.group, x.querySelector('.mv-swatch').style.backgroundColor])")
    assert sorted(g for g, _ in items) == sorted(set(groups))
    bar_colors = page.evaluate("""() => {
        const probe = document.createElement('i'); document.body.append(probe);
        const rgb = (c) => { probe.style.backgroundColor = c; return probe.style.backgroundColor; };
        const out = document.getElementById('mv-bars-order').data[0].marker.color.map(rgb);
        probe.remove(); return out;
    }""")
    swatch = dict(items)
    for group, color in zip(groups, bar_colors):
        assert swatch[group] == color, group
    page.locator("#mv-peak-count").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "memory_viewer_counts_legend.png"))
