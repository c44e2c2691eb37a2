"""The memory viewer's family: a run's compiled HLO modules, one module's buffers over
program order (tools/memory_viewer.py on an ``HloProto``, tools/memory_viewer_text.py on
dump text), the values of its allocation-timeline page and every module's peak."""

from __future__ import annotations

import contextlib
import gzip
from dataclasses import dataclass

import orjson

from profscope.app import keys, lazy
from profscope.app.hlo_links import HloLinks
from profscope.app.queries import MemoryViewerQuery
from profscope.cache import worker as cache_worker
from profscope.errors import BadInput, BadRequest, NotFound, ProfscopeError
from profscope.forksafe import keep_until_exit
from profscope.model import heap
from profscope.model.catalog import Run, RunKind
from profscope.model.file_kinds import FileKind
from profscope.storage import FileInfo

buffer_assignment_text = lazy.module("profscope.formats.buffer_assignment_text")
hlo_proto = lazy.module("profscope.formats.hlo_proto")
xplane = lazy.module("profscope.formats.xplane")
memory_viewer = lazy.module("profscope.tools.memory_viewer")
memory_viewer_text = lazy.module("profscope.tools.memory_viewer_text")
live_range_text = lazy.module("profscope.formats.live_range_text")
memory_viewer_timeline = lazy.module("profscope.tools.memory_viewer_timeline")


# A module whose files (an HloProto, or a dump's text files) are at most this big is
# converted in the server process (Tool.in_process): a worker's fork and the imports it
# makes anew cost ~0.1 s, more than converting such a module, whose conversion peaks at
# ~30 MiB per MB of HloProto (bench_memory_viewer.py --served; docs/performance.md, issue 40).
IN_PROCESS_MAX_BYTES = 2 * 1024 * 1024


def _import_before_fork() -> None:
    """Import what a module's conversion imports (protobuf's upb, the HLO protos, numpy,
    the tool) in the server process, before a worker is forked for it: the page's module
    list and its view fork a worker each, and each imported them anew (~0.07-0.1 CPU s
    apiece on this machine, docs/performance.md, issue 40); forked after this, both
    inherit them. Only when a conversion is about to run: a server that answers from the
    cache never imports them."""
    hlo_proto.parse  # noqa: B018 - a lazy module's first attribute read imports it
    memory_viewer.from_hlo  # noqa: B018


def complete_query(run: Run, query: MemoryViewerQuery) -> MemoryViewerQuery:
    """One query, one cache entry: memory space 0 is no memory space (the default), and
    no host in a profile of one host is that host. XProf's frontend asks with ``host=``,
    profscope's page with ``memory_space=0`` and maybe no host, its module ranking
    (:meth:`CompiledMemory._view_first`) with neither: each was an entry of its own, so
    a conversion of the module of its own. A run of several hosts keeps no host: the
    module is looked for in each (:meth:`CompiledMemory.module_source`)."""
    if query.memory_space == 0:
        query = query.but(memory_space=None)
    if query.host is None and run.kind is RunKind.PROFILE and len(run.hosts) == 1:
        query = query.but(host=run.hosts[0])
    return query


class CompiledMemory(HloLinks):
    """Part of :class:`~profscope.app.workspace.Workspace`: compiled modules and their buffers."""

    def __init__(self):
        # The module names of each xplane by file identity: every memory-viewer request
        # checks that the run has modules and finds the module's file; reading the list
        # back from the disk cache each time cost a gzip JSON read per xplane.
        self._module_lists: dict[str, list[str]] = {}

    def modules(self, run: Run) -> list[str]:
        """The HLO modules of a run, as XProf names them (``<name>(<program id>)``), sorted."""
        names: set[str] = set()
        if run.kind is RunKind.XLA_DUMP:
            names.update(m.display_name for m in run.dump_modules())
        xplanes = run.files_of(FileKind.XPLANE)
        for info in xplanes:
            try:
                names.update(self._modules_of(info))
            except BadInput:
                # One host's unreadable file must not take the run's other hosts with it
                # (every tool list and page of the run reads this list): its modules are
                # left out here, and that host's own requests answer its 422.
                if len(xplanes) == 1:
                    raise
        return sorted(names)

    def module_source(self, run: Run, module_name: str | None, host: str | None = None) -> ModuleSource:
        """Where a module's buffer assignment comes from: an HloProto (profile or dump)
        or, for dumps written without ``--xla_dump_hlo_as_proto``, the text files."""
        if not module_name:
            raise BadRequest("missing parameter 'module_name' (see module_list for this run's modules)")
        if run.kind is RunKind.XLA_DUMP:
            module = next((m for m in run.dump_modules() if m.display_name == module_name), None)
            if module is not None:
                files = {role: run.file(name) for role, name in module.files.items()}
                return ModuleSource(module_name, files.get("hlo_proto"), files.get("buffer_assignment"), files.get("memory_usage_report"))
        elif run.kind is RunKind.PROFILE:
            xplanes = run.files_of(FileKind.XPLANE)
            if host:
                xplanes = [f for f in xplanes if f == run.xplane(host)]
                if not xplanes:
                    raise NotFound(f"run {run.name!r} has no host {host!r}; hosts: {', '.join(run.hosts)}")
            for info in xplanes:
                if module_name in self._modules_of(info):
                    return ModuleSource(module_name, info, embedded=True)
        raise NotFound(f"no module {module_name!r} in run {run.name!r}; see module_list for its modules")

    def small_module(self, run: Run, query: MemoryViewerQuery) -> bool:
        """Whether the module's files are small enough to convert in the server process
        (:data:`IN_PROCESS_MAX_BYTES`, not gzipped); a profile's module counts its whole
        xplane."""
        try:
            source = self.module_source(run, query.module_name, query.host)
        except ProfscopeError:
            return False  # the conversion raises it, as before
        files = [f for f in (source.hlo_file, source.buffer_assignment, source.memory_usage_report) if f is not None]
        # A gzipped file says nothing of what it expands to (the readers' budget refuses a
        # bomb, the worker's memory cap is the backstop): it is converted in a worker.
        return (bool(files) and not any(f.name.endswith(".gz") for f in files)
                and sum(f.size or 0 for f in files) <= IN_PROCESS_MAX_BYTES)

    def hlo_proto(self, source: ModuleSource):
        return self.hlo_proto_wire(source)[0]

    def hlo_proto_wire(self, source: ModuleSource):
        """The module's HloProto and the bytes it was parsed from (formats/hlo_proto.py
        ``parse_wire``)."""
        info = source.hlo_file
        path = self.logdir.display_path(info.path)
        if source.embedded:
            with self.logdir.open(info.path) as f:
                data = xplane.hlo_proto_bytes(f, path, source.module_name)
            if data is None:
                raise NotFound(f"{path}: no HLO proto recorded for module {source.module_name!r}", file=path)
            path = f"{path} (module {source.module_name})"
        else:
            data = self.logdir.read_bytes(info.path)
        return hlo_proto.parse_wire(data, path)

    def memory_viewer(self, run: Run, query: MemoryViewerQuery, progress) -> dict:
        """XProf's memory viewer payload for one module and memory space; ``view=page``
        the browser's copy of it (``memory_viewer.page_view``), made from the full
        payload's own cache entry, so that the page and XProf's frontend (or the
        allocation timeline) share one conversion."""
        if query.view == "page":
            # A worker (which ends after this) keeps what the conversion frees for what it
            # makes next: the profile's plane read to find the module (its bytes and
            # upb's copy, ~36 MB on compare_peers' module) before the module's parse, the
            # full result's 68 MB of JSON before the page; fresh pages cost the page's
            # worker ~118,000 faults and 0.3-0.36 s of system time there (-6,000 with
            # this; docs/performance.md, issue 40)
            with heap.freed_memory_kept() if cache_worker.in_worker() else contextlib.nullcontext():
                return self._page(run, query, progress)
        source = self.module_source(run, query.module_name, query.host)
        space = query.memory_space or 0
        if source.hlo_file is None:
            progress.update(message=f"reading {source.buffer_assignment.name}")
            ba_path = self.logdir.display_path(source.buffer_assignment.path)
            ba = buffer_assignment_text.parse_buffer_assignment(self._text(source.buffer_assignment), ba_path)
            report = None
            if source.memory_usage_report is not None:
                report_path = self.logdir.display_path(source.memory_usage_report.path)
                report = buffer_assignment_text.parse_memory_usage_report(self._text(source.memory_usage_report), report_path)
            live = None if ba.live_range is not None else self._live_range_beside(source.buffer_assignment)
            return memory_viewer_text.from_dump_text(ba, report, source.module_name, live_range=live,
                                                     live_file=live and source.buffer_assignment.name.replace(
                                                         "-buffer-assignment.txt", "-live-range.txt"))
        progress.update(message=f"reading the HLO proto of {source.module_name}")
        hlo, wire = self.hlo_proto_wire(source)
        try:
            result, peak = memory_viewer.view_and_summary(hlo, space, progress=progress, wire=wire, arrays=True)
        except ProfscopeError as e:
            # Tools know no files: name the one the module came from.
            e.file = e.file or self.logdir.display_path(source.hlo_file.path)
            e.message = f"{e.file} (module {source.module_name}): {e.message}"
            raise
        # the module ranking's row, from the same index of the module: module_peaks reads
        # it instead of converting the module again (a run of one module: _view_first)
        self.cache.put_json(self._peak_key(source, space), peak)
        return result

    def _page(self, run: Run, query: MemoryViewerQuery, progress) -> dict:
        full = self._full_memory_viewer(run, query.but(view=None), progress)
        if self.module_source(run, query.module_name, query.host).hlo_file is None:
            return full  # a text-only module's payload is the page's as it is
        # The page's worker answers with the page and exits: the full result and the
        # page are left for its exit to free (forksafe.keep_until_exit; a no-op in
        # the server, where a small module converts)
        keep_until_exit(full)
        page = memory_viewer.page_view(full)
        keep_until_exit(page)
        return page

    def _full_memory_viewer(self, run: Run, query: MemoryViewerQuery, progress) -> dict:
        """The full payload of ``query`` (no view) through its cache entry: read back when
        it is there, else converted here (inline: this runs inside the page's conversion)
        and stored under its own key, and used as it is, without a JSON round trip."""
        made: list[dict] = []

        def compute(p) -> dict:
            made.append(self.memory_viewer(run, query, p))
            return made[-1]

        tool = self.tool_named("memory_viewer")
        key = self.tool_data_key(run, tool, query)
        # In the page's worker this runs inline; where the page converts in the server
        # process, so does this (the same module's size)
        gz = self.cache.get_or_compute(key, f"{tool.title}: {query.module_name}", compute, file=self._run_file(run),
                                       in_process=self.small_module(run, query))
        return made[0] if made else orjson.loads(gzip.decompress(gz))

    def _live_range_beside(self, buffer_assignment) -> dict | None:
        """XLA's ``*-live-range.txt`` next to a module's ``*-buffer-assignment.txt`` (jax
        0.10.x writes HloLiveRange there, formats/live_range_text.py), or None."""
        suffix = "-buffer-assignment.txt"
        if not buffer_assignment.path.endswith(suffix):
            return None
        rel = buffer_assignment.path[: -len(suffix)] + "-live-range.txt"
        if self.logdir.files().get(rel) is None:
            return None
        return live_range_text.parse_live_range(self.logdir.read_bytes(rel).decode("utf-8", "replace"),
                                                self.logdir.display_path(rel))

    def memory_viewer_timeline(self, run: Run, query: MemoryViewerQuery) -> dict:
        """The values of XProf's allocation-timeline page of one module, from the memory
        viewer payload (its own cache entry; tools/memory_viewer_timeline.py); the page is
        frontend/templates/memory_viewer_timeline.html."""
        query = query.but(view=None)
        result = self._payload(run, "memory_viewer", query)
        return memory_viewer_timeline.timeline(result, query.module_name or "", query.memory_space or 0)

    def _peak_key(self, source: ModuleSource, memory_space: int) -> str:
        return keys.derived(keys.MODULE_PEAK, self.logdir.url, source.identity(), source.module_name, memory_space)

    def module_peaks(self, run: Run, memory_space: int = 0) -> list[dict]:
        """Every module of a run with its peak, largest first (a cheap summary each)."""
        rows = []
        names = self.modules(run)
        for name in names:
            source = self.module_source(run, name)
            if source.hlo_file is None and (source.buffer_assignment is None or memory_space):
                continue
            key = self._peak_key(source, memory_space)
            if source.hlo_file is not None and not self.cache.has(key):
                _import_before_fork()
                if len(names) == 1:
                    self._view_first(run, name, memory_space)
            if source.hlo_file is None:
                # A text-only module is ranked by its live ranges' peak (the memory viewer's
                # own figure), so that a text dump is rated on the same module as its proto.
                compute = lambda p, s=source: memory_viewer_text.summary(  # noqa: E731
                    self.memory_viewer(run, MemoryViewerQuery(module_name=s.module_name), p))
            else:
                compute = lambda p, s=source: self._ranking_row(s, memory_space)  # noqa: E731
            try:
                row = self.cache.get_or_compute_json(
                    key, f"peak of {name}", compute,
                    file=self.logdir.display_path((source.hlo_file or source.buffer_assignment).path),
                )
                # moduleName is the name to ask for (module_name=), as in module_list;
                # the summary's own is the bare HLO module name.
                rows.append({**row, "moduleName": name, "hloModuleName": row["moduleName"]})
            except ProfscopeError as e:
                rows.append({"moduleName": name, "error": e.message})
        return sorted(rows, key=lambda r: -(r.get("peakHeapMib") or 0))

    def _ranking_row(self, source: ModuleSource, memory_space: int) -> dict:
        """A module's row of the ranking (``memory_viewer.summary``), its buffers indexed
        from the HloProto's bytes."""
        hlo, wire = self.hlo_proto_wire(source)
        return memory_viewer.summary(hlo, memory_space, wire=wire)

    def _view_first(self, run: Run, name: str, memory_space: int) -> None:
        """A run of one module: its page view, made through its own cache entry, which
        stores the module's ranking row too (:meth:`memory_viewer`). The page opens a lone
        module at once and asks its ranking beside it (pages/memory_viewer.js), so one
        conversion serves both, whichever asks first, instead of two workers each parsing
        and indexing the module (0.5 of ~2.3 CPU s for 70,000 buffers, docs/performance.md).
        A module the view refuses (a memory space it lacks ranks as zeros) gets its own
        ranking conversion after this, as before."""
        query = MemoryViewerQuery(module_name=name, memory_space=memory_space, view="page")
        try:
            self.tool_data(run, self.tool_named("memory_viewer"), query)
        except ProfscopeError:
            pass

    def _text(self, info) -> str:
        return buffer_assignment_text.decode_dump_text(self.logdir.read_bytes(info.path), self.logdir.display_path(info.path))

    def _modules_of(self, info: FileInfo) -> list[str]:
        known = self._module_lists.get(info.identity())
        if known is not None:
            return known
        names = self.derived_json(keys.MODULE_LIST, info, "reading compiled modules of", "module list",
                                  lambda f, path: [m.display_name for m in xplane.hlo_modules(f, path)])
        if len(self._module_lists) > 4096:  # bounded: identities change as files are rewritten
            self._module_lists.clear()
        self._module_lists[info.identity()] = names
        return names


@dataclass(frozen=True, slots=True)
class ModuleSource:
    module_name: str
    hlo_file: FileInfo | None  # an xplane (embedded=True) or a dump's *.hlo.pb
    buffer_assignment: FileInfo | None = None  # dump text files, used when there is no proto
    memory_usage_report: FileInfo | None = None
    embedded: bool = False

    def identity(self) -> str:
        return "|".join(f.identity() for f in (self.hlo_file, self.buffer_assignment) if f is not None)
