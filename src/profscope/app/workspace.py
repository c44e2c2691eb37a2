"""One log directory as the application sees it: its runs, their hosts and tools, and
every tool's payload, computed once and kept in the disk cache.

The workspace is the application layer's one entry: the server (and the CLI, and
``profscope report``) ask it for runs and payloads with typed queries
(app/queries.py); it calls the producer that the tool table (app/tool_table.py) names
for the tool and the run's kind, which reads the files (formats) and builds the payload
(tools), under a cache key from app/keys.py. It knows no HTTP. Each tool family's
producers live in their own module, mixed in here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from profscope.app import keys, tool_table
from profscope.app.summary import Analysis
from profscope.app.capture import CaptureDir, Capturer, TargetPolicy
from profscope.app.compare import Comparisons
from profscope.app.compiled_memory import CompiledMemory, ModuleSource
from profscope.app.oom import OomAssessment
from profscope.app.op_stats import OpStats
from profscope.app.pprofs import Pprofs
from profscope.app.queries import OomRiskQuery, Query
from profscope.app.runtime_memory import RuntimeMemory
from profscope.app.snapshots import SNAPSHOT_VIEWS, Snapshots
from profscope.app.tool_table import Tool
from profscope.app.traces import Traces
from profscope.app.trace_viewer_links import TraceViewerLinks
from profscope.app.profile_steps import ProfileSteps
from profscope.cache.store import DiskCache
from profscope.cache import worker as cache_worker
from profscope.errors import BadRequest, NotFound, ProfscopeError
from profscope.app.run_list import runs_of, served_logdir
from profscope.app.keys import FileDerived
from profscope.model.catalog import Run, RunKind
from profscope.model.file_kinds import FileKind, classify
from profscope.storage import LogDir, safe_relpath

__all__ = ["SNAPSHOT_VIEWS", "ModuleSource", "Workspace"]

# The mean host file size from which a fan-out forks a worker per host rather than
# leaving the hosts to one worker, inline: a fork and its reading of the cache cost
# ~0.1-0.15 s here, and a host converts at ~15 MB/s (docs/performance.md: the OOM risk
# of 16 hosts of 3 MB took 2.66 s in one worker, 3.11 s in a worker per host, 2 at once).
FORK_WORTH_BYTES = 32 << 20


class Workspace(CompiledMemory, RuntimeMemory, Snapshots, Pprofs, OomAssessment, Traces, TraceViewerLinks, OpStats, ProfileSteps, Analysis,
                Comparisons, FileDerived):
    """``capture_dir``: where profiles captured from running jobs are written (app/capture.py),
    listed as runs under ``captures/``; None: this workspace does not capture, and
    ``capture_off`` says why and which flag turns capturing on (the capture routes' 404).
    ``capture_max_bytes``: the largest answer a capture takes from one host."""

    def __init__(self, logdir: LogDir, cache: DiskCache, *, capture_dir: str | os.PathLike | None = None,
                 capture_allow: tuple[str, ...] | list[str] = (), capture_max_bytes: int | None = None,
                 capture_off: str = "it has no capture folder (profscope serve captures unless given --no-capture)"):
        if logdir.is_local and _inside(cache.root, Path(logdir.root)):
            # Log directories may be read-only or shared; we never write into them.
            raise BadRequest(
                f"the cache folder {cache.root} is inside the log directory {logdir.url}; "
                "choose another with --cache-dir"
            )
        self.cache = cache
        if not logdir.is_local and logdir.copy_dir is None:
            # Remote files are copied once per version into the cache folder (storage/logdir.py).
            logdir.copy_dir = cache.root / "objects"
        self.capture: Capturer | None = None
        self.capture_off = None if capture_dir is not None else capture_off
        if capture_dir is not None:
            if logdir.is_local and _inside(Path(capture_dir), Path(logdir.root)):
                raise BadRequest(f"the capture folder {capture_dir} is inside the log directory {logdir.url}; "
                                 "profscope never writes there: choose another with --capture-dir")
            folder = CaptureDir(capture_dir)
            logdir, mount = served_logdir(logdir, folder.logdir)
            self.capture = Capturer(folder, TargetPolicy(capture_allow), mount=mount,
                                    on_saved=lambda job: self.logdir.refresh(mount),
                                    **({"max_answer_bytes": capture_max_bytes} if capture_max_bytes is not None else {}))
        self.logdir = logdir
        CompiledMemory.__init__(self)
        Snapshots.__init__(self)
        Traces.__init__(self)

    def runs(self) -> list[Run]:
        return runs_of(self.logdir)

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
        for run in candidates:  # one rank of a distributed job, by its own file's name
            for one in run.ranks.values():
                if one.name == name:
                    return one
        raise NotFound(f"no run named {name!r} in {self.logdir.url}")

    def hosts(self, run: Run) -> list[str]:
        """A run's hosts: its xplane files, or a snapshot's devices (``cuda:N``)."""
        if run.ranks:
            return run.hosts  # a distributed job's ranks (a rank's devices: host=<rank> alone)
        if run.kind is RunKind.TORCH_SNAPSHOT:
            info = run.files[0]
            key = self.derived_key(keys.SNAPSHOT_DEVICES, info)
            devices = self.cache.get_or_compute_json(key, f"devices of {info.name}", lambda p: self.snapshot(run, p).devices,
                                                     file=self.logdir.display_path(info.path))
            return [f"cuda:{d}" for d in devices]
        if run.kind is RunKind.PPROF:
            return self.pprof_hosts(run)
        return run.hosts

    def tools(self, run: Run) -> list[Tool]:
        """The tools that have something to show for this run (app/tool_table.py)."""
        return [t for t in tool_table.for_run(run) if t.has_input(self, run)]

    def tool_data(self, run: Run, tool: Tool, query: Query | None = None) -> bytes:
        """A tool's payload as stored gzip JSON bytes, converted once per input and query."""
        run, query = self.rank_route(run, query if query is not None else tool.query())
        producer = tool.producer(run)
        if producer is tool_table.NOT_FOR:
            raise NotFound(f"tool {tool.name!r} has nothing for a {run.kind.value} such as {run.name!r}")
        query = self._complete(run, tool, query if query is not None else tool.query())
        key = self.tool_data_key(run, tool, query)
        if tool.prepare is not None and not self.cache.has(key):
            tool.prepare(self, run, query)
        label = f"{tool.title}: {getattr(query, 'module_name', None) or run.name}"
        in_process = tool.in_process is not None and tool.in_process(self, run, query)
        return self.cache.get_or_compute(key, label, lambda progress: producer(self, run, query, progress),
                                         file=self._run_file(run), in_process=in_process)

    def tool_stream(self, run: Run, tool: Tool, query: Query) -> Iterator[bytes]:
        """A streamed tool's answer in pieces (``Answer.STREAM``); what needs the data is
        checked before the first piece is returned."""
        self._check_query(tool, query)
        return tool.stream(self, *self.rank_route(run, query))

    def tool_page(self, run: Run, tool: Tool, query: Query) -> dict:
        """The plain values of a tool's HTML answer (``Tool.page``), for the frontend's
        template."""
        self._check_query(tool, query)
        return tool.page.data(self, *self.rank_route(run, query))

    @staticmethod
    def rank_route(run: Run, query: Query) -> tuple[Run, Query]:
        """A distributed job's tool query as its rank's own (docs/runs.md): ``host=<rank>``
        is that rank's run asked without a host, so its answer (and cache entry) is the
        file's alone; no host is the first rank, except for OOM risk, which rates every
        rank (OomAssessment._rates_every_host). Any other run and query pass through."""
        if not run.ranks or not hasattr(query, "host"):
            return run, query
        if query.host in run.ranks:
            return run.ranks[query.host], query.but(host=None)
        if query.host is None and not isinstance(query, OomRiskQuery):
            return next(iter(run.ranks.values())), query
        return run, query

    def tool_data_key(self, run: Run, tool: Tool, query: Query) -> str:
        run, query = self.rank_route(run, query)
        self._check_query(tool, query)
        query = self._complete(run, tool, query)
        return keys.tool_payload(tool, self.logdir.url, [f.identity() for f in run.files], query.cache_parts())

    def fan_out(self, run: Run, jobs: list[tuple[str, tuple]], what: str, *, one_worker_each: bool = True) -> None:
        """Builds the entries of ``jobs`` (``(cache key, job)``, one per host of a pod
        session; :meth:`host_job` says what a job is) that are not cached yet, at once:
        as Dask tasks when the server has a cluster (``--dask``, app/scale_out.py), else
        in the conversion workers, on all their slots but one (left for the host a user
        opens meanwhile). ``what`` names the work for the progress shown. Nothing is
        raised: a host's error is remembered under its key (a bad input) or met again
        when the caller then reads every host's entry, one by one, as it would have
        without this. ``one_worker_each=False``: without this the caller would make the
        hosts inline in one worker, so forking one per host pays only for hosts big
        enough to outweigh a fork (:data:`FORK_WORTH_BYTES`)."""
        if cache_worker.in_worker():
            return  # inside a conversion already: its nested conversions run inline
        todo = [(key, job) for key, job in jobs if not self.cache.has(key)]
        if len(todo) < 2:
            return
        scale_out = self.scale_out
        if scale_out is not None and scale_out.usable():
            scale_out.run_host_jobs(self, run, todo, what)
            return
        workers = self.cache.workers
        n = min(len(todo), workers.concurrency - 1) if workers.enabled else 1
        if n < 2 or not (one_worker_each or self._mean_host_size(run, todo) >= FORK_WORTH_BYTES):
            return
        from concurrent.futures import ThreadPoolExecutor

        def one(job: tuple) -> None:
            try:
                self.host_job(run, job)
            except ProfscopeError:
                pass  # the caller meets it again for that host

        with ThreadPoolExecutor(n, thread_name_prefix="host-jobs") as pool:
            list(pool.map(one, [job for _, job in todo]))

    @staticmethod
    def _mean_host_size(run: Run, jobs: list[tuple[str, tuple]]) -> float:
        sizes = [info.size or 0 for _, job in jobs if (info := run.xplane(job[1])) is not None]
        return sum(sizes) / len(sizes) if sizes else 0.0

    def host_job(self, run: Run, job: tuple) -> None:
        """One host's entry of a :meth:`fan_out`, named by plain values so that a Dask
        task can carry it: ``("tool_data", host, tool name, query fields)`` (a tool's
        payload), ``("memory_host", host)`` (a row of ``/api/memory_hosts``) or
        ``("trace_host", host)`` (a row of ``/api/trace_hosts``)."""
        kind, host, *args = job
        if kind == "tool_data":
            tool_name, fields = args
            tool = tool_table.get(tool_name)
            self.tool_data(run, tool, tool.query(**fields))
        elif kind == "memory_host":
            self.memory_host_row(run, host)
        elif kind == "trace_host":
            self._trace_host_row(host, run.xplane(host))
        else:
            raise ValueError(f"unknown host job {kind!r}")

    @staticmethod
    def tool_named(name: str) -> Tool | None:
        return tool_table.get(name)

    @staticmethod
    def _complete(run: Run, tool: Tool, query: Query) -> Query:
        return tool.complete(run, query) if tool.complete is not None else query

    @staticmethod
    def _check_query(tool: Tool, query: Query) -> None:
        if not isinstance(query, tool.query):
            raise TypeError(f"{tool.name} takes a {tool.query.__name__}, not {type(query).__name__}")

    def _run_file(self, run: Run) -> str:
        """How errors name a run's input: its one file, else its folder."""
        if len(run.files) == 1:
            return self.logdir.display_path(run.files[0].path)
        return self.logdir.display_path(run.folder) if run.folder else self.logdir.url

    def tool(self, name: str | None, run: Run) -> Tool:
        if not name:  # XProf: 404 "No Data"
            raise NotFound("missing parameter 'tag' (the tool name)")
        tool = tool_table.get(name)
        if tool is None:
            known = ", ".join(t.name for t in tool_table.TOOLS)
            raise NotFound(f"unknown tool {name!r}; profscope has: {known}")
        # this tool's input only: another tool's check may read a file that cannot be read
        # (a corrupt xplane's module list), which must not refuse a tool that reports it
        if not (tool.applies_to(run) and tool.has_input(self, run)):
            raise NotFound(f"run {run.name!r} has no input for tool {tool.name!r}")
        return tool


def _inside(path: Path, root: Path) -> bool:
    path, root = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return path == root or root in path.parents
