"""The trace viewer's family: which files make a run's timeline, their on-disk indexes
(tools/trace_index.py) and the views over the selected hosts (tools/trace_viewer.py;
XProf's JSON: trace_xprof.py; the Chrome-trace export: trace_export.py). The xplane
reader's decoders of an event's arguments are handed to the indexes here, so the tools
import no format."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

from profscope.app import keys, lazy
from profscope.app.answer_cache import AnswerCache
from profscope.app.queries import StepsOpsQuery, TraceQuery, XprofTraceQuery
from profscope.app.profile_steps import ALL_HOSTS, HOST_STEPS_FILE, write_host_steps
from profscope.cache import worker as cache_worker
from profscope.errors import NotFound, ProfscopeError
from profscope.forksafe import renew_locks_after_fork
from profscope.model.catalog import Run, RunKind
from profscope.model.file_kinds import FileKind, classify
from profscope.storage import FileInfo

chrome_trace = lazy.module("profscope.formats.chrome_trace")
xplane_trace = lazy.module("profscope.formats.xplane_trace")
xplane_line_ranges = lazy.module("profscope.formats.xplane_line_ranges")
xplane_activity = lazy.module("profscope.formats.xplane_activity")
heap = lazy.module("profscope.model.heap")
host_activity = lazy.module("profscope.model.host_activity")  # numpy: only when a trace job is rolled up
trace_export = lazy.module("profscope.tools.trace_export")
trace_hosts_tool = lazy.module("profscope.tools.trace_hosts")
trace_index = lazy.module("profscope.tools.trace_index")
step_breakdown = lazy.module("profscope.tools.step_breakdown")
op_table = lazy.module("profscope.tools.op_table")
trace_viewer = lazy.module("profscope.tools.trace_viewer")
trace_visibility = lazy.module("profscope.tools.trace_visibility")
trace_xprof = lazy.module("profscope.tools.trace_xprof")

log = logging.getLogger("profscope.traces")


# XProf's trace viewer asks for ``hosts=none`` while its page has not selected a host yet
# (trace_viewer_index.js ``_updateHostsParamToBaseUrl``: an empty selection is sent as
# 'none'); that is the default host, unless a host is really named so.
NO_HOST_SELECTED = "none"

# XProf trace_viewer@ answers kept in memory: at 8000 px a filtered window is 2-5 MB of
# JSON (jax308's whole span 2.3 MB), so the last dozen or more; an unfiltered answer
# (below XProf's 500,000 events, or resolution 0) can be the whole trace: not kept past 16 MB.
XPROF_ANSWERS_BYTES = 64 << 20
XPROF_ANSWER_MAX_BYTES = 16 << 20


class Traces:
    """Part of :class:`~profscope.app.workspace.Workspace`: timelines."""

    def __init__(self):
        self._trace_indexes = None  # made on first use (it imports the index's numpy)
        self._trace_indexes_lock = threading.Lock()
        renew_locks_after_fork(self, "_trace_indexes_lock")
        # A DaskConversions (app/scale_out.py) when the server was started with --dask or
        # --dask-workers: indexes not built yet are then built on the cluster.
        self.scale_out = None
        # Where a big plane's events are decoded in ranges (formats/xplane_line_ranges.py
        # Ranges): on a Dask worker, the cluster (app/scale_out.py convert_host); else None.
        self.line_ranges = None
        # XProf's trace_viewer@ answers by window (app/answer_cache.py: why in memory)
        self._xprof_answers = AnswerCache(XPROF_ANSWERS_BYTES, XPROF_ANSWER_MAX_BYTES)
        # Whether a timeline's window has what the next requests read made in the
        # background (_prefetch_after); `profscope serve` turns it on unless --no-prefetch.
        self.prefetch = False
        self._prefetched: set[str] = set()  # the keys a prefetch has made or is making
        self._prefetch_lock = threading.Lock()
        renew_locks_after_fork(self, "_prefetch_lock")

    def _index_cache(self) -> trace_index.IndexCache:
        with self._trace_indexes_lock:
            if self._trace_indexes is None:
                # xplane_trace.plane_metadata / event_args decode an xplane index's event
                # args (the module is the trace_index.XEventDecoder)
                self._trace_indexes = trace_index.IndexCache(decoder=xplane_trace)
            return self._trace_indexes

    def _open_index(self, folder) -> trace_index.TraceIndex:
        return self._index_cache().get(folder)

    def trace_sources(self, run: Run) -> list[tuple[str, FileInfo]]:
        """(host, file) pairs a run's timeline is made of: one xplane per host, or, for
        sessions holding only ``*.trace.json[.gz]`` and for Chrome-trace runs, the traces."""
        if run.kind is RunKind.PROFILE and run.hosts:
            return [(h, run.xplane(h)) for h in run.hosts]
        if run.ranks:  # a distributed job: one trace per rank, named by its rank
            return [(rank, traces[0]) for rank, one in run.ranks.items() if (traces := one.files_of(FileKind.CHROME_TRACE))]
        traces = run.files_of(FileKind.CHROME_TRACE)
        return [(f.name, f) for f in traces]

    def _trace_index_key(self, host: str, info: FileInfo) -> str:
        return keys.derived(keys.TRACE_INDEX, self.logdir.url, info.identity(), host)

    def trace_index(self, run: Run, host: str, info: FileInfo, preview_resolution: int | None = None,
                    steps: bool = False, tiers: bool = False) -> trace_index.TraceIndex:
        """The on-disk index of one file, built once per file identity (pids are stored
        without XProf's host number, which depends on the hosts selected).
        ``preview_resolution``: a build started here first publishes the whole-trace
        window at that resolution (:meth:`trace_preview`). ``steps``: a build started
        here also groups a CPU-only xplane's host steps into the folder (Steps & ops
        asks it; app/profile_steps.py reads them there); a timeline's build does not.
        ``tiers``: a build started here also makes the resolution tiers, which only the
        page's windows read (:meth:`trace_window` asks them); every other reader (XProf's
        windows, which read its zoom levels, details, search, links) reads the columns, and
        a window of an index built without them has them made once (:meth:`_window_tiers`).
        jax308's tiers are 0.8-1.1 of the build's 3 CPU s (docs/performance.md)."""
        key = self._trace_index_key(host, info)
        scale_out = self.scale_out
        if scale_out is not None and scale_out.usable() and not self.cache.is_built(key):
            # The run's hosts go to the Dask cluster, this one first; once it is built,
            # get_or_build_dir below finds the folder. A failed task leaves the build
            # (or the input's remembered error) to that path, as without Dask.
            scale_out.convert(self, run, host, key)
        preview = (self.cache.preview_dir(key), preview_resolution) if preview_resolution else None

        def build(progress, folder):
            path = self.logdir.display_path(info.path)
            progress.update(0.0, f"reading {info.name}")
            # events go to disk as they are decoded (bounded memory), then get sorted; an
            # xplane's own bytes are read back from the file for details, not copied
            source = self.logdir.local_file(info.path) if classify(info.name) is FileKind.XPLANE else None
            writer = trace_index.IndexWriter(folder, source=source)
            # a conversion worker (a process that ends after this) keeps what the decoder
            # frees for its next chunk instead of asking the kernel for fresh pages each
            # time; not when the read also groups the host steps, whose peak would grow
            kept = heap.freed_memory_kept() if cache_worker.in_worker() and not steps else contextlib.nullcontext()
            try:
                with kept, self.logdir.open(info.path) as f:
                    if classify(info.name) is FileKind.XPLANE:
                        # each range also sorts its own rows as the index will (issue 40's
                        # third pass: off the merging task's serial path)
                        split = xplane_line_ranges.Split(self.line_ranges, source, str(Path(folder) / "ranges"),
                                                         trace_index.sorted_run) \
                            if self.line_ranges is not None and source else None
                        # and the build's tiers go to another worker once its plane was cut
                        writer.elsewhere = getattr(self.line_ranges, "submit", None) if split is not None else None
                        events = xplane_trace.read_trace(f, path, 0, host, progress=progress.part(0, 0.6), sink=writer,
                                                         steps=steps, split=split)
                    else:
                        events = chrome_trace.trace_columns(f, path, progress=progress.part(0, 0.6), sink=writer)
            finally:
                writer.close()
            # only the page's windows read the tiers: for any other reader they wait for
            # a window (_window_tiers)
            writer.finish(events, progress=progress.part(0.6, 1), preview=preview, windows=tiers and not steps)
            write_host_steps(folder, events, key)  # a CPU-only xplane's steps (app/profile_steps.py)

        folder = self.cache.get_or_build_dir(key, f"Trace viewer: indexing {info.name}", build,
                                             file=self.logdir.display_path(info.path))
        return self._open_index(folder)

    def trace_view(self, run: Run, query: TraceQuery | XprofTraceQuery,
                   preview_resolution: int | None = None, tiers: bool = False) -> trace_viewer.TraceView:
        """The hosts selected by ``host=`` / ``hosts=a,b`` (default: the first), indexed
        (``preview_resolution``, ``tiers``: see :meth:`trace_index`)."""
        chosen = self._trace_hosts(run, query)
        self._index_cache().hold(len(chosen))  # a merged view's hosts stay open between its windows
        hosts = []
        for name, info, pos in chosen:
            ix = self.trace_index(run, name, info, preview_resolution if len(chosen) == 1 else None, tiers=tiers)
            # XProf numbers the selected hosts from 1: pid = 1000 * number + device id
            offset = 1000 * (len(hosts) + 1) if classify(info.name) is FileKind.XPLANE else 0
            hosts.append(trace_viewer.HostIndex(pos, name, ix, offset))
        return trace_viewer.TraceView(run.name, hosts)

    def _trace_hosts(self, run: Run, query: TraceQuery | XprofTraceQuery) -> list[tuple[str, FileInfo, int]]:
        """(host, file, position) of each host ``host=`` / ``hosts=a,b`` selects."""
        if run.kind not in (RunKind.PROFILE, RunKind.CHROME_TRACE):
            raise NotFound(f"run {run.name!r} is a {run.kind.value}; the trace viewer reads profiles and Chrome traces")
        sources = self.trace_sources(run)
        if not sources:
            raise NotFound(f"run {run.name!r} has no xplane profile or Chrome trace to show")
        known = [h for h, _ in sources]
        wanted = query.hosts or query.host
        names = [h.strip() for h in wanted.split(",") if h.strip()] if wanted else [known[0]]
        if names == [NO_HOST_SELECTED] and NO_HOST_SELECTED not in known:
            names = [known[0]]
        chosen = []
        for name in dict.fromkeys(names):
            if name not in known:
                raise NotFound(f"run {run.name!r} has no host {name!r}; hosts: {', '.join(known)}")
            pos = known.index(name)
            chosen.append((name, sources[pos][1], pos))
        return chosen

    def trace_window(self, run: Run, query: TraceQuery) -> dict:
        """What the timeline page draws of ``start_ms``..``end_ms`` at ``resolution``. The
        whole trace's window (a page's first) has a build publish its preview on the way."""
        return self._trace_window(run, query, trace_viewer.TraceView.window)

    def trace_window_json(self, run: Run, query: TraceQuery) -> bytes:
        """:meth:`trace_window` as the JSON the page gets (``TraceView.window_json``:
        the same bytes, encoded from the columns' arrays)."""
        return self._trace_window(run, query, trace_viewer.TraceView.window_json)

    def trace_window_columns(self, run: Run, query: TraceQuery) -> bytes:
        """:meth:`trace_window` as the page reads it: its columns as raw arrays after a
        JSON header (``TraceView.window_columns``; ``/api/trace/window?format=columns``)."""
        return self._trace_window(run, query, trace_viewer.TraceView.window_columns)

    def _trace_window(self, run: Run, query: TraceQuery, answer):
        whole = query.start_ms is None and query.end_ms is None
        res = query.resolution or trace_viewer.DEFAULT_RESOLUTION
        view = self.trace_view(run, query, preview_resolution=res if whole else None, tiers=True)
        self._window_tiers(run, view)
        out = answer(view, query.start_ms, query.end_ms, query.resolution)
        self._prefetch_after(run, view)
        return out

    def _prefetch_after(self, run: Run, view: trace_viewer.TraceView, xprof: bool = False) -> None:
        """Once a window of ``view`` has answered, make in the background what its next
        requests read (:meth:`_prefetch`): the steps Steps & ops reads (:meth:`_steps_jobs`)
        and, after an XProf answer, a big trace's deeper zoom levels
        (:meth:`_zoom_level_jobs`). One thread, the jobs in turn: two would each find the
        other's conversion running and leave their spare slot unused."""
        if not self.prefetch or not self.cache.workers.enabled:  # in-process: no spare worker
            return
        self._prefetch_in_background(self._steps_jobs(run, view) + (self._zoom_level_jobs(run, view) if xprof else []))

    def _steps_jobs(self, run: Run, view: trace_viewer.TraceView) -> list:
        """The steps Steps & ops reads from each selected xplane (app/profile_steps.py
        ``xplane_steps``). An index the timeline built holds display rows, not the host
        plane's context stats XProf's grouping reads, so without this the first Steps &
        ops answer after a trace link read the file again (jax308: 2.1-2.3 CPU s; with
        the steps made here, 0.5-0.6 s: docs/performance.md). An index Steps & ops built
        holds its host steps already."""
        sources, todo = None, []
        for h in view.hosts:
            if (Path(h.index.folder) / HOST_STEPS_FILE).is_file():
                continue
            sources = sources or self.trace_sources(run)
            info = sources[h.position][1]
            if classify(info.name) is not FileKind.XPLANE:
                continue
            key = self.derived_key(keys.XPLANE_STEPS, info)
            todo.append((key, f"the steps of {run.name} {h.host}",
                         lambda host=h.host: self.xplane_steps(run, host, load=False)))
        return todo

    def _zoom_level_jobs(self, run: Run, view: trace_viewer.TraceView) -> list:
        """XProf's zoom levels down to the last, for each selected host of more than
        ``XPROF_LEVELS_MAX`` events, from the deepest level kept. Past that size a window
        makes only the levels it loads (:meth:`_xprof_zoom_levels`), so each deeper zoom
        waited for its own (jax308: 0.4-1.2 s each for levels 5 to 10); all of them after
        the first window's: 1.2 CPU s, once."""
        last = trace_visibility.N_LEVELS - 1
        sources, todo = None, []
        for h in view.hosts:
            if h.index.n <= trace_visibility.XPROF_LEVELS_MAX or not h.index.zoom_levels_missing(last):
                continue
            sources = sources or self.trace_sources(run)
            info = sources[h.position][1]
            index_key = self._trace_index_key(h.host, info)
            key = keys.derived(keys.TRACE_ZOOM_LEVELS, self.logdir.url, index_key, last)
            todo.append((key, f"XProf's zoom levels of {run.name} {h.host}",
                         lambda ix=h.index, info=info, key=key, index_key=index_key:
                             self._zoom_levels_dir(ix, info, key, last, self._kept_zoom_levels(index_key)[0])))
        return todo

    def _prefetch_in_background(self, todo: list[tuple[str, str, Callable[[], object]]]) -> None:
        """Run ``todo``'s ``(cache key, what, make)`` jobs not made nor being made, in
        one background thread (:meth:`_prefetch`)."""
        with self._prefetch_lock:
            todo = [job for job in todo if job[0] not in self._prefetched and not self.cache.has(job[0])]
            self._prefetched.update(key for key, _what, _make in todo)
        if todo:
            threading.Thread(target=self._prefetch, args=(todo,), name="profscope-prefetch", daemon=True).start()

    def _prefetch(self, todo: list[tuple[str, str, Callable[[], object]]]) -> None:
        """Each job in turn, in one spare worker slot, while no other conversion runs or
        waits (``WorkerPool.spare_slot``: a prefetch never queues a request's
        conversion); with none spare, nothing (a later window tries again)."""
        with self.cache.workers.spare_slot() as free:
            if free:
                for _key, what, make in todo:
                    try:
                        make()
                    except ProfscopeError as e:  # the file's error is remembered for the request that asks
                        log.info("prefetching %s: %s", what, e.message)
                    except Exception:  # noqa: BLE001 - a background read never takes the server down
                        log.exception("prefetching %s failed", what)
                return
        with self._prefetch_lock:
            self._prefetched.difference_update(key for key, _what, _make in todo)

    def _window_tiers(self, run: Run, view: trace_viewer.TraceView) -> None:
        """The resolution tiers of every selected host's index built without them (for
        another reader: ``finish(windows=False)``, :meth:`trace_index`), made once from its columns in a conversion worker
        and kept in the cache under the index's key, as XProf's zoom levels are."""
        sources = None
        for h in view.hosts:
            ix = h.index
            if not ix.tiers_missing():
                continue
            sources = sources or self.trace_sources(run)
            info = sources[h.position][1]
            key = keys.derived(keys.TRACE_TIERS, self.logdir.url, self._trace_index_key(h.host, info))
            folder = self.cache.get_or_build_dir(
                key, f"Trace viewer: resolution tiers of {info.name}",
                lambda progress, out, src=ix.folder: trace_index.write_tiers(src, out, progress),
                file=self.logdir.display_path(info.path))
            ix.use_tiers(folder)

    def trace_event(self, run: Run, query: TraceQuery) -> dict:
        """The details of the event ``id``."""
        return self.trace_view(run, query).event(query.id)

    def trace_search(self, run: Run, query: TraceQuery) -> dict:
        """The events whose name holds ``q``: ``limit`` from the ``offset``-th, and the total."""
        return self.trace_view(run, query).search(query.q, query.limit, query.offset)

    def trace_summary(self, run: Run, query: TraceQuery) -> dict:
        """Every slice name in ``start_ms``..``end_ms``: occurrences, wall and self time."""
        return self.trace_view(run, query).summary(query.start_ms, query.end_ms)

    def steps_ops(self, run: Run, query: TraceQuery) -> dict:
        """The step-time breakdown and ranked ops of one host (``GET /api/steps_ops``): a
        PyTorch trace's from the host's trace index (built once, shared with the timeline;
        tools/step_breakdown.py), an xplane's from its steps (app/profile_steps.py).
        ``host=ALL_HOSTS`` on a profile: every host's steps and the straggler host."""
        if run.kind is RunKind.PROFILE and query.host == ALL_HOSTS and ALL_HOSTS not in run.hosts:
            # XProf's merged host: each host's steps side by side and the straggler host
            # (the ops table is per host)
            return {"run": run.name, "file": None, **self.xplane_steps_ops(run, ALL_HOSTS), "ops": []}
        name, info, _pos = self._trace_hosts(run, query)[0]
        # the build groups a CPU-only profile's steps from its own decode (no second read)
        ix = self.trace_index(run, name, info, steps=True)
        head = {"run": run.name, "host": name, "file": self.logdir.display_path(info.path)}
        if classify(info.name) is FileKind.XPLANE:
            # XProf's steps or the module's runs, device time by category (app/profile_steps.py)
            out = {**head, **self.xplane_steps_ops(run, name)}
        else:
            out = {**head, "source": "chrome_trace", **step_breakdown.breakdown(ix)}
        return {**out, **self._ops_table(run, name, info, ix, query, out.get("steps") or [])}

    def steps_ops_tool(self, run: Run, query: StepsOpsQuery, progress=None) -> dict:
        """The ``steps_ops`` tool's payload (the Steps & ops page): :meth:`steps_ops`."""
        return self.steps_ops(run, TraceQuery(host=query.host, within_steps=query.within_steps, step=query.step))

    def _ops_table(self, run: Run, host: str, info: FileInfo, ix, query, steps: list[dict]) -> dict:
        """``ops`` and ``ops_scope`` of /api/steps_ops (tools/op_table.py): an xplane's from
        the cached op metrics (XProf's hlo_stats numbers), its device peaks, its ``steps``
        (the breakdown's) and the trace index; a Chrome trace's from its index."""
        within, step = getattr(query, "within_steps", None), getattr(query, "step", None)
        if classify(info.name) is not FileKind.XPLANE:
            return op_table.chrome_trace_ops(ix, host, within, step)
        db = self.op_metrics(run, host)
        caps = next((c for c in self.device_capabilities(run, host) if "peak_teraflops_per_second" in c), {})
        tflops, gbps = caps.get("peak_teraflops_per_second"), caps.get("peak_hbm_bw_gigabytes_per_second")
        peaks = {"peak_flops_per_s": tflops * 1e12 if tflops else None, "peak_bytes_per_s": gbps * 1e9 if gbps else None}
        ops = [{k: v for k, v in dataclasses.asdict(m).items() if k != "children"} for m in db.sorted()]
        return op_table.xplane_ops(ix, ops, db.total_time_ps, db.program_names, host, peaks, within, step, steps)

    def trace_hosts(self, run: Run) -> dict:
        """Every host's steps, device busy and idle time side by side, slowest first, with
        the roll-up across hosts (tools/trace_hosts.py): ``GET /api/trace_hosts``. Each
        host's row is read from its xplane by one pass that decodes three stats
        (formats/xplane_activity.py), not from its trace index, and kept under
        ``keys.TRACE_HOST`` and the file's identity; a host whose file cannot be read is
        a row with its error (remembered as the cache remembers a failure), the others
        are still shown."""
        if run.kind is RunKind.CHROME_TRACE and run.ranks:
            return self._rank_trace_hosts(run)
        if run.kind is not RunKind.PROFILE or not run.hosts:
            raise NotFound(f"run {run.name!r} is a {run.kind.value}; /api/trace_hosts reads the hosts of a profile run "
                           "or the ranks of a distributed job of traces")
        files = [(h, run.xplane(h)) for h in run.hosts]
        missing = [(h, i) for h, i in files if i is not None and self.cache.get(self._trace_host_key(i)) is None]
        scale_out = self.scale_out
        if scale_out is not None and scale_out.usable() and len(missing) > 1:
            # a task per host on the Dask cluster (app/scale_out.py run_host_jobs): the
            # workers read the xplanes, the server only the rows they keep in the cache
            scale_out.run_host_jobs(self, run, [(self._trace_host_key(i), ("trace_host", h)) for h, i in missing],
                                    "steps and device time")
        else:
            self._trace_host_rows_at_once(run, missing)
        rows = []
        for host, info in files:
            try:
                if info is None:
                    raise NotFound(f"host {host!r} of run {run.name!r} has no xplane file")
                rows.append(self._trace_host_row(host, info))
            except ProfscopeError as e:
                rows.append(trace_hosts_tool.error_row(host, e.message, e.file))
        out = trace_hosts_tool.trace_hosts(rows)
        out["run"] = run.name
        return out

    def _rank_trace_hosts(self, run: Run) -> dict:
        """:meth:`trace_hosts` of a distributed job of PyTorch traces: each rank's row from
        that rank's own Steps & ops answer (its ``ProfilerStep#N`` steps, the same numbers
        ``host=<rank>`` shows), so ranks are compared by their median step time. A CPU
        trace has no device ops; a GPU trace's busy/idle per device is on its Steps & ops
        page, not in this row (``deviceSource`` "none")."""
        rows = []
        for rank, one in run.ranks.items():
            try:
                rows.append(trace_hosts_tool.host_summary(rank, _steps_activity(self.steps_ops(one, TraceQuery()))))
            except ProfscopeError as e:
                rows.append(trace_hosts_tool.error_row(rank, e.message, e.file))
        out = trace_hosts_tool.trace_hosts(rows)
        out["run"] = run.name
        return out

    def _trace_host_key(self, info: FileInfo) -> str:
        return self.derived_key(keys.TRACE_HOST, info)

    def _trace_host_row(self, host: str, info: FileInfo) -> dict:
        return self.derived_json(
            keys.TRACE_HOST, info, "reading the steps and device ops of", "steps and device time",
            lambda f, path: trace_hosts_tool.host_summary(host, xplane_activity.host_activity(f, path, host)))

    def _trace_host_rows_at_once(self, run: Run, missing: list[tuple[str, FileInfo]]) -> None:
        """Make the rows not cached yet in a few conversion workers, each reading a batch
        of hosts (each row still kept under its own key, a host's bad file still its own
        remembered error): one host's pass takes milliseconds, a worker's fork far more
        (a worker per host: 3.2 s for 16 pod hosts here, against 0.15 s in one). The
        batches, balanced by file size, use all the worker slots but one, which stays free
        for the host a user opens meanwhile. Should a worker die (a file that crashes the
        reader or exceeds the memory limit), the hosts it had not done are made one worker
        each by the caller, so only the culprit's row is an error."""
        if len(missing) < 2:
            return
        slots = getattr(getattr(self.cache, "workers", None), "concurrency", 1) or 1
        batches: list[list[tuple[str, FileInfo]]] = [[] for _ in range(max(1, min(len(missing) // 2, slots - 1)))]
        load = [0] * len(batches)
        for item in sorted(missing, key=lambda m: -(m[1].size or 0)):  # largest first, to the lightest batch
            k = load.index(min(load))
            batches[k].append(item)
            load[k] += item[1].size or 0

        def one(batch):
            def compute(progress):
                done = 0
                for k, (host, info) in enumerate(batch):
                    progress.update(k / len(batch), f"reading the steps and device ops of {info.name}")
                    try:
                        self._trace_host_row(host, info)  # runs inline in this worker
                        done += 1
                    except ProfscopeError:
                        pass  # remembered under the host's own key; its row says it
                return {"hosts": len(batch), "read": done}

            key = keys.derived(keys.TRACE_HOSTS_BATCH, self.logdir.url, [i.identity() for _, i in batch])
            try:
                self.cache.get_or_compute(key, f"steps and device time of {len(batch)} hosts of {run.name}", compute)
            except ProfscopeError:
                pass  # the worker died: the caller makes the rest one worker each

        if len(batches) == 1:
            one(batches[0])
            return
        with ThreadPoolExecutor(len(batches), thread_name_prefix="trace-hosts") as pool:
            list(pool.map(one, batches))

    def trace_export(self, run: Run, query: TraceQuery) -> Iterator[bytes]:
        """The window ``start_ms``..``end_ms`` as Chrome-trace JSON, in pieces; the window
        is checked when the first piece is asked for."""
        return trace_export.export(self.trace_view(run, query), query.start_ms, query.end_ms)

    def trace_viewer_xprof(self, run: Run, query: XprofTraceQuery, progress=None) -> dict:
        """XProf's trace_viewer@ JSON (served straight from the index by the data API)."""
        return orjson.loads(self.trace_xprof_json(run, query))

    def trace_xprof_json(self, run: Run, query: XprofTraceQuery) -> bytes:
        return b"".join(self.trace_xprof_stream(run, query))

    def trace_xprof_stream(self, run: Run, query: XprofTraceQuery) -> Iterator[bytes]:
        """XProf's trace_viewer@ JSON in pieces; what needs the data is checked (and the
        index built) before the first piece is returned. A window asked again is answered
        from memory (``_xprof_answers``), keyed by the window as XProf normalises it (ps
        from the trace's origin, clamped to its span) and the resolution, so the same
        window asked in other words (absent bounds, bounds past the trace) is one entry."""
        view = self.trace_view(run, query)
        if query.event_name:
            return trace_xprof.xprof_chunks(view, query.start_time_ms, query.end_time_ms, query.resolution,
                                            query.event_name, query.duration_ms, query.unique_id)
        s, e, res = trace_xprof.xprof_window(view, query.start_time_ms, query.end_time_ms, query.resolution)
        key = (tuple((str(h.index.folder), h.position, h.pid_offset) for h in view.hosts), s, e, res)
        kept = self._xprof_answers.get(key)
        if kept is not None:
            return iter((kept,))
        self._xprof_zoom_levels(run, view, s, e, res)
        self._prefetch_after(run, view, xprof=True)
        return self._xprof_answers.keeping(key, trace_xprof.xprof_chunks(
            view, query.start_time_ms, query.end_time_ms, query.resolution))

    def _xprof_zoom_levels(self, run: Run, view: trace_viewer.TraceView, s: int, e: int, res: int) -> None:
        """When XProf's filter thins this answer: XProf's zoom levels of every selected
        host's index that lacks them, made in a conversion worker and kept in the cache
        under the index's key, then handed to the index. They are a pass per level over
        the whole trace; made in the server's own process, a 100 KB trace of nested
        events held it for minutes (issue 32). What runs here is the window's own pass,
        over the events of the levels the window loads.

        Up to ``XPROF_LEVELS_MAX`` events every level is made at once; past it as deep
        as this window loads and ``LEVELS_AHEAD`` deeper (``levels_made``; jax308's
        13.6 M events: levels 0-5, its whole span at 8000 px loads 0-3, a 1 % window 0-5;
        0.92 CPU s, all 13 1.5 s), kept per depth, and a deeper window resumes from the
        deepest kept."""
        if not trace_visibility.filters(sum(h.index.n for h in view.hosts), res):
            return
        r = trace_visibility.resolution_ps(max(0, e - s), res)
        if not r:
            return
        upto = trace_visibility.levels_needed(r)
        sources = self.trace_sources(run)
        for h in view.hosts:
            ix = h.index
            if not ix.zoom_levels_missing(upto):
                continue
            info = sources[h.position][1]
            index_key = self._trace_index_key(h.host, info)
            if ix.n <= trace_visibility.XPROF_LEVELS_MAX:
                depth, resume = trace_visibility.N_LEVELS - 1, None
                key = keys.derived(keys.TRACE_ZOOM_LEVELS, self.logdir.url, index_key)
            else:
                resume, deeper = self._kept_zoom_levels(index_key, upto)
                if deeper is not None:
                    ix.use_zoom_levels(deeper)
                    continue
                depth = trace_visibility.levels_made(upto)
                key = keys.derived(keys.TRACE_ZOOM_LEVELS, self.logdir.url, index_key, depth)
            self._zoom_levels_dir(ix, info, key, depth, resume)

    def _kept_zoom_levels(self, index_key: str, upto: int | None = None):
        """(the deepest levels kept above ``upto``, the shallowest kept at or past it) of
        a big trace's index, folders or None: zoom levels made as deep as windows asked.
        ``upto`` defaults to the last level."""
        if upto is None:
            upto = trace_visibility.N_LEVELS - 1
        kept = {k: self.cache.built_dir(keys.derived(keys.TRACE_ZOOM_LEVELS, self.logdir.url, index_key, k))
                for k in range(trace_visibility.N_LEVELS)}
        deeper = next((kept[k] for k in range(upto, trace_visibility.N_LEVELS) if kept[k] is not None), None)
        resume = next((kept[k] for k in range(upto - 1, -1, -1) if kept[k] is not None), None)
        return resume, deeper

    def _zoom_levels_dir(self, ix, info: FileInfo, key: str, depth: int, resume) -> None:
        """XProf's zoom levels of ``ix`` down to ``depth`` (from the levels in ``resume``),
        made in a conversion worker, kept under ``key`` and handed to the index."""
        folder = self.cache.get_or_build_dir(
            key, f"Trace viewer: XProf's zoom levels of {info.name}",
            lambda progress, out, src=ix.folder, d=depth, prev=resume:
                trace_index.write_zoom_levels(src, out, progress, d, prev),
            file=self.logdir.display_path(info.path))
        ix.use_zoom_levels(folder)


def _steps_activity(steps_ops: dict) -> host_activity.HostActivity:
    """A PyTorch trace's Steps & ops answer as the :class:`HostActivity` that
    tools/trace_hosts.py compares: its steps (``start_us``/``step_time_us`` from the
    trace's first event, tools/step_breakdown.py), the span from that first event to the
    last step's end, no device ops."""
    steps = [host_activity.StepMarker(f"ProfilerStep#{s['step']}", int(s["step"]) if str(s["step"]).isdigit() else None,
                        round(s["start_us"] * 1e6), round(s["step_time_us"] * 1e6), "ProfilerStep")
             for s in steps_ops.get("steps") or []]
    end = max((m.start_ps + m.dur_ps for m in steps), default=None)
    return host_activity.HostActivity(steps_ops.get("file") or "", steps_ops.get("host") or "", 0 if end is not None else None, end,
                        steps, "ProfilerStep" if steps else None, events=len(steps))
