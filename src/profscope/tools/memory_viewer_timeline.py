"""The memory viewer's allocation timeline as one self-contained HTML page.

XProf's memory viewer links to ``data?tag=memory_viewer&view_memory_allocation_timeline=true``
and opens the answer as a page (profile_plugin.py sets the flag; raw_to_tool_data.py
then answers ``text/html``: XLA's buffer-assignment allocation timeline). Ours is drawn
from the memory viewer payload's ``bufferBlocks`` (tools/memory_viewer.py): one
rectangle per buffer, x = program order (``startStep`` .. ``endStep``, heap-simulator
event index), y = offset in the heap (``offset`` .. ``offset + size``, bytes), in the
buffer's own colour, a hover title naming it. Inline SVG only: no script, no style sheet
or font from elsewhere, so it opens offline.
"""

from __future__ import annotations

from html import escape

MIB = 1024 * 1024
WIDTH, HEIGHT = 1200.0, 640.0  # plot area, SVG user units
MARGIN_L, MARGIN_B, MARGIN_T = 80.0, 40.0, 10.0
MAX_BLOCKS = 20_000  # the largest kept (as memory_viewer.page_view keeps them)


def _fmt_mib(b: float) -> str:
    return f"{b / MIB:,.2f} MiB"


def render(result: dict, module_name: str, memory_space: int) -> str:
    """The page for one module and memory space (``result`` is memory_viewer.convert's)."""
    blocks = [b for b in result.get("bufferBlocks") or [] if b.get("logicalBufferId", 0) != -1]
    if len(blocks) > MAX_BLOCKS:
        blocks = sorted(blocks, key=lambda b: -b.get("size", 0.0))[:MAX_BLOCKS]
    x_max = max([b.get("endStep", 0) for b in blocks] + [1])
    y_max = max([b.get("offset", 0.0) + b.get("size", 0.0) for b in blocks] + [1.0])
    sx, sy = WIDTH / x_max, HEIGHT / y_max
    rects = []
    for b in blocks:
        x0, x1 = b.get("startStep", 0), b.get("endStep", 0)
        y0, size = b.get("offset", 0.0), b.get("size", 0.0)
        name = b.get("name") or f"buffer {b.get('logicalBufferId', 0)}"
        tip = (f"{name}\n{_fmt_mib(size)} at offset {_fmt_mib(y0)}\nprogram order {x0}..{x1}"
               + (f"\n{b['shapeString']}" if b.get("shapeString") else "")
               + (f"\nop: {b['tfOpName']}" if b.get("tfOpName") else "")
               + (f"\n{b['category']}" if b.get("category") else ""))
        rects.append(
            f'<rect class="buffer" x="{MARGIN_L + x0 * sx:.2f}" y="{MARGIN_T + HEIGHT - (y0 + size) * sy:.2f}" '
            f'width="{max((x1 - x0) * sx, 0.5):.2f}" height="{max(size * sy, 0.5):.2f}" '
            f'fill="{escape(b.get("color") or "#4e79a7")}" stroke="#00000033" stroke-width="0.3">'
            f"<title>{escape(tip)}</title></rect>")
    ticks = []
    for k in range(5):
        y = y_max * k / 4
        ty = MARGIN_T + HEIGHT - y * sy
        ticks.append(f'<text x="{MARGIN_L - 6}" y="{ty:.1f}" text-anchor="end" font-size="11">{_fmt_mib(y)}</text>'
                     f'<line x1="{MARGIN_L}" x2="{MARGIN_L + WIDTH}" y1="{ty:.1f}" y2="{ty:.1f}" stroke="#ddd"/>')
        x = round(x_max * k / 4)
        tx = MARGIN_L + x * sx
        ticks.append(f'<text x="{tx:.1f}" y="{MARGIN_T + HEIGHT + 16}" text-anchor="middle" font-size="11">{x}</text>')
    title = f"Memory allocation timeline: {module_name} (memory space {memory_space})"
    peak = result.get("peakHeapMib")
    summary = (f"{len(blocks):,} buffers"
               + (f" · peak heap {peak:,.2f} MiB" if isinstance(peak, (int, float)) else "")
               + (f" · {result['profscope']['bufferBlocksOmitted']:,} blocks left out"
                  if (result.get("profscope") or {}).get("bufferBlocksOmitted") else ""))
    w, h = MARGIN_L + WIDTH + 10, MARGIN_T + HEIGHT + MARGIN_B
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title></head>"
        "<body style=\"font-family: sans-serif; margin: 16px\">"
        f"<h1 style=\"font-size: 18px\">{escape(title)}</h1>"
        f"<p>{escape(summary)}. x: program order (heap-simulator event index); y: offset in the heap. "
        "Only allocations with a heap-simulator trace are drawn (XProf's buffer blocks); the peak "
        "also counts long-lived ones (parameters, outputs, constants). Hover a buffer for its name and size.</p>"
        f"<svg id=\"allocation-timeline\" width=\"{w:.0f}\" height=\"{h:.0f}\" viewBox=\"0 0 {w:.0f} {h:.0f}\">"
        + "".join(ticks) + "".join(rects)
        + f'<text x="{MARGIN_L + WIDTH / 2}" y="{h - 6}" text-anchor="middle" font-size="12">program order</text>'
        "</svg></body></html>\n"
    )
