"""``profscope analyze``'s output, rendered from plain data: the Summary's JSON (the data
API's ``tag=summary``, tools/analysis.py ``summarize``, docs/analysis.md) as Markdown or
as one offline HTML file (templates/summary_report.html: inline CSS, no script, no
network). The HTML file's memory section is ``profscope report``'s own: the OOM report's
per-run section (templates/oom_report_run.html, with its charts from
frontend/oom_report.py), not a second document.

A finding's evidence links are the dashboard's URL query strings (``?run=R&tool=...``);
with ``server`` (a running ``profscope serve`` of the same log directory) they open
there, without one the file names the view in words and prints the query to paste.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import parse_qsl

from profscope import __version__
from profscope.frontend import oom_report, render
from profscope.frontend.render import PALETTE, bytes_text, pct_text

# NOT_ASSESSED (nothing of the run could be read) in the UNKNOWN tier's grey, never green.
STATUS_COLORS = {"OPTIMAL": PALETTE["RISK"]["LOW"], "NEEDS_ATTENTION": PALETTE["RISK"]["HIGH"], "NOT_ASSESSED": PALETTE["RISK"]["UNKNOWN"]}
# P0 in the HIGH tier's colour, P1 in MEDIUM's: the page's (pages/summary.js) colours.
PRIORITY_COLORS = {"P0": PALETTE["RISK"]["HIGH"], "P1": PALETTE["RISK"]["MEDIUM"], "P2": PALETTE["P"]["band"]}
PRIORITIES = ("P0", "P1", "P2")
SERIES = [PALETTE["P"][name] for name in ("blue", "orange", "red", "teal", "green", "yellow", "purple", "pink", "brown",
                                          "lightGreen", "darkTeal", "rose")]  # lib/colors.js SERIES


def link_words(query: str) -> str:
    """Where an evidence link points, in words ("steps & ops, step 12"): oom_report's
    words for the keys it knows, ``key value`` for the others (a page's own URL keys)."""
    keys = dict(parse_qsl(query.lstrip("?"), keep_blank_values=False))
    words = oom_report.link_text(keys)
    extra = [f"{k} {v}" for k, v in keys.items() if k not in oom_report.LINK_KEYS]
    return ", ".join([words, *extra]) if words else ", ".join(extra)


def link_href(query: str, server: str | None) -> str | None:
    """The dashboard URL of an evidence link on ``server``, or None without one."""
    return f"{server.rstrip('/')}/{query}" if server and query else None


def us_text(v) -> str:
    """Microseconds in the unit they read best in, as the page's ``us()`` writes them."""
    if v is None:
        return "—"
    return f"{v / 1e6:.3f} s" if v >= 1e6 else f"{v / 1e3:.3f} ms" if v >= 1e3 else f"{v:.3f} µs"


def host_text(summary: dict) -> str:
    """Whose summary it is: a host, or "all N hosts" for ALL_HOSTS (XProf's name)."""
    if summary.get("host") == "ALL_HOSTS":
        return f"all {len(summary.get('hosts') or [])} hosts"
    return summary.get("host") or "—"


def counts(summary: dict) -> dict:
    """How many findings of each priority."""
    return {p: sum(1 for f in summary.get("findings") or [] if f["priority"] == p) for p in PRIORITIES}


def metric_rows(summary: dict) -> list[tuple[str, str]]:
    """The key metrics as (label, text) rows, for the HTML file and the Markdown alike;
    a part the answer has no numbers for is left out."""
    m = summary.get("metrics") or {}
    rows = []
    if s := m.get("steps"):
        how = f" (found by {s['step_source']})" if s.get("step_source") else ""
        rows.append(("steps", f"{s['count']:,}{how}"))
        rows.append(("median step", f"{us_text(s.get('median_us'))}, p90 {us_text(s.get('p90_us'))}"))
        if s.get("slowest_step") is not None:
            rows.append(("slowest step", f"{s['slowest_step']}: {us_text(s.get('slowest_us'))}"))
    if d := m.get("device"):
        rows.append(("device busy", f"{pct_text(d.get('busy_share'))} (idle {pct_text(d.get('idle_share'))})"))
    if mem := m.get("memory"):
        cap = f" of {bytes_text(mem['capacity_bytes'])} ({pct_text(mem.get('utilization'))})" if mem.get("capacity_bytes") else ", capacity unknown"
        tier = f", OOM risk {mem['risk']}" if mem.get("risk") else ""
        rows.append(("peak memory", f"{bytes_text(mem.get('peak_bytes'))}{cap}{tier}"))
    if r := m.get("roofline"):
        parts = [f"{pct_text(r[k])} of {what}" for k, what in (("flops_utilization", "peak FLOPs"), ("hbm_utilization", "peak HBM bandwidth"))
                 if r.get(k) is not None]
        if parts:
            rows.append(("roofline", ", ".join(parts)))
    return rows


def categories(summary: dict) -> list[dict]:
    """Where step time goes, each category with its colour (the page's: SERIES in order,
    idle in silver as Steps & ops draws it)."""
    shown = [c for c in (summary.get("metrics") or {}).get("categories") or [] if (c.get("share") or 0) > 0]
    return [{**c, "color": PALETTE["P"]["silver"] if c["key"] == "idle" else SERIES[i % len(SERIES)]} for i, c in enumerate(shown)]


def render_html(summary: dict, source: str, memory: dict | None = None, server: str | None = None) -> str:
    """The summary as one offline HTML file. ``memory``: ``profscope report``'s document
    (app/oom_reports.py ``document()``) for this run, shown as the file's memory section."""
    reports = (memory or {}).get("reports") or []
    return render.page(
        "summary_report.html",
        s=summary, host=host_text(summary), counts=counts(summary), metrics=metric_rows(summary), categories=categories(summary),
        status_colors=STATUS_COLORS, priority_colors=PRIORITY_COLORS, us=us_text,
        link_words=link_words, link_href=lambda q: link_href(q, server),
        memory=memory, reports=reports, charts=[oom_report.charts(r) for r in reports],
        anchors=[oom_report.anchor(r, i) for i, r in enumerate(reports)],
        where=oom_report.link_text, href=lambda link, run: oom_report.link_href(link, run, server),
        run_href=lambda r: oom_report.run_href(r, server),
        source=source, server=server, version=__version__, generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )


def _cell(text) -> str:
    return "" if text is None else str(text).replace("|", "\\|").replace("\n", " ")


def _md_evidence(x: dict, server: str | None) -> str:
    q = x.get("link")
    if not q:
        return f"- {x['label']}: {x['value']}"
    href = link_href(q, server)
    where = f"[{link_words(q)}]({href})" if href else f"{link_words(q)}: `{q}`"
    return f"- {x['label']}: {x['value']} ({where})"


def render_markdown(summary: dict, source: str, server: str | None = None) -> str:
    """The summary as Markdown: status, sentences, key metrics, findings P0 first, hosts,
    the parts refused. Nothing in it depends on the time it was made."""
    s = summary
    n = counts(s)
    lines = [f"# Summary: {s['run']}: {s['status']}", "",
             f"Host: {host_text(s)} · source `{source}` · profscope {__version__} · "
             f"{n['P0']} P0, {n['P1']} P1, {n['P2']} P2", "", s.get("summary") or "", ""]
    if rows := metric_rows(s):
        lines += ["## Key metrics", "", "| metric | value |", "|---|---|", *[f"| {k} | {_cell(v)} |" for k, v in rows], ""]
    if cats := categories(s):
        lines += ["## Where step time goes", "", "| category | time | share |", "|---|---:|---:|",
                  *[f"| {_cell(c['label'])} | {us_text(c.get('us'))} | {pct_text(c.get('share'))} |" for c in cats], ""]
    if s.get("refused"):
        lines += ["## Refused", "", "Not read, so not in the summary above.", "", "| file | reason |", "|---|---|",
                  *[f"| `{x['file']}` | {_cell(x['reason'])} |" for x in s["refused"]], ""]
    if s.get("hosts"):
        lines += ["## Hosts", "", "| host | status | P0 | P1 | P2 | median step | peak memory |", "|---|---|---:|---:|---:|---:|---:|"]
        for h in s["hosts"]:
            c = {} if h.get("error") else h.get("counts") or {}
            status = f"cannot be read: {_cell(h['error'])}" if h.get("error") else h.get("status") or "—"
            lines.append(f"| {_cell(h['host'])} | {status} | {c.get('P0', '')} | {c.get('P1', '')} | {c.get('P2', '')} | "
                         f"{us_text(h.get('median_us'))} | {bytes_text(h.get('peak_bytes'))} |")
        lines.append("")
    lines += ["## Findings", ""]
    if not s.get("findings"):
        lines += ["No rule could run: nothing of this run was read." if s["status"] == "NOT_ASSESSED"
                  else "No finding: none of the rules fired on this run.", ""]
    for f in s.get("findings") or []:
        on = f", {f['host']}" if f.get("host") and s.get("host") == "ALL_HOSTS" else ""
        impact = (f.get("impact") or {}).get("text") or "—"
        lines += [f"### {f['priority']}: {f['title']} ({f['area']}{on})", "", f"**What:** {f['what']}", "", "**Evidence:**", "",
                  *[_md_evidence(x, server) for x in f.get("evidence") or []], "", f"**Impact:** {impact}", "", f"**Fix:** {f['fix']}", ""]
    return "\n".join(lines)
