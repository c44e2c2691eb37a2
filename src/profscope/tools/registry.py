"""The tools profscope shows, under the names XProf uses for them.

A tool's ``name`` is its XProf tag (``tag=`` in ``/data/plugin/profile/data``); the
order of :data:`TOOLS` is XProf's ``tool_sort_order`` (profile_plugin.py,
``_get_active_tools``) so ``run_tools`` lists shared tools in the same order.
Which run kinds a tool can already serve is the workspace's business (it holds the
producers); a tool that applies to a run but cannot serve it yet is shown greyed out,
left out of ``run_tools`` (an XProf client would otherwise ask for data that cannot come),
and ``data`` answers 404 saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from profscope.model.catalog import Run, RunKind


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    title: str
    summary: str
    run_kinds: frozenset[RunKind]
    version: int = 1  # bump when the payload changes: it is part of the cache key

    def applies_to(self, run: Run) -> bool:
        return run.kind in self.run_kinds


TOOLS: tuple[Tool, ...] = (
    Tool(
        "trace_viewer@",
        "Trace viewer",
        "What ran when: host threads, device streams, XLA ops, steps.",
        frozenset({RunKind.PROFILE, RunKind.CHROME_TRACE}),
    ),
    Tool(
        "memory_profile",
        "Memory profile",
        "What the allocator really did over time: peak, breakdown at peak, leaks.",
        frozenset({RunKind.PROFILE, RunKind.CHROME_TRACE, RunKind.TORCH_SNAPSHOT}),
        version=3,  # 2: XProf's schema for traces and snapshots too (tools/memory_profile_xprof.py); 3: profiles without allocator events are not grouped
    ),
    Tool(
        "memory_viewer",
        "Memory viewer",
        "What the XLA compiler planned: heap over program order, buffers at peak, padding.",
        frozenset({RunKind.PROFILE, RunKind.XLA_DUMP}),
        version=2,  # 2: profscope.heapEventKinds/heapEventBuffers/smallBuffersAtPeak, page view heapPoints
    ),
    Tool(
        "oom_risk",
        "OOM risk",
        "Peak vs capacity, headroom, and what to cut.",
        frozenset({RunKind.PROFILE, RunKind.XLA_DUMP, RunKind.TORCH_SNAPSHOT, RunKind.CHROME_TRACE}),
        version=3,  # 2: a multi-host profile is rated by its worst host (hosts, finding.host);
        # 3: default module = the one that ran most (moduleChoice)
    ),
)

_BY_NAME = {t.name: t for t in TOOLS}
# XProf's frontend and older clients name the trace viewer without the streaming '@'.
_ALIASES = {"trace_viewer": "trace_viewer@"}


def get(name: str) -> Tool | None:
    return _BY_NAME.get(_ALIASES.get(name, name))


def for_run(run: Run) -> list[Tool]:
    """Every tool that applies to a run, built or not, in XProf's order."""
    return [t for t in TOOLS if t.applies_to(run)]
