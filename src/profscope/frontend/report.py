"""``profscope report``: the OOM-risk answer of one or more runs as a single offline HTML
file (inline CSS, charts as inline SVG drawn here: no script, no network), Markdown or
JSON. The payloads are the data API's (``tag=oom_risk``, tools/oom_risk.py)."""

from __future__ import annotations

import html
import json
import math
import re
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, Undefined, select_autoescape
from markupsafe import Markup

from profscope import __version__
from profscope.app import oom
from profscope.app.oom import RISK_TIERS
from profscope.app.queries import OomRiskQuery
from profscope.app.workspace import Workspace
from profscope.errors import BadRequest, NotFound, ProfscopeError
from profscope.model.catalog import Run, RunKind

TEMPLATES = Path(__file__).parent / "templates"
RISK_ORDER = {"UNKNOWN": -1, "LOW": 0, "MEDIUM": 1, "HIGH": 2, "OOM": 3}
RISK_COLORS = {"LOW": "#2e7d32", "MEDIUM": "#b26a00", "HIGH": "#c62828", "OOM": "#7b1fa2", "UNKNOWN": "#546e7a"}
CATEGORY_COLORS = {
    "parameters": "#4e79a7", "optimizer_state": "#b07aa1", "gradients": "#e15759", "activations": "#f28e2b",
    "inputs": "#76b7b2", "outputs": "#59a14f", "temporaries": "#edc948", "constants": "#9c755f",
    "small": "#c9c3bf", "allocator_reserve": "#d5d9e0", "unknown": "#8c8c8c",
}


# ---------------------------------------------------------------------------
# Collecting
# ---------------------------------------------------------------------------


def assessable(ws: Workspace, run: Run) -> bool:
    tool = ws.tool_named("oom_risk")
    return tool in ws.tools(run) and ws.can_serve(tool, run)


def pick_runs(ws: Workspace, run_name: str | None, file: str | None = None, refused: list[dict] | None = None) -> list[Run]:
    """The runs to report: ``run_name``, the run holding ``file`` (a path relative to the
    log directory), or every run the OOM-risk tool can assess. With ``refused`` (a list),
    a run whose files cannot even be listed (a corrupt profile) goes there instead of
    stopping the others."""
    if run_name:
        run = ws.run(run_name)
        if not assessable(ws, run):
            raise BadRequest(f"run {run.name!r} is a {run.kind.value}: the OOM risk has nothing to read there")
        return [run]
    runs = ws.runs()
    if file is not None:
        runs = [r for r in runs if any(f.path == file for f in r.files)]
        if not runs:
            raise NotFound(f"{file}: not part of any run profscope recognises")
    kept = []
    for r in runs:
        try:
            if assessable(ws, r):
                kept.append(r)
        except ProfscopeError as e:
            if refused is None:
                raise
            refused.append(_refusal(r, None, e))
    runs = kept
    if not runs and refused:
        raise ProfscopeError(f"nothing could be read: {len(refused)} run(s) refused: "
                             + "; ".join(f"{x['file']}: {x['problem']}" for x in refused))
    if not runs:
        raise NotFound(f"no run in {ws.logdir.url} that the OOM risk can assess (profiles, XLA dumps, PyTorch snapshots and traces)")
    return runs


def collect(ws: Workspace, runs: list[Run], query: OomRiskQuery, refused: list[dict] | None = None) -> list[dict]:
    """One payload per run (and per device of a snapshot), with ``run``/``host`` added. A
    multi-host profile is one payload: the workspace rates it by its worst host and lists
    every host under ``hosts``. With ``refused`` (a list), a run whose file is refused
    (an unsafe pickle, a corrupt profile, nothing to assess) is appended there as
    ``{run, host, file, problem}`` and the others are still reported; without it, the
    first such error is raised."""
    out = []
    tool = ws.tool_named("oom_risk")
    for run in runs:
        try:
            hosts = [query.host] if query.host else (ws.hosts(run) if run.kind is RunKind.TORCH_SNAPSHOT else [None])
        except ProfscopeError as e:
            if refused is None:
                raise
            refused.append(_refusal(run, None, e))
            continue
        for host in hosts:
            try:
                payload = json.loads(_gunzip(ws.tool_data(run, tool, query.but(host=host))))
            except ProfscopeError as e:
                if refused is None:
                    raise
                refused.append(_refusal(run, host, e))
                continue
            out.append({"run": run.name, "kind": run.kind.value, "host": host, **payload})
    return out


def _refusal(run: Run, host: str | None, e: ProfscopeError) -> dict:
    xplane = run.xplane(host) if host and run.kind is RunKind.PROFILE else None
    file = e.file or (xplane.path if xplane else run.files[0].path if len(run.files) == 1 else run.name)
    problem = e.message
    # Messages often start with the file's own path: say it once, in ``file``.
    head, sep, rest = problem.partition(": ")
    if sep and (head.endswith(file) or file.endswith(head.rsplit("/", 1)[-1]) or head == f"run {run.name!r}"):
        problem = rest
    return {"run": run.name, "host": host, "file": file, "problem": problem}


def _gunzip(b: bytes) -> bytes:
    import gzip

    return gzip.decompress(b)


def worst(reports: list[dict]) -> str:
    return max((r["risk"] for r in reports), key=lambda k: RISK_ORDER[k], default="UNKNOWN")


def ordered(reports: list[dict]) -> list[dict]:
    """Worst first: by tier, then by how full the device is, then by peak."""
    return sorted(reports, key=lambda r: (-RISK_ORDER[r["risk"]], -(r.get("utilization") or 0), -(r.get("peakBytes") or 0),
                                          r["run"], r.get("host") or ""))


def anchor(r: dict, i: int) -> str:
    """A section's id: its place in the (ordered) report, then a readable slug."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", r["run"] + ("-" + r["host"] if r.get("host") else "")).strip("-")
    return f"run-{i + 1}-{slug}"


# ---------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------


def fmt_bytes(n) -> str:
    """Binary units, the pages' rule (tools/oom_risk.py fmt_bytes = lib/format.js fmtBytes):
    the report prints the number the page shows."""
    if n is None or isinstance(n, Undefined):  # a field a payload may leave out
        return "—"
    return oom.fmt_bytes(n)


def fmt_pct(x) -> str:
    return "—" if x is None or isinstance(x, Undefined) else f"{100 * x:.1f} %"


# A link's keys, in the dashboard's URL order (lib/state.js): the run first.
LINK_KEYS = ("run", "tool", "host", "module_name", "buffer", "memory_id", "t", "q")
TOOL_WORDS = {"memory_profile": "memory profile", "memory_viewer": "memory viewer", "oom_risk": "OOM risk", "trace_viewer": "trace viewer"}


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


def evidence_text(e: dict, end: str = ".", capital: bool = True) -> str:
    """A finding's evidence as a sentence with its numbers (tools/oom_risk.py)."""
    return oom.evidence_sentence(e, end=end, capital=capital)


def examples_text(e: dict) -> list[str]:
    return oom.evidence_examples(e)


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
        zones = [(0, th["medium"], "#e8f5e9"), (th["medium"], th["high"], "#fff3e0"), (th["high"], 1.0, "#ffebee")]
        for a, b, color in zones:
            parts.append(f'<rect x="{x(a * cap):.1f}" y="{top}" width="{x(b * cap) - x(a * cap):.1f}" height="{bar_h}" fill="{color}"/>')
        if scale_max > cap:
            parts.append(f'<rect x="{x(cap):.1f}" y="{top}" width="{x(scale_max) - x(cap):.1f}" height="{bar_h}" fill="#f3e5f5"/>')
    color = RISK_COLORS[r["risk"]]
    parts.append(f'<rect class="peak" x="{left}" y="{top + 6}" width="{max(1.0, x(peak) - left):.1f}" height="{bar_h - 12}" fill="{color}"/>')
    if cap:
        # Threshold labels only where they fit apart (a capacity far below the peak
        # squeezes them into a few pixels); the capacity's label stays inside the chart.
        if x(th["high"] * cap) - x(th["medium"] * cap) >= 34:
            for frac, label in ((th["medium"], f"{100 * th['medium']:.0f} %"), (th["high"], f"{100 * th['high']:.0f} %")):
                parts.append(f'<line x1="{x(frac * cap):.1f}" x2="{x(frac * cap):.1f}" y1="{top}" y2="{top + bar_h}" stroke="#9aa1ad" stroke-dasharray="3,2"/>')
                parts.append(f'<text x="{x(frac * cap):.1f}" y="{top - 6}" text-anchor="middle" font-size="11" fill="#5f6673">{label}</text>')
        parts.append(f'<line x1="{x(cap):.1f}" x2="{x(cap):.1f}" y1="{top - 4}" y2="{top + bar_h + 4}" stroke="#1d2330" stroke-width="2"/>')
        cap_anchor = "end" if x(cap) > width * 0.3 else "start"
        parts.append(f'<text x="{min(max(x(cap), left), width - 4):.1f}" y="{top + bar_h + 18}" text-anchor="{cap_anchor}" font-size="12" fill="#1d2330">capacity {html.escape(fmt_bytes(cap))}</text>')
    anchor = "start" if x(peak) < width * 0.6 else "end"
    parts.append(f'<text x="{x(peak):.1f}" y="{top + bar_h + 32 if cap else top + bar_h + 18}" text-anchor="{anchor}" font-size="12" fill="{color}" font-weight="600">{html.escape(r.get("peakMeasure") or "peak")} {html.escape(fmt_bytes(peak))}'
                 f'{"" if not cap else " · " + fmt_pct(r["utilization"])}</text>')
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
        color = CATEGORY_COLORS.get(c["category"], "#8c8c8c")
        title = html.escape(f"{c['label']}: {fmt_bytes(c['bytes'])} ({fmt_pct(c['share'])}), {c['count']} buffer(s)")
        parts.append(f'<g><title>{title}</title><rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{color}" stroke="#fff" stroke-width="2"/>')
        if w > 70 and h > 34:
            label = html.escape(c["label"] if len(c["label"]) * 6.5 < w - 8 else c["category"].replace("_", " "))
            parts.append(f'<text x="{x + 6:.1f}" y="{y + 17:.1f}" font-size="12" font-weight="600" fill="#1d2330">{label}</text>')
            parts.append(f'<text x="{x + 6:.1f}" y="{y + 32:.1f}" font-size="11" fill="#1d2330">{html.escape(fmt_bytes(c["bytes"]))} · {fmt_pct(c["share"])}</text>')
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
        color = "#4e79a7" if m["moduleName"] == r.get("module") else "#9fb7d6"
        name = m["moduleName"] if len(m["moduleName"]) < 34 else m["moduleName"][:31] + "…"
        parts.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end" font-size="11" fill="#1d2330">{html.escape(name)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{bw:.1f}" height="{row_h - 6}" fill="{color}"><title>{html.escape(m["moduleName"])}: {m["peakBytes"]:,} bytes</title></rect>')
        parts.append(f'<text x="{label_w + bw + 4:.1f}" y="{y + 14}" font-size="11" fill="#5f6673">{html.escape(fmt_bytes(m["peakBytes"]))}</text>')
    if cap and cap <= scale_max:
        cx = label_w + w * cap / scale_max
        parts.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="0" y2="{height - 16}" stroke="#c62828" stroke-dasharray="4,3"/>')
        parts.append(f'<text x="{cx:.1f}" y="{height - 4}" text-anchor="middle" font-size="11" fill="#c62828">capacity</text>')
    parts.append("</svg>")
    return "".join(parts)


# ---------------------------------------------------------------------------
# Output formats
# ---------------------------------------------------------------------------


def render_html(reports: list[dict], source: str, refused: list[dict] | None = None, server: str | None = None) -> str:
    """The report as one offline HTML file. ``server``: the URL of a running ``profscope
    serve`` of the same log directory; every evidence link then opens there (without one,
    the links inside the file are its own anchors and evidence is named in words)."""
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))
    env.filters["bytes"] = fmt_bytes
    env.filters["pct"] = fmt_pct
    env.filters["where"] = link_text
    env.filters["evidence"] = evidence_text
    env.filters["examples"] = examples_text
    reports = ordered(reports)
    charts = [{"gauge": Markup(svg_gauge(r)), "treemap": Markup(svg_treemap(r)), "modules": Markup(svg_modules(r))} for r in reports]
    return env.get_template("oom_report.html").render(
        reports=reports, charts=charts, anchors=[anchor(r, i) for i, r in enumerate(reports)], refused=refused or [],
        source=source, version=__version__, worst=worst(reports), server=server,
        href=lambda link, run: link_href(link, run, server), run_href=lambda r: run_href(r, server),
        colors=RISK_COLORS, category_colors=CATEGORY_COLORS,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )


def _cap_text(r: dict) -> str:
    return "unknown" if r.get("capacityBytes") is None else f"{fmt_bytes(r['capacityBytes'])} ({r.get('capacitySource') or '—'})"


def _md_link(link: dict, run: str, server: str | None) -> str:
    href = link_href(link, run, server)
    return f"[{link_text(link)}]({href})" if href else link_text(link)


def render_markdown(reports: list[dict], source: str, refused: list[dict] | None = None, server: str | None = None) -> str:
    reports = ordered(reports)
    lines = [f"# OOM risk: {worst(reports)}", "", f"Source: `{source}` · profscope {__version__} · "
             f"{len(reports)} assessed, {len(refused or [])} refused", ""]
    lines += ["| run | risk | peak (what it counts) | capacity (source) | headroom | utilization |", "|---|---|---:|---|---:|---:|"]
    for r in reports:
        where = r["run"] + (f" ({r['host']})" if r.get("host") else "")
        lines.append(f"| {where} | {r['risk']} | {fmt_bytes(r['peakBytes'])} ({r.get('peakMeasure') or 'peak'}) | {_cap_text(r)} | "
                     f"{fmt_bytes(r['headroomBytes'])} | {fmt_pct(r['utilization'])} |")
    lines.append("")
    if refused:
        lines += ["## Refused", "", "| file | problem |", "|---|---|"]
        lines += [f"| `{x['file']}` | {x['problem']} |" for x in refused]
        lines.append("")
    for r in reports:
        where = r["run"] + (f" ({r['host']})" if r.get("host") else "")
        cap = "unknown" if r["capacityBytes"] is None else f"{r['capacityBytes']:,} bytes ({fmt_bytes(r['capacityBytes'])})"
        lines += [f"## {where}: {r['risk']}", "", f"{r['reason']}.", ""]
        lines += ["| | |", "|---|---|",
                  f"| {r.get('peakMeasure') or 'peak'} | {r['peakBytes']:,} bytes ({fmt_bytes(r['peakBytes'])}), {r['peakSource']} |",
                  f"| capacity | {cap} from {r['capacitySource'] or '—'} |",
                  f"| utilization | {fmt_pct(r['utilization'])} |",
                  f"| headroom | {fmt_bytes(r['headroomBytes'])} |",
                  f"| thresholds | MEDIUM >= {100 * r['thresholds']['medium']:.0f} %, HIGH >= {100 * r['thresholds']['high']:.0f} %, OOM > 100 % or an OOM event |",
                  ""]
        if r.get("hosts"):
            lines += [f"### Hosts (rated by the worst: {r['host']})", "", "| host | verdict | peak | capacity (source) | headroom | utilization | findings |",
                      "|---|---|---:|---|---:|---:|---|"]
            lines += [f"| {h['host']} | {h['risk']} | {fmt_bytes(h.get('peakBytes'))} | {_cap_text(h)} | {fmt_bytes(h.get('headroomBytes'))} | "
                      f"{fmt_pct(h.get('utilization'))} | {('not assessed: ' + h['problem']) if h.get('problem') else ', '.join(h['findings']) or '—'} |"
                      for h in r["hosts"]]
            lines.append("")
        if r["findings"]:
            lines += ["### Findings", ""]
            for f in r["findings"]:
                on = f" on {f['host']}" if f.get("host") and r.get("hosts") else ""
                lines.append(f"- **{f['title']}** ({f['severity']}{on}): {f['message']} Evidence: {evidence_text(f['evidence'])}".rstrip())
                lines += [f"  - {x}" for x in examples_text(f["evidence"])]
                if f.get("links"):
                    lines.append("  - open: " + ", ".join(_md_link(x, r["run"], server) for x in f["links"]))
            lines.append("")
        if r["contributors"]:
            lines += ["### Contributors at the peak", "", "| category | bytes | share | buffers | largest |", "|---|---:|---:|---:|---|"]
            for c in r["contributors"]:
                top = c["items"][0]["name"] if c["items"] else ""
                lines.append(f"| {c['label']} | {c['bytes']:,} | {fmt_pct(c['share'])} | {c['count']} | `{top}` |")
            lines.append("")
        if len(r.get("usage") or []) > 1:
            lines += ["### Peaks", "", "| what it counts | bytes | from |", "|---|---:|---|"]
            lines += [f"| {u['label']} | {fmt_bytes(u['bytes'])} | {u['detail']} |" for u in r["usage"]]
            lines.append("")
        if r["modules"]:
            lines += ["### Modules", "", "| module | peak bytes | utilization |", "|---|---:|---:|"]
            lines += [f"| {m['moduleName']} | {m.get('peakBytes', 0):,} | {fmt_pct(m.get('utilization'))} |" for m in r["modules"]]
            lines.append("")
    return "\n".join(lines)


def render_json(reports: list[dict], refused: list[dict] | None = None) -> str:
    return json.dumps({"risk": worst(reports), "reports": ordered(reports), "refused": refused or []}, indent=1)


def fail_level(name: str) -> int:
    key = name.upper()
    if key not in RISK_TIERS:
        raise BadRequest(f"--fail-on must be one of {', '.join(RISK_TIERS)}, not {name!r}")
    return RISK_ORDER[key]
