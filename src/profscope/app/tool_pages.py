"""Each tool's title and dashboard page modules, by name, in app/tool_table.py's order:
the one place they are written. The table's rows read them from here
(``title("summary")``, ``pages("summary")``).

They live apart from the table because ``server/quick_start.py`` renders the page
(``GET /``) before the app is imported, and importing the table imports the app modules
its rows name (the producers: summary, traces, compiled memory...: ~30-40 ms of the
page's 100-130 ms of CPU, docs/performance.md, issue 40). This module imports nothing.
"""

from __future__ import annotations

# (name, title, the dashboard's page modules under static/pages/), in the table's order
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
_BY_NAME = {name: (title, pages) for name, title, pages in ROWS}


def title(name: str) -> str:
    """A tool's title (its row in the table reads it from here)."""
    return _BY_NAME[name][0]


def pages(name: str) -> tuple[str, ...]:
    """A tool's dashboard page modules under static/pages/ (its row reads them from here)."""
    return _BY_NAME[name][1]


def titles(rows: Rows = ROWS) -> dict[str, str]:
    """Every tool's title by name (the shell's tool picker names the open tool with it)."""
    return {name: title for name, title, _ in rows}


def page_modules(rows: Rows = ROWS) -> list[str]:
    """The dashboard's page modules, each once, in the table's order."""
    return list(dict.fromkeys(p for _, _, pages in rows for p in pages))
