"""One log directory as the server sees it: runs, hosts, modules and tool results,
with everything expensive computed once and kept in the disk cache."""

from __future__ import annotations

import os
import shutil
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from profscope.cache.store import DiskCache, cache_key
from profscope.errors import BadRequest, NotFound, ProfscopeError
from profscope.forksafe import renew_locks_after_fork
from profscope.formats import (
    buffer_assignment_text,
    chrome_trace,
    hlo_proto,
    live_range_text,
    xplane,
    xplane_devices,
    xplane_memory,
    xplane_module_time,
    xplane_trace,
)
from profscope.formats import torch_snapshot as torch_snapshot_format
from profscope.formats.kinds import FileKind, classify
from profscope.model.catalog import Run, RunKind, discover
from profscope.storage import FileInfo, LogDir, safe_relpath
from profscope.tools import (
    memory_profile,
    memory_viewer,
    memory_viewer_text,
    memory_viewer_timeline,
    oom_risk,
    registry,
    torch_memory,
    torch_snapshot,
    trace_viewer,
)
from profscope.tools.registry import Tool

MODULE_LIST_VERSION = 1
SNAPSHOT_VERSION = 1
SNAPSHOTS_IN_MEMORY = 2
# The views of a snapshot beyond its overview (which is also the memory_profile tool's
# data), served under /api/snapshot/<view>.
SNAPSHOT_VIEWS = ("overview", "timeline", "state", "stack", "stacks", "compare")
# OOM risk of a snapshot: blocks read at the peak, and stacks resolved to frames.
OOM_MAX_BLOCKS = 500_000
OOM_MAX_STACKS = 500


class Workspace:
    def __init__(self, logdir: LogDir, cache: DiskCache):
        if logdir.is_local and _inside(cache.root, Path(logdir.root)):
            # Log directories may be read-only or shared; we never write into them.
            raise BadRequest(
                f"the cache folder {cache.root} is inside the log directory {logdir.url}; "
                "choose another with --cache-dir"
            )
        self.logdir = logdir
        self.cache = cache
        # (tool, run kind) -> the method that produces its payload.
        self._producers = {
            ("memory_viewer", RunKind.PROFILE): self.memory_viewer,
            ("memory_viewer", RunKind.XLA_DUMP): self.memory_viewer,
            ("memory_profile", RunKind.PROFILE): self.xplane_memory_profile,
            # XProf's schema for every run kind (XProf's page reads nothing else); the
            # dashboard reads the richer payloads from /api/memory_profile and
            # /api/snapshot/overview.
            ("memory_profile", RunKind.CHROME_TRACE): self.torch_memory_profile_xprof,
            ("memory_profile", RunKind.TORCH_SNAPSHOT): self.snapshot_memory_profile_xprof,
            ("trace_viewer@", RunKind.PROFILE): self.trace_viewer_xprof,
            ("trace_viewer@", RunKind.CHROME_TRACE): self.trace_viewer_xprof,
            ("oom_risk", RunKind.PROFILE): self.oom_risk,
            ("oom_risk", RunKind.XLA_DUMP): self.oom_risk,
            ("oom_risk", RunKind.TORCH_SNAPSHOT): self.oom_risk,
            ("oom_risk", RunKind.CHROME_TRACE): self.oom_risk,
        }
        # Loaded snapshot models (columns, ~0.6x the file), the last few kept in memory:
        # every view of a snapshot (timeline windows, states, stacks) reads one.
        self._snapshots: OrderedDict[str, torch_snapshot_format.Snapshot] = OrderedDict()
        self._snapshots_lock = threading.Lock()
        self._trace_indexes = trace_viewer.IndexCache()
        renew_locks_after_fork(self, "_snapshots_lock")

    # -- runs ----------------------------------------------------------------------------

    def runs(self) -> list[Run]:
        return discover(self.logdir.listing())

    def runs_at(self, session_path: str | None = None, run_path: str | None = None) -> list[Run]:
        """The runs XProf's ``session_path`` / ``run_path`` parameters select.

        XProf reads any folder these name; we accept them only inside the log directory
        (relative to it, or absolute below it) and name runs as XProf does: a session
        folder holding ``*.xplane.pb`` is a run named after the folder; ``run_path``
        selects each such session folder directly below it.
        """
        if session_path:
            folders = [self._relative(session_path, "session_path")]
        elif run_path:
            base = self._relative(run_path, "run_path")
            listing = self.logdir.listing()
            prefix = base + "/" if base else ""
            folders = sorted(d for d in listing.dirs if d.startswith(prefix) and "/" not in d[len(prefix) :])
        else:
            return self.runs()
        files = self.logdir.files()
        runs = []
        for folder in folders:
            own = [f for f in files.values() if f.parent == folder]
            if any(classify(f.name) is FileKind.XPLANE for f in own):
                name = folder.rsplit("/", 1)[-1] or self.logdir.url
                runs.append(Run(name, RunKind.PROFILE, folder, sorted(own, key=lambda f: f.path)))
        return sorted(runs, key=lambda r: r.name, reverse=True)

    def _relative(self, path: str, param: str) -> str:
        for prefix in (self.logdir.url.rstrip("/") + "/", self.logdir.root.rstrip("/") + "/"):
            if path.startswith(prefix):
                path = path[len(prefix) :]
                break
        else:
            if path.rstrip("/") in (self.logdir.url.rstrip("/"), self.logdir.root.rstrip("/")):
                path = ""
        try:
            rel = safe_relpath(path)
            self.logdir.full_path(rel)  # on local disks: refuses symlinks that lead out
            return rel
        except BadRequest as e:
            raise BadRequest(f"{param}: {e.message} (only folders inside {self.logdir.url} are served)") from e

    def run(self, name: str | None, *, session_path: str | None = None, run_path: str | None = None) -> Run:
        if not name and not session_path:
            raise BadRequest("missing parameter 'run'")
        name = name.rstrip("/") if name else name  # XProf strips it too (_run_dir)
        candidates = self.runs_at(session_path, run_path)
        if session_path and not name and candidates:
            return candidates[0]
        for run in candidates:
            if run.name == name:
                return run
        raise NotFound(f"no run named {name!r} in {self.logdir.url}")

    def hosts(self, run: Run) -> list[str]:
        """A run's hosts: its xplane files, or a snapshot's devices (``cuda:N``)."""
        if run.kind is RunKind.TORCH_SNAPSHOT:
            info = run.files[0]
            key = cache_key("snapshot_devices", SNAPSHOT_VERSION, self.logdir.url, info.identity())
            devices = self.cache.get_or_compute_json(key, f"devices of {info.name}", lambda p: self.snapshot(run, p).devices,
                                                     file=self.logdir.display_path(info.path))
            return [f"cuda:{d}" for d in devices]
        return run.hosts

    def can_serve(self, tool: Tool, run: Run) -> bool:
        """Whether this version of profscope produces ``tool``'s data for runs like ``run``."""
        return (tool.name, run.kind) in self._producers

    def tools(self, run: Run) -> list[Tool]:
        """The tools that have something to show for this run (servable or not yet)."""
        return [t for t in registry.for_run(run) if self._has_input(t, run)]

    def _has_input(self, tool: Tool, run: Run) -> bool:
        if tool.name == "memory_viewer":  # XProf: only when the profile carries HLO protos
            return bool(self.modules(run))
        if run.kind is RunKind.PROFILE:
            if tool.name == "trace_viewer@":
                # XProf 2.24 reads a session's xplanes only; a session holding just
                # *.trace.json.gz gets no trace viewer there (run_tools), nor here.
                return bool(run.files_of(FileKind.XPLANE))
            return bool(run.files_of(FileKind.XPLANE))
        return True

    # -- modules -------------------------------------------------------------------------

    def modules(self, run: Run) -> list[str]:
        """The HLO modules of a run, as XProf names them (``<name>(<program id>)``), sorted."""
        names: set[str] = set()
        if run.kind is RunKind.XLA_DUMP:
            names.update(m.display_name for m in run.dump_modules())
        for info in run.files_of(FileKind.XPLANE):
            names.update(self._modules_of(info))
        return sorted(names)

    # -- HLO modules (memory viewer) -----------------------------------------------------

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

    def hlo_proto(self, source: ModuleSource):
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
        return hlo_proto.parse(data, path)

    def memory_viewer(self, run: Run, params: dict, progress) -> dict:
        """XProf's memory viewer payload for one module and memory space."""
        source = self.module_source(run, params.get("module_name"), params.get("host"))
        space = _int_param(params, "memory_space", 0)
        if source.hlo_file is None:
            progress.update(message=f"reading {source.buffer_assignment.name}")
            ba_path = self.logdir.display_path(source.buffer_assignment.path)
            ba = buffer_assignment_text.parse_buffer_assignment(self._text(source.buffer_assignment), ba_path)
            report = None
            if source.memory_usage_report is not None:
                report_path = self.logdir.display_path(source.memory_usage_report.path)
                report = buffer_assignment_text.parse_memory_usage_report(self._text(source.memory_usage_report), report_path)
            return memory_viewer_text.convert_text(ba, report, source.module_name)
        progress.update(message=f"reading the HLO proto of {source.module_name}")
        hlo = self.hlo_proto(source)
        try:
            result = memory_viewer.convert(hlo, space, progress=progress)
        except ProfscopeError as e:
            # Tools know no files: name the one the module came from.
            e.file = e.file or self.logdir.display_path(source.hlo_file.path)
            e.message = f"{e.file} (module {source.module_name}): {e.message}"
            raise
        if params.get("view") == "page":
            result = memory_viewer.page_view(result)
        return result

    def memory_viewer_timeline_html(self, run: Run, params: dict) -> str:
        """XProf's allocation-timeline page of one module, drawn from the memory viewer
        payload (its own cache entry; tools/memory_viewer_timeline.py)."""
        params = {k: v for k, v in params.items() if k != "view"}
        result = self._payload(run, "memory_viewer", params)
        return memory_viewer_timeline.render(result, params.get("module_name") or "", _int_param(params, "memory_space", 0))

    def module_peaks(self, run: Run, memory_space: int = 0) -> list[dict]:
        """Every module of a run with its peak, largest first (a cheap summary each)."""
        rows = []
        for name in self.modules(run):
            source = self.module_source(run, name)
            if source.hlo_file is None:
                continue
            key = cache_key("module_peak", MODULE_LIST_VERSION, self.logdir.url, source.identity(), name, memory_space)
            try:
                row = self.cache.get_or_compute_json(
                    key, f"peak of {name}", lambda p, s=source: memory_viewer.summary(self.hlo_proto(s), memory_space),
                    file=self.logdir.display_path(source.hlo_file.path),
                )
                # moduleName is the name to ask for (module_name=), as in module_list;
                # the summary's own is the bare HLO module name.
                rows.append({**row, "moduleName": name, "hloModuleName": row["moduleName"]})
            except ProfscopeError as e:
                rows.append({"moduleName": name, "error": e.message})
        return sorted(rows, key=lambda r: -(r.get("peakHeapMib") or 0))

    def _text(self, info) -> str:
        return buffer_assignment_text.decode_dump_text(self.logdir.read_bytes(info.path), self.logdir.display_path(info.path))

    def _modules_of(self, info) -> list[str]:
        key = cache_key("module_list", MODULE_LIST_VERSION, self.logdir.url, info.identity())

        def compute(progress):
            progress.update(message=f"reading compiled modules of {info.path}")
            with self.logdir.open(info.path) as f:
                return [m.display_name for m in xplane.hlo_modules(f, self.logdir.display_path(info.path))]

        return self.cache.get_or_compute_json(key, f"module list of {info.path}", compute,
                                              file=self.logdir.display_path(info.path))

    # -- runtime memory (memory profile) -----------------------------------------------

    def xplane_memory_profile(self, run: Run, params: dict, progress) -> dict:
        """XProf's memory profile of one host: its allocator events over time."""
        hosts = run.hosts
        if not hosts:
            raise NotFound(f"run {run.name!r} has no xplane profile to read allocator events from")
        host = params.get("host") or hosts[0]
        info = run.xplane(host)
        if info is None:
            raise NotFound(f"run {run.name!r} has no host {host!r}; hosts: {', '.join(hosts)}")
        progress.update(message=f"reading allocator events of {info.name}")
        with self.logdir.open(info.path) as f:
            events = xplane_memory.read_allocator_events(f, self.logdir.display_path(info.path), progress=progress.part(0, 0.85))
        return memory_profile.convert(events, progress=progress.part(0.85, 1))

    def torch_memory_profile(self, run: Run, params: dict, progress) -> dict:
        """Memory over time from a PyTorch profiler trace (``[memory]`` events), with the
        ``export_memory_timeline`` categories when that JSON sits beside the trace."""
        trace = run.files_of(FileKind.CHROME_TRACE)[0]
        progress.update(message=f"reading memory events of {trace.name}")
        with self.logdir.open(trace.path) as f:
            mem = chrome_trace.memory_events(f, self.logdir.display_path(trace.path), progress=progress.part(0, 0.9))
        timeline = None
        for info in run.files_of(FileKind.MEMORY_TIMELINE):
            timeline = chrome_trace.parse_memory_timeline(self.logdir.read_bytes(info.path), self.logdir.display_path(info.path))
        return torch_memory.convert(mem, timeline, progress=progress.part(0.9, 1))

    def torch_memory_payload(self, run: Run) -> bytes:
        """profscope's own memory payload of a trace run (gzip JSON, cached; the dashboard's
        /api/memory_profile and OOM risk read it)."""
        if run.kind is not RunKind.CHROME_TRACE:
            raise NotFound(f"run {run.name!r} is a {run.kind.value}; /api/memory_profile reads PyTorch profiler traces")
        tool = registry.get("memory_profile")
        key = cache_key("torch_memory_profile", tool.version, self.logdir.url, [f.identity() for f in run.files])
        return self.cache.get_or_compute(key, f"{tool.title}: {run.name}", lambda p: self.torch_memory_profile(run, {}, p),
                                         file=self._run_file(run))

    def torch_memory_profile_xprof(self, run: Run, params: dict, progress) -> dict:
        """XProf's memory_profile schema of a trace run, from profscope's payload."""
        import gzip

        import orjson

        return torch_memory.xprof_memory_profile(orjson.loads(gzip.decompress(self.torch_memory_payload(run))))

    # -- PyTorch memory snapshots -------------------------------------------------------

    def snapshot(self, run: Run, progress=None) -> torch_snapshot_format.Snapshot:
        """The loaded model of a snapshot run: kept in memory for the next views (the
        last few), and its columns on local disk, so that opening it again, after a
        restart or once evicted, reads arrays instead of parsing the pickle (a minute
        for 1 GB)."""
        info = run.files[0]
        key = info.identity()
        with self._snapshots_lock:
            if key in self._snapshots:
                self._snapshots.move_to_end(key)
                return self._snapshots[key]
        parsed = []

        def build(job, folder):
            reporter = progress if progress is not None else job
            reporter.update(message=f"loading {info.name}")
            with self.logdir.open(info.path) as f:
                snap = torch_snapshot_format.load_snapshot(f, self.logdir.display_path(info.path), progress=reporter)
            reporter.update(message="saving its columns in the cache")
            torch_snapshot_format.save_model(snap, folder)
            parsed.append(snap)

        model_key = cache_key("snapshot_model", torch_snapshot_format.MODEL_FORMAT_VERSION, self.logdir.url, key)
        folder = self.cache.get_or_build_dir(model_key, f"Snapshot: loading {info.name}", build,
                                             file=self.logdir.display_path(info.path))
        if parsed:
            snap = parsed[0]
        else:
            if progress is not None:
                progress.update(message=f"reading the columns of {info.name}")
            try:
                snap = torch_snapshot_format.load_model(folder)
            except (OSError, ValueError, KeyError, TypeError):  # a damaged cache entry: parse again
                shutil.rmtree(folder, ignore_errors=True)
                return self.snapshot(run, progress)
        with self._snapshots_lock:
            self._snapshots[key] = snap
            while len(self._snapshots) > SNAPSHOTS_IN_MEMORY:
                self._snapshots.popitem(last=False)
        return snap

    def snapshot_device(self, run: Run, host: str | None) -> int:
        hosts = self.hosts(run)
        if not hosts:
            raise NotFound(f"{run.name}: the snapshot holds no device")
        host = host or hosts[0]
        if host not in hosts:
            raise NotFound(f"run {run.name!r} has no device {host!r}; devices: {', '.join(hosts)}")
        return int(host.split(":", 1)[1])

    def snapshot_memory_profile_xprof(self, run: Run, params: dict, progress) -> dict:
        """XProf's memory_profile schema of one device, keyed by its host name (cuda:N)."""
        device = self.snapshot_device(run, params.get("host"))
        return torch_snapshot.xprof_memory_profile(self.snapshot(run, progress), device, f"cuda:{device}")

    def snapshot_view(self, run: Run, view: str, params: dict) -> bytes:
        """One of the snapshot views (timeline window, state at an event, stacks, one
        stack's frames, compare), converted once per parameters and cached."""
        if run.kind is not RunKind.TORCH_SNAPSHOT:
            raise NotFound(f"run {run.name!r} is not a PyTorch memory snapshot")
        if view not in SNAPSHOT_VIEWS:
            raise NotFound(f"no snapshot view {view!r}; views: {', '.join(SNAPSHOT_VIEWS)}")
        inputs = [run.files[0].identity()]
        other = None
        if view == "compare":
            other = self.run(params.get("other"))
            if other.kind is not RunKind.TORCH_SNAPSHOT:
                raise BadRequest(f"'other' must be a snapshot run; {other.name!r} is a {other.kind.value}")
            inputs.append(other.files[0].identity())
        key = cache_key("snapshot", view, SNAPSHOT_VERSION, self.logdir.url, inputs, sorted(params.items()))

        def compute(progress):
            snap = self.snapshot(run, progress)
            device = self.snapshot_device(run, params.get("host"))
            if view == "overview":
                return torch_snapshot.overview(snap, device)
            if view == "timeline":
                return torch_snapshot.timeline(
                    snap, device, start=_opt_int(params, "start"), end=_opt_int(params, "end"),
                    x=params.get("x") or "index", max_points=_int_param(params, "max_points", 2000),
                    top=_int_param(params, "top", 200),
                )
            if view == "state":
                return torch_snapshot.state_at(snap, device, _opt_int(params, "event"))
            if view == "stack":
                return torch_snapshot.stack(snap, _int_param(params, "stack", 0), filtered=params.get("filtered") != "0")
            if view == "stacks":
                return torch_snapshot.stacks_at(snap, device, _opt_int(params, "event"))
            other_snap = self.snapshot(other, progress)
            other_device = self.snapshot_device(other, params.get("other_host"))
            return torch_snapshot.compare(snap, other_snap, device, other_device)

        return self.cache.get_or_compute(key, f"snapshot {view} of {run.name}", compute, file=self._run_file(run))

    # -- OOM risk ------------------------------------------------------------------------

    def oom_risk(self, run: Run, params: dict, progress) -> dict:
        """Peak vs capacity with contributors and findings (tools/oom_risk.py), from the
        memory viewer of one module (``module_name``, default the highest peak), the
        run's module peaks, the allocator events of an xplane and a snapshot's peak."""
        # Parameters first: a bad capacity is a 400 before any file is read.
        requested = oom_risk.parse_capacity(params.get("capacity_bytes"), params.get("device_memory"))
        thresholds = oom_risk.parse_thresholds(params.get("threshold_medium"), params.get("threshold_high"))
        host = params.get("host")
        if run.kind is RunKind.PROFILE and not host and len(run.hosts) > 1:
            return self._oom_risk_every_host(run, params, progress)
        compiled = allocator = snap_ev = trace_ev = module_choice = None
        modules: list[dict] = []
        devices: list[dict] = []
        trace_devices: list[dict] = []
        if run.kind is RunKind.TORCH_SNAPSHOT:
            snap_ev = self._oom_snapshot_evidence(run, host, progress)
        elif run.kind is RunKind.CHROME_TRACE:
            import gzip

            import orjson

            trace_ev = oom_risk.torch_trace_evidence(orjson.loads(gzip.decompress(self.torch_memory_payload(run))))
            if trace_ev is None:
                raise NotFound(f"run {run.name!r}: the trace has no [memory] events (profile_memory=True) to assess")
            trace_devices = self.trace_device_properties(run)
        else:
            progress.update(0.0, "ranking the modules by peak")
            modules = self.module_peaks(run) if run.kind is RunKind.PROFILE or run.kind is RunKind.XLA_DUMP else []
            name = params.get("module_name")
            module_choice = {"rule": "requested (module_name)"} if name else None
            if not name:
                # The module that ran most (total time of its module events in the
                # profile: what the user means by "the step"), else the highest peak among
                # modules with a schedule (heap events): a module without one (jit_stage,
                # broadcast_in_dim) is a single copy or fill.
                times = self.module_run_times(run, host) if run.kind is RunKind.PROFILE and run.hosts else {}
                known = {m["moduleName"] for m in modules if not m.get("error")}
                ran = sorted((t["ps"], k) for k, t in times.items() if k in known and t["ps"] > 0)
                ranked = [m["moduleName"] for m in modules if not m.get("error") and m.get("heapEvents")]
                ranked += [m["moduleName"] for m in modules if not m.get("error") and not m.get("heapEvents")]
                if ran:
                    name = ran[-1][1]
                    module_choice = {"rule": "ran most in the profile", "ps": ran[-1][0], **times[name]}
                else:
                    name = ranked[0] if ranked else (self.modules(run) or [None])[0]
                    module_choice = {"rule": "highest compiled peak (no module events in the profile)"}
            if name:
                mv = self._payload(run, "memory_viewer", {"module_name": name, **({"host": host} if host else {})})
                if mv.get("textOnly") and not mv.get("liveRange"):
                    mv = {**mv, "liveRange": self._live_range_beside(run, (mv.get("sources") or {}).get("bufferAssignment"))}
                compiled = oom_risk.compiled_evidence(mv, name)
            if run.kind is RunKind.PROFILE and run.hosts:
                progress.update(0.6, "reading allocator events")
                mp = self._payload(run, "memory_profile", {"host": host} if host else {})
                allocator = oom_risk.allocator_evidence(mp, params.get("memory_id"))
                devices = self.device_capabilities(run, host)
            if compiled is None and allocator is None:
                raise NotFound(f"run {run.name!r} has neither HLO modules nor allocator events to assess")
        return oom_risk.assess(compiled=compiled, allocator=allocator, snapshot=snap_ev, modules=modules,
                               requested=requested, device_name=params.get("device"), devices=devices,
                               torch_trace=trace_ev, trace_devices=trace_devices, thresholds=thresholds,
                               module_choice=module_choice)

    def _oom_risk_every_host(self, run: Run, params: dict, progress) -> dict:
        """A multi-host profile rated by its worst host: the first host alone can miss a
        larger peak or a leak on another one. The payload is the worst host's, with
        ``host`` (that host), ``hosts`` (every host's headline) and the other hosts'
        findings that the worst one lacks (each finding names its ``host``)."""
        rank = {"UNKNOWN": -1, **{t: i for i, t in enumerate(oom_risk.TIERS)}}
        per, failed = [], []
        for i, h in enumerate(run.hosts):
            progress.update(i / len(run.hosts), f"assessing host {h}")
            try:
                # Through the per-host cache entry: asking for one host later reads it back.
                per.append((h, self._payload(run, "oom_risk", {**params, "host": h})))
            except ProfscopeError as e:
                # One unreadable host must not hide the others; it is named in ``hosts``.
                failed.append({"host": h, "risk": "UNKNOWN", "problem": e.message, "findings": []})
        if not per:
            raise NotFound(f"run {run.name!r}: no host could be assessed: "
                           + "; ".join(f"{f['host']}: {f['problem']}" for f in failed))
        worst_host, worst = max(per, key=lambda hp: (rank.get(hp[1]["risk"], -1), hp[1].get("utilization") or 0, hp[1]["peakBytes"]))
        out = dict(worst)
        out["host"] = worst_host
        out["hosts"] = [{"host": h, **{k: p.get(k) for k in ("risk", "reason", "peakBytes", "peakSource", "capacityBytes",
                                                             "capacitySource", "utilization", "headroomBytes")},
                         "findings": [f["id"] for f in p["findings"]]} for h, p in per] + failed
        seen = {f["id"] for f in worst["findings"]}
        out["findings"] = [{**f, "host": worst_host} for f in worst["findings"]]
        for h, p in per:
            for f in p["findings"]:
                if f["id"] not in seen:
                    seen.add(f["id"])
                    out["findings"].append({**f, "host": h})
        return out

    def _payload(self, run: Run, tool_name: str, params: dict) -> dict:
        """Another tool's payload through that tool's own cache entry, so that a new
        capacity or threshold re-assesses without reading the files again."""
        import gzip

        import orjson

        return orjson.loads(gzip.decompress(self.tool_data(run, registry.get(tool_name), params)))

    def device_capabilities(self, run: Run, host: str | None = None) -> list[dict]:
        """The device planes' capabilities (memory size, name) of one host's xplane."""
        info = run.xplane(host or run.hosts[0])
        if info is None:
            raise NotFound(f"run {run.name!r} has no host {host!r}; hosts: {', '.join(run.hosts)}")
        key = cache_key("device_caps", MODULE_LIST_VERSION, self.logdir.url, info.identity())

        def compute(progress):
            progress.update(message=f"reading device planes of {info.name}")
            with self.logdir.open(info.path) as f:
                return xplane_devices.device_capabilities(f, self.logdir.display_path(info.path))

        return self.cache.get_or_compute_json(key, f"devices of {info.path}", compute,
                                              file=self.logdir.display_path(info.path))

    def _live_range_beside(self, run: Run, buffer_assignment: str | None) -> dict | None:
        """XLA's ``*-live-range.txt`` next to a module's ``*-buffer-assignment.txt`` (newer
        XLA writes HloLiveRange there, formats/live_range_text.py), or None."""
        suffix = "-buffer-assignment.txt"
        info = next((f for f in run.files if buffer_assignment and f.name == buffer_assignment), None)
        if info is None or not info.path.endswith(suffix):
            return None
        rel = info.path[: -len(suffix)] + "-live-range.txt"
        if self.logdir.files().get(rel) is None:
            return None
        return live_range_text.parse_live_range(self.logdir.read_bytes(rel).decode("utf-8", "replace"),
                                                self.logdir.display_path(rel))

    def module_run_times(self, run: Run, host: str | None = None) -> dict[str, dict]:
        """Total time of each XLA module's events in one host's xplane
        (formats/xplane_module_time.py), for the OOM-risk default module."""
        info = run.xplane(host or run.hosts[0])
        if info is None:
            return {}
        key = cache_key("module_run_times", 1, self.logdir.url, info.identity())

        def compute(progress):
            progress.update(message=f"timing the modules of {info.name}")
            with self.logdir.open(info.path) as f:
                return xplane_module_time.module_run_times(f, self.logdir.display_path(info.path))

        return self.cache.get_or_compute_json(key, f"module times of {info.path}", compute,
                                              file=self.logdir.display_path(info.path))

    def trace_device_properties(self, run: Run) -> list[dict]:
        """A PyTorch trace's ``deviceProperties`` (kineto writes ``id``, ``name``,
        ``totalGlobalMem``, ... per GPU as a top-level key), for the OOM-risk capacity."""
        trace = run.files_of(FileKind.CHROME_TRACE)[0]
        key = cache_key("trace_device_properties", 1, self.logdir.url, trace.identity())

        def compute(progress):
            progress.update(message=f"reading deviceProperties of {trace.name}")
            meta: dict = {}
            with self.logdir.open(trace.path) as f:
                for _ in chrome_trace.iter_events(f, self.logdir.display_path(trace.path), meta):
                    pass
            props = meta.get("deviceProperties")
            return [d for d in props if isinstance(d, dict)] if isinstance(props, list) else []

        return self.cache.get_or_compute_json(key, f"deviceProperties of {trace.path}", compute,
                                              file=self.logdir.display_path(trace.path))

    def _oom_snapshot_evidence(self, run: Run, host: str | None, progress) -> dict:
        snap = self.snapshot(run, progress)
        device = self.snapshot_device(run, host)
        ov = torch_snapshot.overview(snap, device)
        event = (ov["summary"].get("peak") or {}).get("event")
        state = torch_snapshot.state_at(snap, device, event, max_blocks=OOM_MAX_BLOCKS)
        groups: dict[int, dict] = {}
        for seg in state["segments"]:
            for b in seg["blocks"]:
                if b["state"].startswith("active"):
                    g = groups.setdefault(b["stackId"], {"stackId": b["stackId"], "bytes": 0, "count": 0})
                    g["bytes"] += b["size"]
                    g["count"] += 1
        ranked = sorted(groups.values(), key=lambda g: -g["bytes"])
        for g in ranked[:OOM_MAX_STACKS]:  # frames for the largest stacks; the rest stay "unknown"
            g["frames"] = torch_snapshot.stack(snap, g["stackId"])["frames"] if g["stackId"] >= 0 else []
        return oom_risk.snapshot_evidence(ov, state["totals"], ranked, f"cuda:{device}")

    # -- trace viewer --------------------------------------------------------------------

    def trace_sources(self, run: Run) -> list[tuple[str, FileInfo]]:
        """(host, file) pairs a run's timeline is made of: one xplane per host, or, for
        sessions holding only ``*.trace.json[.gz]`` and for Chrome-trace runs, the traces."""
        if run.kind is RunKind.PROFILE and run.hosts:
            return [(h, run.xplane(h)) for h in run.hosts]
        traces = run.files_of(FileKind.CHROME_TRACE)
        return [(f.name, f) for f in traces]

    def trace_index(self, run: Run, host: str, info: FileInfo) -> trace_viewer.TraceIndex:
        """The on-disk index of one file, built once per file identity (pids are stored
        without XProf's host number, which depends on the hosts selected)."""
        key = cache_key("trace_index", trace_viewer.INDEX_VERSION, self.logdir.url, info.identity(), host)

        def build(progress, folder):
            path = self.logdir.display_path(info.path)
            progress.update(0.0, f"reading {info.name}")
            # events go to disk as they are decoded (bounded memory), then get sorted
            writer = trace_viewer.IndexWriter(folder)
            try:
                with self.logdir.open(info.path) as f:
                    if classify(info.name) is FileKind.XPLANE:
                        events = xplane_trace.read_trace(f, path, 0, host, progress=progress.part(0, 0.6), sink=writer)
                    else:
                        events = chrome_trace.trace_columns(f, path, progress=progress.part(0, 0.6), sink=writer)
            finally:
                writer.close()
            writer.finish(events, progress=progress.part(0.6, 1))

        folder = self.cache.get_or_build_dir(key, f"Trace viewer: indexing {info.name}", build,
                                             file=self.logdir.display_path(info.path))
        return self._trace_indexes.get(folder)

    def trace_view(self, run: Run, params) -> trace_viewer.TraceView:
        """The hosts selected by ``host=`` / ``hosts=a,b`` (default: the first), indexed."""
        if run.kind not in (RunKind.PROFILE, RunKind.CHROME_TRACE):
            raise NotFound(f"run {run.name!r} is a {run.kind.value}; the trace viewer reads profiles and Chrome traces")
        sources = self.trace_sources(run)
        if not sources:
            raise NotFound(f"run {run.name!r} has no xplane profile or Chrome trace to show")
        known = [h for h, _ in sources]
        wanted = params.get("hosts") or params.get("host")
        names = [h.strip() for h in wanted.split(",") if h.strip()] if wanted else [known[0]]
        chosen = []
        for name in dict.fromkeys(names):
            if name not in known:
                raise NotFound(f"run {run.name!r} has no host {name!r}; hosts: {', '.join(known)}")
            pos = known.index(name)
            info = sources[pos][1]
            ix = self.trace_index(run, name, info)
            # XProf numbers the selected hosts from 1: pid = 1000 * number + device id
            offset = 1000 * (len(chosen) + 1) if classify(info.name) is FileKind.XPLANE else 0
            chosen.append(trace_viewer.HostIndex(pos, name, ix, offset))
        return trace_viewer.TraceView(run.name, chosen)

    def trace_viewer_xprof(self, run: Run, params: dict, progress=None) -> dict:
        """XProf's trace_viewer@ JSON (served straight from the index by the data API)."""
        import orjson

        return orjson.loads(self.trace_xprof_json(run, params))

    def trace_xprof_json(self, run: Run, params) -> bytes:
        return b"".join(self.trace_xprof_stream(run, params))

    def trace_xprof_stream(self, run: Run, params):
        """XProf's trace_viewer@ JSON in pieces; parameters are checked (and the index
        built) when the first piece is asked for."""
        view = self.trace_view(run, params)
        return view.xprof_chunks(params.get("start_time_ms"), params.get("end_time_ms"), params.get("resolution"),
                                 params.get("event_name"), params.get("duration_ms"), params.get("unique_id"))

    # -- tool data -----------------------------------------------------------------------

    def tool_data(self, run: Run, tool: Tool, params: dict) -> bytes:
        """A tool's payload as stored gzip JSON bytes, converted once per input and params."""
        producer = self._producers[tool.name, run.kind]
        inputs = [f.identity() for f in run.files]
        key = cache_key(tool.name, tool.version, self.logdir.url, inputs, sorted(params.items()))
        label = f"{tool.title}: {params.get('module_name') or run.name}"
        return self.cache.get_or_compute(key, label, lambda progress: producer(run, params, progress),
                                         file=self._run_file(run))

    def _run_file(self, run: Run) -> str:
        """How errors name a run's input: its one file, else its folder."""
        if len(run.files) == 1:
            return self.logdir.display_path(run.files[0].path)
        return self.logdir.display_path(run.folder) if run.folder else self.logdir.url

    def tool(self, name: str | None, run: Run) -> Tool:
        if not name:  # XProf: 404 "No Data"
            raise NotFound("missing parameter 'tag' (the tool name)")
        tool = registry.get(name)
        if tool is None:
            known = ", ".join(t.name for t in registry.TOOLS)
            raise NotFound(f"unknown tool {name!r}; profscope has: {known}")
        if tool not in self.tools(run):
            raise NotFound(f"run {run.name!r} has no input for tool {tool.name!r}")
        if not self.can_serve(tool, run):
            raise NotFound(f"tool {tool.name!r} is not available in this version of profscope yet")
        return tool


@dataclass(frozen=True, slots=True)
class ModuleSource:
    module_name: str
    hlo_file: FileInfo | None  # an xplane (embedded=True) or a dump's *.hlo.pb
    buffer_assignment: FileInfo | None = None  # dump text files, used when there is no proto
    memory_usage_report: FileInfo | None = None
    embedded: bool = False

    def identity(self) -> str:
        return "|".join(f.identity() for f in (self.hlo_file, self.buffer_assignment) if f is not None)


def _opt_int(params: dict, name: str) -> int | None:
    return None if params.get(name) in (None, "") else _int_param(params, name, 0)


def _int_param(params: dict, name: str, default: int) -> int:
    value = params.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise BadRequest(f"parameter {name!r} must be an integer, not {value!r}") from None


def _inside(path: Path, root: Path) -> bool:
    path, root = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return path == root or root in path.parents
