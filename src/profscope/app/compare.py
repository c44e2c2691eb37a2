"""Compare (issue 36, docs/compare.md): a tool's answer for a run against its answer for a
base (another run, host or module, or another snapshot), as one diff JSON.

The workspace computes both single answers through their own cached payloads (each made
once, as without a base), then hands them to the tool's pure diff function, which its
row names (``Tool.compare``: ``"module:function"`` under ``profscope.tools``, called as
``diff(base, current, *, base_ref, current_ref, link)``). The diff is made on each request
from the two payloads and is not cached alone: a key of its own would have to hold both
inputs' identities, and reading two cached payloads is what it would save.

What is checked here, before anything is read: the base run is a run of the catalog (a
name, never a path: ``Workspace.run``), its host one of its hosts, its module one of its
modules (each a 404 naming it). A base the tool has nothing for (a memory viewer against
a snapshot) is no error: the answer says ``comparable: false`` and why.
"""

from __future__ import annotations

import copy
import gzip
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import orjson

from profscope.app.profile_steps import ALL_HOSTS
from profscope.app.queries import COMPARE_FIELDS, Query
from profscope.errors import BadRequest, NotFound, ProfscopeError
from profscope.model.catalog import Run, RunKind

if TYPE_CHECKING:
    from profscope.app.tool_table import Tool

VERSION = 1  # of the diff JSON's outer shape (docs/compare.md "The diff JSON")
# The run kinds whose compiled modules a tool reads alike (an xplane's HloProto, a dump's)
COMPILED_KINDS = frozenset({RunKind.PROFILE, RunKind.XLA_DUMP})


def differ(tool: Tool) -> Callable[..., dict]:
    """The tool's pure diff function (its row's ``compare``), or a 400 for a tool that has
    nothing to compare."""
    if tool.compare is None:
        raise BadRequest(f"comparison of {tool.name} not available: the tool has nothing to compare")
    module, _, function = tool.compare.partition(":")
    return getattr(importlib.import_module(f"profscope.tools.{module}"), function or "diff")


def module_stem(name: str | None) -> str | None:
    """A module's name without XProf's program id (``jit_step(12)`` -> ``jit_step``): two
    compilations of one program share the stem, never the id."""
    if name and name.endswith(")") and "(" in name:
        return name[: name.rindex("(")]
    return name


def side_link(run_name: str) -> Callable[..., str]:
    """``link(tool, **keys)``: the dashboard's URL query string of a view of a run (as
    app/summary.py ``linker``); ``run=`` among the keys names another run (the base's
    links), None values left out."""
    def link(tool: str, **keys) -> str:
        run = keys.pop("run", None) or run_name
        pairs = [("run", run), ("tool", tool)] + [(k, str(v)) for k, v in keys.items() if v is not None]
        return "?" + urlencode(pairs)
    return link


class Comparisons:
    """The Workspace's compare: ``compare(run, tool, query)`` for a query whose compare
    fields are set (app/queries.py ``compares``)."""

    def compare(self, run: Run, tool: Tool, query: Query) -> dict:
        base_run = self.run(query.base) if getattr(query, "base", None) else run
        current_q = self._complete(run, tool, query.but(**{f: None for f in COMPARE_FIELDS if hasattr(query, f)}))
        try:
            why = self._mismatch(run, base_run, tool)
        except ProfscopeError as e:
            raise e if base_run is run else _as_base(e, base_run) from None
        if why is not None:
            base_ref = {"run": base_run.name, "host": getattr(query, "base_host", None), "label": base_run.name}
            return not_comparable(tool.name, base_ref, self._ref(run, current_q), why)
        fn = differ(tool)
        try:
            base_q = self._base_query(base_run, tool, query, current_q, same_run=base_run is run)
            base = self._payload_of(base_run, tool, base_q)
        except ProfscopeError as e:
            if base_run is run:
                raise
            # the base's own error (its file, its status), saying it was the base that
            # failed: a 422 naming a file reads as if the run on screen were broken
            raise _as_base(e, base_run) from None
        current_ref, base_ref = self._ref(run, current_q), self._ref(base_run, base_q)
        current = self._payload_of(run, tool, current_q)
        out = fn(base, current, base_ref=base_ref, current_ref=current_ref, link=side_link(run.name))
        # the diff's own additions to a side (the memory profile's allocator) are kept
        sides = {"version": VERSION, "tool": tool.name, "base": {**base_ref, **(out.get("base") or {})},
                 "current": {**current_ref, **(out.get("current") or {})}}
        return {**sides, **{k: v for k, v in out.items() if k not in sides}}

    def _base_query(self, base_run: Run, tool: Tool, query: Query, current: Query, *, same_run: bool) -> Query:
        """The base's query: the current one with the base's host and module. Left out,
        they are the current ones when the base run has them (a module by its name without
        the program id, when one module of the base has that stem), else the tool's
        default for the base run."""
        changes = {}
        if hasattr(query, "host"):
            host = query.base_host
            known = self.hosts(base_run) or [h for h, _ in self.trace_sources(base_run)]
            if host is not None:
                if known and host not in known and host != ALL_HOSTS:
                    raise NotFound(f"base run {base_run.name!r} has no host {host!r}; hosts: {', '.join(known)}")
            elif same_run or current.host in known or (current.host == ALL_HOSTS and len(known) > 1):
                host = current.host
            changes["host"] = host
        if hasattr(query, "module_name"):
            module = getattr(query, "base_module", None)
            if module is not None:
                known = self.modules(base_run)
                if module not in known:
                    raise NotFound(f"base run {base_run.name!r} has no module {module!r}; modules: {', '.join(known)}")
            elif current.module_name is not None and not same_run:
                known = self.modules(base_run)
                stems = [m for m in known if module_stem(m) == module_stem(current.module_name)]
                if current.module_name in known or len(stems) == 1:
                    module = current.module_name if current.module_name in known else stems[0]
                elif stems:  # several compilations of that program: which one is for the user to say
                    raise BadRequest(f"base run {base_run.name!r} has {len(stems)} modules named "
                                     f"{module_stem(current.module_name)!r}: give base_module, one of {', '.join(stems)}")
                else:
                    module = None  # no such program there: the tool's default module of the base run
            else:
                module = current.module_name
            changes["module_name"] = module
        return self._complete(base_run, tool, current.but(**changes))

    def _mismatch(self, run: Run, base_run: Run, tool: Tool) -> str | None:
        """Why the base cannot be compared with the run for this tool, or None."""
        if not (tool.applies_to(base_run) and tool.has_input(self, base_run)):
            return (f"{tool.title} has nothing for the base run {base_run.name!r} (a {base_run.kind.value}), "
                    f"so it cannot be compared with {run.name!r} (a {run.kind.value})")
        if run.kind is not base_run.kind and not (
                {run.kind, base_run.kind} <= COMPILED_KINDS and "module_name" in tool.query.params()):
            # a profile's module and a dump's are the same HloProto (the memory viewer,
            # OOM risk of one module); anything else of two kinds measures different things
            return (f"{run.name!r} is a {run.kind.value} and {base_run.name!r} a {base_run.kind.value}: "
                    f"their {tool.title} answers measure different things")
        return None

    def _payload_of(self, run: Run, tool: Tool, query: Query) -> dict:
        return orjson.loads(gzip.decompress(self.tool_data(run, tool, query)))

    def _ref(self, run: Run, query: Query) -> dict:
        """What one side of a diff is: its run, host, module and a label for people."""
        ref = {"run": run.name, "host": getattr(query, "host", None)}
        if hasattr(query, "module_name"):
            ref["module"] = query.module_name
        ref["label"] = " · ".join(str(v) for v in ref.values() if v)
        return ref


def _as_base(e: ProfscopeError, base_run: Run) -> ProfscopeError:
    """A copy of the base side's error (the original may be a remembered failure that
    other requests get too: never changed in place), its message saying it is the base's."""
    out = copy.copy(e)
    out.message = f"the base, run {base_run.name!r}: {e.message}"
    out.args = (out.message,)
    return out


def not_comparable(tool: str, base_ref: dict, current_ref: dict, why: str) -> dict:
    """The diff JSON of two inputs that cannot be compared: nothing but why."""
    return {"version": VERSION, "tool": tool, "base": base_ref, "current": current_ref, "comparable": False,
            "why": why, "totals": None, "groups": {}, "rows": []}
