"""The memory viewer's allocation timeline, as the values its page draws.

XProf's memory viewer links to ``data?tag=memory_viewer&view_memory_allocation_timeline=true``
and opens the answer as a page (profile_plugin.py sets the flag; raw_to_tool_data.py
then answers ``text/html``: XLA's buffer-assignment allocation timeline). Ours is drawn
from the memory viewer payload's ``bufferBlocks`` (tools/memory_viewer.py): one
rectangle per buffer, x = program order (``startStep`` .. ``endStep``, heap-simulator
event index), y = offset in the heap (``offset`` .. ``offset + size``, bytes), in the
buffer's own colour, a hover title naming it. This module scales them into the plot's
SVG user units; frontend/templates/memory_viewer_timeline.html draws them (inline SVG
only, so the page opens offline).
"""

from __future__ import annotations

MIB = 1024 * 1024
WIDTH, HEIGHT = 1200.0, 640.0  # plot area, SVG user units
MARGIN_L, MARGIN_B, MARGIN_T = 80.0, 40.0, 10.0
MAX_BLOCKS = 20_000  # the largest kept (as memory_viewer.page_view keeps them)


def _fmt_mib(b: float) -> str:
    return f"{b / MIB:,.2f} MiB"


def timeline(result: dict, module_name: str, memory_space: int) -> dict:
    """The page's values for one module and memory space (``result`` is
    memory_viewer.convert's): ``title``, ``summary``, the SVG's ``width``/``height``, the
    ``plot`` area's edges, ``yTicks``/``xTicks`` (position and label) and ``blocks`` (a
    rectangle each, with the buffer's ``color``, if it has one, and hover ``title``)."""
    blocks = [b for b in result.get("bufferBlocks") or [] if b.get("logicalBufferId", 0) != -1]
    if len(blocks) > MAX_BLOCKS:
        blocks = sorted(blocks, key=lambda b: -b.get("size", 0.0))[:MAX_BLOCKS]
    x_max = max([b.get("endStep", 0) for b in blocks] + [1])
    y_max = max([b.get("offset", 0.0) + b.get("size", 0.0) for b in blocks] + [1.0])
    sx, sy = WIDTH / x_max, HEIGHT / y_max
    bottom = MARGIN_T + HEIGHT
    rects = []
    for b in blocks:
        x0, x1 = b.get("startStep", 0), b.get("endStep", 0)
        y0, size = b.get("offset", 0.0), b.get("size", 0.0)
        name = b.get("name") or f"buffer {b.get('logicalBufferId', 0)}"
        tip = (f"{name}\n{_fmt_mib(size)} at offset {_fmt_mib(y0)}\nprogram order {x0}..{x1}"
               + (f"\n{b['shapeString']}" if b.get("shapeString") else "")
               + (f"\nop: {b['tfOpName']}" if b.get("tfOpName") else "")
               + (f"\n{b['category']}" if b.get("category") else ""))
        # At least half a unit each way, so the smallest buffer is still a visible sliver.
        rects.append({"x": MARGIN_L + x0 * sx, "y": bottom - (y0 + size) * sy, "width": max((x1 - x0) * sx, 0.5),
                      "height": max(size * sy, 0.5), "color": b.get("color"), "title": tip})
    y_ticks = [{"y": bottom - y_max * k / 4 * sy, "label": _fmt_mib(y_max * k / 4)} for k in range(5)]
    x_ticks = [{"x": MARGIN_L + round(x_max * k / 4) * sx, "label": str(round(x_max * k / 4))} for k in range(5)]
    peak = result.get("peakHeapMib")
    summary = (f"{len(blocks):,} buffers"
               + (f" · peak heap {peak:,.2f} MiB" if isinstance(peak, (int, float)) else "")
               + (f" · {result['profscope']['bufferBlocksOmitted']:,} blocks left out"
                  if (result.get("profscope") or {}).get("bufferBlocksOmitted") else ""))
    return {
        "title": f"Memory allocation timeline: {module_name} (memory space {memory_space})",
        "summary": summary,
        "width": MARGIN_L + WIDTH + 10, "height": bottom + MARGIN_B,
        "plot": {"left": MARGIN_L, "right": MARGIN_L + WIDTH, "bottom": bottom},
        "yTicks": y_ticks, "xTicks": x_ticks, "blocks": rects,
    }
