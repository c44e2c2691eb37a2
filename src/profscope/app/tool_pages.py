"""What the dashboard's page (``GET /``) needs of the tool table: each tool's name, title
and page modules, in app/tool_table.py's order, in a module that imports nothing.

``server/quick_start.py`` renders the page before the app is imported; reading these from
``tool_table.TOOLS`` imported the app modules its rows name (the producers: summary,
traces, compiled memory... ~30-40 ms of the page's 100-130 ms of CPU, docs/performance.md,
issue 40). The app's own route renders from the table (``tool_table.page_rows``), and
tool_table.py refuses to import when its rows and these differ, so a tool added there and
not here (or retitled) fails every test that imports the table, and the two pages stay one.
"""

from __future__ import annotations

# (name, title, the dashboard's page modules under static/pages/), as the table's rows
ROWS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("summary", "Summary", ("summary.js",)),
    ("memory_viewer", "Memory viewer", ("memory_viewer.js",)),
    ("memory_profile", "Memory profile", ("memory_profile.js", "torch_snapshot.js", "memory_profile_pprof.js")),
    ("trace_viewer@", "Trace viewer", ("trace_viewer.js",)),
    ("overview_page", "Overview page", ()),
    ("op_profile", "HLO op profile", ()),
    ("hlo_stats", "HLO op stats", ()),
    ("steps_ops", "Steps & ops", ("steps_ops.js",)),
    ("oom_risk", "OOM risk", ("oom_risk.js",)),
)


Rows = tuple[tuple[str, str, tuple[str, ...]], ...]


def titles(rows: Rows = ROWS) -> dict[str, str]:
    """Every tool's title by name (the shell's tool picker names the open tool with it)."""
    return {name: title for name, title, _ in rows}


def page_modules(rows: Rows = ROWS) -> list[str]:
    """The dashboard's page modules, each once, in the table's order."""
    return list(dict.fromkeys(p for _, _, pages in rows for p in pages))
