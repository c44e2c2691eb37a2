"""``profscope diff``'s output, rendered from plain data: the diff JSON of a compare
(app/compare.py, docs/compare.md "The diff JSON") as Markdown or as one offline HTML file
(templates/compare_report.html: inline CSS, no script, no network). What changed comes
first (the verdict then -> now, the total), then the rows, largest change first.
"""

from __future__ import annotations

from datetime import UTC, datetime

from profscope import __version__
from profscope.frontend import render
from profscope.frontend.render import PALETTE, bytes_text

TOP = 30  # rows listed (the diff JSON holds all of them)
GROWTH = PALETTE["RISK"]["HIGH"]  # a change that costs (more bytes, more time): the page's red
SHRINK = PALETTE["RISK"]["LOW"]


def amount(value, unit: str | None) -> str:
    """A total or a row's value in its unit (``bytes`` or ``us``)."""
    if value is None:
        return "—"
    if unit == "bytes":
        return bytes_text(value)
    v = abs(value)
    text = f"{v / 1e6:.3f} s" if v >= 1e6 else f"{v / 1e3:.3f} ms" if v >= 1e3 else f"{v:.3f} µs"
    return ("-" if value < 0 else "") + text


def signed(value, unit: str | None) -> str:
    if value is None:
        return "—"
    return ("+" if value > 0 else "") + (amount(value, unit) if value else "0")


def growth(diff: dict) -> float | None:
    """The total's change as a fraction of the base (None: no total; inf: from nothing)."""
    totals = diff.get("totals")
    if not totals:
        return None
    if totals["base"]:
        return totals["delta"] / totals["base"]
    return float("inf") if totals["delta"] > 0 else 0.0


def headline(diff: dict) -> str:
    """One sentence: what was compared and how the total moved."""
    base, current = diff["base"]["label"], diff["current"]["label"]
    if not diff.get("comparable", True):
        return f"{diff['tool']}: {base} and {current} cannot be compared: {diff.get('why')}"
    totals = diff.get("totals")
    verdict = (diff.get("verdict") or {}).get("text")
    parts = [f"{diff['tool']}: {current} against {base}"]
    if verdict:
        parts.append(f"verdict {verdict}")
    if totals:
        g = growth(diff)
        share = "" if g is None or g == float("inf") else f" ({g:+.1%})"
        parts.append(f"total {amount(totals['base'], totals['unit'])} → {amount(totals['current'], totals['unit'])}, "
                     f"{signed(totals['delta'], totals['unit'])}{share}")
        if totals.get("residual"):
            parts.append(f"not attributed to a row: {signed(totals['residual'], totals['unit'])}")
    return "; ".join(parts)


def _unit(diff: dict) -> str | None:
    return (diff.get("totals") or {}).get("unit")


def render_markdown(diff: dict) -> str:
    unit = _unit(diff)
    lines = [f"# What changed: {diff['tool']}", "", headline(diff), ""]
    if diff.get("why") and diff.get("comparable", True):
        lines += [f"_{diff['why']}_", ""]
    rows = diff.get("rows") or []
    if rows:
        lines += ["| | base | current | change | in | matched by |", "|---|---:|---:|---:|---|---|"]
        for r in rows[:TOP]:
            label = str(r["label"]).replace("|", "\\|")
            lines.append(f"| {label} | {amount(r['base'], unit)} | {amount(r['current'], unit)} | "
                         f"{signed(r['delta'], unit)} | {r['in']} | {r.get('match') or '—'} |")
        if len(rows) > TOP:
            lines.append(f"\n{len(rows) - TOP} more rows in --format json.")
    return "\n".join(lines) + "\n"


def render_html(diff: dict) -> str:
    unit = _unit(diff)
    return render.page("compare_report.html", d=diff, headline=headline(diff), rows=(diff.get("rows") or [])[:TOP],
                       more=max(0, len(diff.get("rows") or []) - TOP), amount=lambda v: amount(v, unit),
                       signed=lambda v: signed(v, unit), growth_color=GROWTH, shrink_color=SHRINK,
                       version=__version__, generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
