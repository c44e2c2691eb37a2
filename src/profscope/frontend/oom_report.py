"""``profscope report``'s output, rendered from plain data: app/oom_reports.py
``document()`` (the worst risk, the assessments worst first, the refused files, the runs
not assessed; the
payloads are the data API's ``tag=oom_risk``, tools/oom_risk.py) as a single offline HTML
file (templates/oom_report.html: inline CSS, charts as inline SVG drawn here, no script,
no network), as Markdown, or as that JSON. The payload says every finding's evidence in
words (``evidenceText``, ``evidenceExamples``); the report prints those, as the page does."""

from __future__ import annotations

import html
import json
import math
import re
from datetime import UTC, datetime
from urllib.parse import quote, urlencode

from markupsafe import Markup

from profscope import __version__
from profscope.frontend import oom_report_plan, render
from profscope.frontend.render import PALETTE, bytes_text, pct_text

# The colours the dashboard draws with (static/lib/palette.json, as lib/colors.js reads it).
P, RISK_COLORS, RISK_ZONE, CATEGORY_COLORS = PALETTE["P"], PALETTE["RISK"], PALETTE["RISK_ZONE"], PALETTE["OOM_CATEGORY"]


def anchor(r: dict, i: int) -> str:
    """A section's id: its place in the (ordered) report, then a readable slug."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", r["run"] + ("-" + r["host"] if r.get("host") else "")).strip("-")
    return f"run-{i + 1}-{slug}"


# A link's keys, in the dashboard's URL order (lib/state.js): the run first.
LINK_KEYS = ("run", "tool", "host", "module_name", "buffer", "memory_id", "t", "q")
TOOL_WORDS = {"memory_profile": "memory profile", "memory_viewer": "memory viewer", "oom_risk": "OOM risk", "trace_viewer": "trace viewer",
              "trace_viewer@": "trace viewer", "steps_ops": "Steps & ops"}


def link_text(link: dict) -> str:
    """Where a link points, in words ("memory profile, device CPU, at 9.07 ms"): what the
    report prints when it has no server to link to, and the text of a link when it has."""
    tool = TOOL_WORDS.get(link.get("tool") or "", (link.get("tool") or "").replace("_", " "))
    parts = [tool]
    if link.get("module_name"):
        parts.append(f"module {link['module_name']}")
    if link.get("buffer") not in (None, ""):
        parts.append(f"buffer {link['buffer']}")
    if link.get("memory_id"):
        parts.append(f"on {link['memory_id']}")  # an allocator (profiles) or a device (PyTorch traces)
    if link.get("host"):
        parts.append(f"on {link['host']}")
    t = link.get("t")
    if t not in (None, ""):
        # A snapshot's t is an event index (torch_snapshot.js: host cuda:N); else ms.
        try:
            parts.append(f"event {t}" if str(link.get("host") or "").startswith("cuda") else f"at {float(t):.3f} ms")
        except ValueError:  # not a number: say it as it is
            parts.append(f"at {t}")
    if link.get("q"):
        parts.append(f"filtered by {link['q']}")
    return ", ".join(parts)


def link_href(link: dict, run: str, server: str | None) -> str | None:
    """The dashboard URL of a link on ``server`` (a running ``profscope serve`` of the same
    log directory), or None without one: the report has no other place to open it."""
    if not server:
        return None
    state = {"run": run, **{k: link[k] for k in LINK_KEYS[1:] if link.get(k) not in (None, "")}}
    return f"{server.rstrip('/')}/?{urlencode(state, quote_via=quote)}"


def run_href(r: dict, server: str | None) -> str | None:
    """The run's own OOM risk page on ``server``."""
    return link_href({"tool": "oom_risk", **({"host": r["host"]} if r.get("host") and r["kind"] == "torch_snapshot" else {})}, r["run"], server)


# ---------------------------------------------------------------------------
# SVG charts (no script: the report must render with JavaScript off, too)
# ---------------------------------------------------------------------------


def svg_gauge(r: dict, width: int = 720, height: int = 86) -> str:
    """A horizontal gauge: the capacity split into the tier zones, the peak as a bar."""
    peak, cap = r["peakBytes"] or 0, r["capacityBytes"]
    th = r["thresholds"]
    left, right, top, bar_h = 10, 10, 22, 26
    w = width - left - right
    # The scale ends at the capacity, or a little past the peak when that is beyond it.
    scale_max = (peak * 1.08 if not cap or peak > cap else cap) or 1
    x = lambda v: left + w * v / scale_max
    parts = [f'<svg class="gauge" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="peak vs capacity">']
    if cap:
        zones = [(0, th["medium"], RISK_ZONE["LOW"]), (th["medium"], th["high"], RISK_ZONE["MEDIUM"]), (th["high"], 1.0, RISK_ZONE["HIGH"])]
        for a, b, color in zones:
            parts.append(f'<rect x="{x(a * cap):.1f}" y="{top}" width="{x(b * cap) - x(a * cap):.1f}" height="{bar_h}" fill="{color}"/>')
        if scale_max > cap:
            parts.append(f'<rect x="{x(cap):.1f}" y="{top}" width="{x(scale_max) - x(cap):.1f}" height="{bar_h}" fill="{RISK_ZONE["OOM"]}"/>')
    color = RISK_COLORS[r["risk"]]
    parts.append(f'<rect class="peak" x="{left}" y="{top + 6}" width="{max(1.0, x(peak) - left):.1f}" height="{bar_h - 12}" fill="{color}"/>')
    if cap:
        # Threshold labels only where they fit apart (a capacity far below the peak
        # squeezes them into a few pixels); the capacity's label stays inside the chart.
        if x(th["high"] * cap) - x(th["medium"] * cap) >= 34:
            for frac, label in ((th["medium"], f"{100 * th['medium']:.0f} %"), (th["high"], f"{100 * th['high']:.0f} %")):
                parts.append(f'<line x1="{x(frac * cap):.1f}" x2="{x(frac * cap):.1f}" y1="{top}" y2="{top + bar_h}" stroke="{P["spike"]}" stroke-dasharray="3,2"/>')
                parts.append(f'<text x="{x(frac * cap):.1f}" y="{top - 6}" text-anchor="middle" font-size="11" fill="#5f6673">{label}</text>')
        parts.append(f'<line x1="{x(cap):.1f}" x2="{x(cap):.1f}" y1="{top - 4}" y2="{top + bar_h + 4}" stroke="{P["fg"]}" stroke-width="2"/>')
        cap_anchor = "end" if x(cap) > width * 0.3 else "start"
        parts.append(f'<text x="{min(max(x(cap), left), width - 4):.1f}" y="{top + bar_h + 18}" text-anchor="{cap_anchor}" font-size="12" fill="{P["fg"]}">capacity {html.escape(bytes_text(cap))}</text>')
    anchor = "start" if x(peak) < width * 0.6 else "end"
    parts.append(f'<text x="{x(peak):.1f}" y="{top + bar_h + 32 if cap else top + bar_h + 18}" text-anchor="{anchor}" font-size="12" fill="{color}" font-weight="600">{html.escape(r.get("peakMeasure") or "peak")} {html.escape(bytes_text(peak))}'
                 f'{"" if not cap else " · " + pct_text(r["utilization"])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _squarify(values: list[float], x: float, y: float, w: float, h: float) -> list[tuple[float, float, float, float]]:
    """Squarified treemap (Bruls, Huizing, van Wijk 2000) of positive values, largest first."""
    rects: list[tuple[float, float, float, float]] = []
    items = list(values)
    total = sum(items)
    if total <= 0:
        return [(x, y, 0, 0) for _ in items]
    scale = w * h / total
    areas = [v * scale for v in items]

    def worst_ratio(row, side):
        s = sum(row)
        return max(max(side * side * a / (s * s), (s * s) / (side * side * a)) for a in row) if s and side else math.inf

    i = 0
    while i < len(areas):
        side = min(w, h)
        row = [areas[i]]
        j = i + 1
        while j < len(areas) and worst_ratio(row + [areas[j]], side) <= worst_ratio(row, side):
            row.append(areas[j])
            j += 1
        s = sum(row)
        if w >= h:  # lay the row out as a column on the left
            cw = s / h if h else 0
            yy = y
            for a in row:
                rh = a / cw if cw else 0
                rects.append((x, yy, cw, rh))
                yy += rh
            x, w = x + cw, w - cw
        else:  # a row along the top
            rh = s / w if w else 0
            xx = x
            for a in row:
                rw = a / rh if rh else 0
                rects.append((xx, y, rw, rh))
                xx += rw
            y, h = y + rh, h - rh
        i = j
    return rects


def svg_treemap(r: dict, width: int = 720, height: int = 300) -> str:
    cats = [c for c in r["contributors"] if c["bytes"] > 0]
    if not cats:
        return ""
    rects = _squarify([c["bytes"] for c in cats], 0, 0, width, height)
    parts = [f'<svg class="treemap" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="contributors at the peak">']
    for c, (x, y, w, h) in zip(cats, rects):
        color = CATEGORY_COLORS.get(c["category"], P["neutral"])
        title = html.escape(f"{c['label']}: {bytes_text(c['bytes'])} ({pct_text(c['share'])}), {c['count']} buffer(s)")
        parts.append(f'<g><title>{title}</title><rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{color}" stroke="#fff" stroke-width="2"/>')
        if w > 70 and h > 34:
            label = html.escape(c["label"] if len(c["label"]) * 6.5 < w - 8 else c["category"].replace("_", " "))
            parts.append(f'<text x="{x + 6:.1f}" y="{y + 17:.1f}" font-size="12" font-weight="600" fill="{P["fg"]}">{label}</text>')
            parts.append(f'<text x="{x + 6:.1f}" y="{y + 32:.1f}" font-size="11" fill="{P["fg"]}">{html.escape(bytes_text(c["bytes"]))} · {pct_text(c["share"])}</text>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def svg_modules(r: dict, width: int = 720, limit: int = 15) -> str:
    mods = [m for m in r.get("modules") or [] if m.get("peakBytes")][:limit]
    if not mods:
        return ""
    cap = r["capacityBytes"]
    row_h, label_w, top = 20, 230, 6
    height = top + row_h * len(mods) + 24
    w = width - label_w - 90
    scale_max = max([m["peakBytes"] for m in mods] + ([cap] if cap and cap < 4 * mods[0]["peakBytes"] else [])) or 1
    parts = [f'<svg class="modules" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="module peaks">']
    for i, m in enumerate(mods):
        y = top + i * row_h
        bw = max(1.0, w * m["peakBytes"] / scale_max)
        color = P["blue"] if m["moduleName"] == r.get("module") else "#9fb7d6"
        name = m["moduleName"] if len(m["moduleName"]) < 34 else m["moduleName"][:31] + "…"
        parts.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end" font-size="11" fill="{P["fg"]}">{html.escape(name)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{bw:.1f}" height="{row_h - 6}" fill="{color}"><title>{html.escape(m["moduleName"])}: {m["peakBytes"]:,} bytes</title></rect>')
        parts.append(f'<text x="{label_w + bw + 4:.1f}" y="{y + 14}" font-size="11" fill="#5f6673">{html.escape(bytes_text(m["peakBytes"]))}</text>')
    if cap and cap <= scale_max:
        cx = label_w + w * cap / scale_max
        parts.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="0" y2="{height - 16}" stroke="{RISK_COLORS["HIGH"]}" stroke-dasharray="4,3"/>')
        parts.append(f'<text x="{cx:.1f}" y="{height - 4}" text-anchor="middle" font-size="11" fill="{RISK_COLORS["HIGH"]}">capacity</text>')
    parts.append("</svg>")
    return "".join(parts)


# ---------------------------------------------------------------------------
# Output formats
# ---------------------------------------------------------------------------


def charts(r: dict) -> dict:
    """One assessment's charts, as templates/oom_report_run.html shows them."""
    return {"gauge": Markup(svg_gauge(r)), "treemap": Markup(svg_treemap(r)), "modules": Markup(svg_modules(r))}


def render_html(doc: dict, source: str, server: str | None = None) -> str:
    """The report (app/oom_reports.py ``document()``) as one offline HTML file. ``server``:
    the URL of a running ``profscope serve`` of the same log directory; every evidence
    link then opens there (without one, the links inside the file are its own anchors and
    evidence is named in words)."""
    reports = doc["reports"]
    return render.page(
        "oom_report.html",
        reports=reports, charts=[charts(r) for r in reports], anchors=[anchor(r, i) for i, r in enumerate(reports)], refused=doc["refused"],
        not_assessed=doc.get("notAssessed") or [], source=source, version=__version__, worst=doc["risk"], server=server, where=link_text,
        href=lambda link, run: link_href(link, run, server), run_href=lambda r: run_href(r, server),
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )


def _cap_text(r: dict) -> str:
    return "unknown" if r.get("capacityBytes") is None else f"{bytes_text(r['capacityBytes'])} ({r.get('capacitySource') or '—'})"


def _md_link(link: dict, run: str, server: str | None) -> str:
    href = link_href(link, run, server)
    return f"[{link_text(link)}]({href})" if href else link_text(link)


def render_markdown(doc: dict, source: str, server: str | None = None) -> str:
    reports, refused, not_assessed = doc["reports"], doc["refused"], doc.get("notAssessed") or []
    lines = [f"# OOM risk: {doc['risk']}", "", f"Source: `{source}` · profscope {__version__} · "
             f"{len(reports)} assessed, {len(refused)} refused, {len(not_assessed)} not assessed", ""]
    lines += ["| run | risk | peak (what it counts) | capacity (source) | headroom | utilization | what would make it fit |",
              "|---|---|---:|---|---:|---:|---|"]
    for r in reports:
        where = r["run"] + (f" ({r['host']})" if r.get("host") else "")
        fix = (r.get("plan") or {}).get("headline") or "—"
        lines.append(f"| {where} | {r['risk']} | {bytes_text(r['peakBytes'])} ({r.get('peakMeasure') or 'peak'}) | {_cap_text(r)} | "
                     f"{bytes_text(r['headroomBytes'])} | {pct_text(r['utilization'])} | {fix} |")
    lines.append("")
    if refused:
        lines += ["## Refused", "", "| file | problem |", "|---|---|"]
        lines += [f"| `{x['file']}` | {x['problem']} |" for x in refused]
        lines.append("")
    if not_assessed:
        lines += ["## Not assessed", "", "Read, but nothing in them for the OOM risk to measure.", "", "| file | why |", "|---|---|"]
        lines += [f"| `{x['file']}` | {x['problem']} |" for x in not_assessed]
        lines.append("")
    for r in reports:
        where = r["run"] + (f" ({r['host']})" if r.get("host") else "")
        cap = "unknown" if r["capacityBytes"] is None else f"{r['capacityBytes']:,} bytes ({bytes_text(r['capacityBytes'])})"
        lines += [f"## {where}: {r['risk']}", "", f"{r['reason']}.", ""]
        lines += ["| | |", "|---|---|",
                  f"| {r.get('peakMeasure') or 'peak'} | {r['peakBytes']:,} bytes ({bytes_text(r['peakBytes'])}), {r['peakSource']} |",
                  f"| capacity | {cap} from {r['capacitySource'] or '—'} |",
                  f"| utilization | {pct_text(r['utilization'])} |",
                  f"| headroom | {bytes_text(r['headroomBytes'])} |",
                  f"| thresholds | MEDIUM >= {100 * r['thresholds']['medium']:.0f} %, HIGH >= {100 * r['thresholds']['high']:.0f} %, OOM > 100 % or an OOM event |",
                  ""]
        if r.get("hosts"):
            lines += [f"### Hosts (rated by the worst: {r['host']})", "", "| host | verdict | peak | capacity (source) | headroom | utilization | findings |",
                      "|---|---|---:|---|---:|---:|---|"]
            lines += [f"| {h['host']} | {h['risk']} | {bytes_text(h.get('peakBytes'))} | {_cap_text(h)} | {bytes_text(h.get('headroomBytes'))} | "
                      f"{pct_text(h.get('utilization'))} | {('not assessed: ' + h['problem']) if h.get('problem') else ', '.join(h['findings']) or '—'} |"
                      for h in r["hosts"]]
            lines.append("")
        if r["findings"]:
            lines += ["### Findings", ""]
            for f in r["findings"]:
                on = f" on {f['host']}" if f.get("host") and r.get("hosts") else ""
                lines.append(f"- **{f['title']}** ({f['severity']}{on}): {f['message']} Evidence: {f['evidenceText']}".rstrip())
                lines += [f"  - {x}" for x in f["evidenceExamples"]]
                if f.get("links"):
                    lines.append("  - open: " + ", ".join(_md_link(x, r["run"], server) for x in f["links"]))
            lines.append("")
        lines += oom_report_plan.markdown(r.get("plan"))  # what would make it fit (tools/oom_plan.py)
        if r["contributors"] or r.get("contributorsNote"):
            lines += ["### Contributors at the peak", ""]
        if r.get("contributorsNote"):
            lines += [r["contributorsNote"], ""]
        if r["contributors"]:
            lines += ["| category | bytes | share | buffers | largest |", "|---|---:|---:|---:|---|"]
            for c in r["contributors"]:
                top = c["items"][0]["name"] if c["items"] else ""
                lines.append(f"| {c['label']} | {c['bytes']:,} | {pct_text(c['share'])} | {c['count']} | `{top}` |")
            lines.append("")
        if len(r.get("usage") or []) > 1:
            lines += ["### Peaks", "", "| what it counts | bytes | from |", "|---|---:|---|"]
            lines += [f"| {u['label']} | {bytes_text(u['bytes'])} | {u['detail']} |" for u in r["usage"]]
            lines.append("")
        if r["modules"]:
            lines += ["### Modules", "", "| module | peak bytes | utilization |", "|---|---:|---:|"]
            lines += [f"| {m['moduleName']} | {m.get('peakBytes', 0):,} | {pct_text(m.get('utilization'))} |" for m in r["modules"]]
            lines.append("")
    return "\n".join(lines)


def render_json(doc: dict) -> str:
    return json.dumps(doc, indent=1)
