"""From a buffer to everything profscope knows of its instruction (issue 37): the module's
HLO text (tools/hlo_text.py), the instruction's neighbourhood, its slices and its last
use's slices in the trace (tools/op_slices.py, on the trace index the trace viewer already
built) and its source lines (storage/source_files.py, only inside the source roots).

Part of the workspace through :class:`~profscope.app.compiled_memory.CompiledMemory` (the
module it reads is the memory viewer's). Every link it offers names a target that exists in
this run: a trace slice found in the index, a source file found under a root; what is not
found is ``None``, and the page draws plain text for it (docs/links.md).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from profscope.app import keys, lazy
from profscope.errors import BadRequest, NotFound, ProfscopeError
from profscope.model.catalog import Run, RunKind
from profscope.model.file_kinds import FileKind, classify
from profscope.storage.source_files import SourceRoots

hlo_text = lazy.module("profscope.tools.hlo_text")
op_slices = lazy.module("profscope.tools.op_slices")
trace_viewer = lazy.module("profscope.tools.trace_viewer")

HLO_TEXT = ("hlo_text", 2)  # one module's text and instruction graph (tools/hlo_text.py); 2: computations' root
#: Ops whose output is an alias of their operand's buffer (no kernel of their own): a
#: buffer's last use is looked for through them.
ALIASING = {"bitcast", "get-tuple-element", "tuple", "optimization-barrier"}
#: Trace slices listed per instruction (the first runs; ``count`` says how many there are).
MAX_SLICES = 3
#: The margin around a slice when the trace viewer opens at it, in ms (as Steps & ops and
#: the Summary open an op: 50 us either side).
PAD_MS = 0.05


class HloLinks:
    """The HLO text view, a buffer's instruction panel and the source view."""

    _source_dirs: tuple[str, ...] = ()

    def set_source_roots(self, roots) -> None:
        """The folders (``profscope serve --source-root``) source files are read from,
        besides a local log directory."""
        self._source_dirs = tuple(os.fspath(r) for r in roots)

    def source_roots(self) -> SourceRoots:
        roots = list(self._source_dirs)
        if self.logdir.is_local:
            roots.append(self.logdir.root)
        return SourceRoots(roots)

    # -- the module's text ----------------------------------------------------------------

    def hlo_module_text(self, run: Run, module_name: str | None, host: str | None = None) -> dict:
        """tools/hlo_text.module_text of one module (cached on disk, the last few in memory)."""
        source = self.module_source(run, module_name, host)
        if source.hlo_file is None:
            raise NotFound(f"module {module_name!r} of run {run.name!r} has no HLO proto (its dump was written "
                           "without --xla_dump_hlo_as_proto): no HLO text to show")
        key = keys.derived(HLO_TEXT, self.logdir.url, source.identity(), source.module_name)
        memo = self._hlo_memo()
        with memo[1]:
            got = memo[0].get(key)
            if got is not None:
                memo[0].move_to_end(key)
                return got
        text = self.cache.get_or_compute_json(
            key, f"HLO text of {source.module_name}",
            lambda progress: hlo_text.module_text(self.hlo_proto(source).hlo_module),
            file=self.logdir.display_path(source.hlo_file.path))
        with memo[1]:
            memo[0][key] = text
            while len(memo[0]) > 4:
                memo[0].popitem(last=False)
        return text

    def _hlo_memo(self):
        memo = self.__dict__.get("_hlo_texts")
        if memo is None:
            memo = self.__dict__["_hlo_texts"] = (OrderedDict(), threading.Lock())
        return memo

    def has_instruction(self, run: Run, module_name: str, host: str | None, name: str) -> bool:
        """Whether ``module_name`` of this run has an instruction ``name`` (an HLO view
        link is drawn only then)."""
        try:
            return name in self.hlo_module_text(run, module_name, host)["instructions"]
        except ProfscopeError:
            return False

    def hlo_view(self, run: Run, module_name: str | None, host: str | None, instr: str | None) -> dict:
        """The HLO view's payload: the module's lines and computations, and the instruction
        asked for (its line and neighbourhood), ``None`` when the module has none of that name."""
        text = self.hlo_module_text(run, module_name, host)
        view = hlo_text.instruction_view(text, instr) if instr else None
        return {"run": run.name, "module_name": module_name, "module": text["module"], "lines": text["lines"],
                "computations": text["computations"], "instruction": view,
                "missing": instr if instr and view is None else None}

    # -- one instruction: neighbourhood, trace, source ------------------------------------

    def hlo_instruction(self, run: Run, module_name: str | None, host: str | None, instr: str | None,
                        hops: int | None = None) -> dict:
        """A buffer's instruction: its text and neighbourhood (``hops`` edges), its slices
        and its last use's in the trace, and its source."""
        if not instr:
            raise BadRequest("missing parameter 'instr' (an instruction name of the module)")
        text = self.hlo_module_text(run, module_name, host)
        hood = hlo_text.neighborhood(text, instr, 1 if hops is None else hops)
        if hood is None:
            raise NotFound(f"module {module_name!r} has no instruction {instr!r}")
        last = last_use(text, instr)
        trace_host, slices = self._op_trace(run, module_name, host, [instr] + ([last] if last else []))
        info = text["instructions"][instr]
        return {
            "run": run.name, "module_name": module_name, "instruction": hood["nodes"][0], "neighborhood": hood,
            "lastUse": last, "calls": hlo_text.called_roots(text, instr),
            "trace": None if trace_host is None else {
                "host": trace_host, "defining": slices.get(instr), "lastUse": slices.get(last) if last else None},
            "source": self.source_link(info["source"]["file"], info["source"]["line"]) if info["source"] else None,
            "sourceNamed": info["source"],
        }

    def _op_trace(self, run: Run, module_name: str, host: str | None, ops: list[str]) -> tuple[str | None, dict]:
        """(the trace host, {op: {count, slices}}) of each op's runs in ``module_name``;
        (None, {}) when the run has no trace to look in."""
        if run.kind is not RunKind.PROFILE:
            return None, {}
        sources = self.trace_sources(run)
        chosen = [(i, h, f) for i, (h, f) in enumerate(sources) if h == host] if host else []
        if not chosen:
            # the memory viewer's module is the first xplane's that has it (module_source)
            info = self.module_source(run, module_name, host).hlo_file
            chosen = [(i, h, f) for i, (h, f) in enumerate(sources) if f == info]
        if not chosen:
            return None, {}
        pos, name, info = chosen[0]
        if classify(info.name) is not FileKind.XPLANE:
            return None, {}
        ix = self.trace_index(run, name, info)
        # The link opens the trace viewer with host=H alone: its origin is this host's
        # index origin (TraceView.shift is 0), its event ids are position << HOST_ID_SHIFT
        # | row, as /api/trace/window and /api/trace/event name them.
        shift, ps_per_ms = trace_viewer.HOST_ID_SHIFT, trace_viewer.PS_PER_MS
        out = {}
        for op in dict.fromkeys(ops):
            rows = op_slices.op_rows(ix, op, module_name)
            items = []
            for row in rows[:MAX_SLICES].tolist():
                start = int(ix.cols["start"][row]) / ps_per_ms
                dur = int(ix.cols["dur"][row]) / ps_per_ms
                track = ix.tracks[int(ix.cols["track"][row])]
                items.append({"id": (pos << shift) | row, "start_ms": start, "dur_ms": dur,
                              "track": track["name"],
                              "link": {"tool": "trace_viewer@", "host": name, "start_ms": round(start - PAD_MS, 6),
                                       "end_ms": round(start + dur + PAD_MS, 6), "ev": str((pos << shift) | row)}})
            # a CPU profile's op slices past the first MAX_ARG_CHECKS are not matched to a
            # module: the count is then "at least" (countIsLowerBound)
            out[op] = {"count": int(len(rows)), "slices": items,
                       "countIsLowerBound": bool(op_slices.unchecked(ix, op)) if len(rows) else False}
        return name, out

    # -- source -----------------------------------------------------------------------------

    def source_link(self, file: str | None, line: int | None = None) -> dict | None:
        """``{file, line, path}`` when ``file`` is found under a source root (a link to
        draw: GET /api/source?file=..&line=.. answers it), else None (plain text)."""
        if not file:
            return None
        try:
            found = self.source_roots().find(file)
        except BadRequest:
            return None
        if found is None:
            return None
        return {"file": file, "line": line, "path": found[1]}

    def source_lines(self, file: str | None, line: int | None, context: int | None = None) -> dict:
        """GET /api/source: a few lines of ``file`` around ``line``, read inside the roots."""
        if not file:
            raise BadRequest("missing parameter 'file' (a source file name, as the profile names it)")
        return self.source_roots().read(file, line, context)


def last_use(text: dict, name: str) -> str | None:
    """The instruction that reads ``name``'s buffer last in its computation's order (the
    text's, which is the schedule's): its users, and through aliasing ops (bitcast, tuple,
    get-tuple-element) theirs; ops that run no kernel of their own are skipped. None when
    nothing reads it."""
    ins = text["instructions"]
    best, best_line = None, -1
    seen = {name}
    stack = list(ins[name]["users"])
    while stack:
        u = stack.pop()
        if u in seen or u not in ins:
            continue
        seen.add(u)
        info = ins[u]
        if info["opcode"] in ALIASING:
            stack.extend(info["users"])
            continue
        if info["line"] > best_line:
            best, best_line = u, info["line"]
    return best
