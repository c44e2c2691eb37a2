"""The memory profile's family for runtime allocations: an xplane's allocator events
(tools/memory_profile_allocator.py) and a PyTorch profiler trace's ``[memory]`` events
(tools/memory_profile_torch.py)."""

from __future__ import annotations

import gzip

import orjson

from profscope.app import keys, lazy
from profscope.app.queries import MemoryProfileQuery
from profscope.errors import NotFound, ProfscopeError
from profscope.model.catalog import Run, RunKind
from profscope.model.file_kinds import FileKind

chrome_trace = lazy.module("profscope.formats.chrome_trace")
xplane_allocator = lazy.module("profscope.formats.xplane_allocator")
memory_profile_allocator = lazy.module("profscope.tools.memory_profile_allocator")
memory_profile_torch = lazy.module("profscope.tools.memory_profile_torch")
memory_hosts_tool = lazy.module("profscope.tools.memory_hosts")


class RuntimeMemory:
    """Part of :class:`~profscope.app.workspace.Workspace`: allocations over time."""

    def xplane_memory_profile(self, run: Run, query: MemoryProfileQuery, progress) -> dict:
        """XProf's memory profile of one host: its allocator events over time."""
        info = self.host_xplane(run, query.host, "allocator events")
        progress.update(message=f"reading allocator events of {info.name}")
        with self.logdir.open(info.path) as f:
            events = xplane_allocator.read_allocator_events(f, self.logdir.display_path(info.path), progress=progress.part(0, 0.85))
        return memory_profile_allocator.from_allocator_events(events, progress=progress.part(0.85, 1))

    def torch_memory_profile(self, run: Run, progress) -> dict:
        """Memory over time from a PyTorch profiler trace (``[memory]`` events), with the
        ``export_memory_timeline`` categories when that JSON sits beside the trace."""
        mem = self._torch_memory_events(run, progress.part(0, 0.9))
        timeline = None
        for info in run.files_of(FileKind.MEMORY_TIMELINE):
            timeline = chrome_trace.parse_memory_timeline(self.logdir.read_bytes(info.path), self.logdir.display_path(info.path))
        return memory_profile_torch.from_memory_events(mem, timeline, progress=progress.part(0.9, 1))

    def _torch_memory_events(self, run: Run, progress):
        trace = run.files_of(FileKind.CHROME_TRACE)[0]
        progress.update(message=f"reading memory events of {trace.name}")
        with self.logdir.open(trace.path) as f:
            return chrome_trace.memory_events(f, self.logdir.display_path(trace.path), progress=progress)

    def torch_memory_payload(self, run: Run, host: str | None = None) -> bytes:
        """profscope's own memory payload of a trace run (gzip JSON, cached; the dashboard's
        /api/memory_profile and OOM risk read it); of a distributed job, the rank ``host``
        (else the first), as that rank's file alone."""
        if run.ranks:
            if host is not None and host not in run.ranks:
                raise NotFound(f"run {run.name!r} has no rank {host!r}; its ranks: {', '.join(run.ranks)}")
            run = run.rank_run(host) or next(iter(run.ranks.values()))
        if run.kind is not RunKind.CHROME_TRACE:
            raise NotFound(f"run {run.name!r} is a {run.kind.value}; /api/memory_profile reads PyTorch profiler traces")
        tool = self.tool_named("memory_profile")
        key = keys.torch_memory(tool, self.logdir.url, [f.identity() for f in run.files])
        return self.cache.get_or_compute(key, f"{tool.title}: {run.name}", lambda p: self.torch_memory_profile(run, p),
                                         file=self._run_file(run))

    def torch_memory_profile_xprof(self, run: Run, query: MemoryProfileQuery, progress) -> dict:
        """XProf's memory_profile schema of a trace run, from profscope's payload and the
        trace's events (XProf samples its timeline from every event, not from the
        payload's time-binned points)."""
        payload = orjson.loads(gzip.decompress(self.torch_memory_payload(run)))
        mem = self._torch_memory_events(run, progress.part(0, 0.9))
        return memory_profile_torch.xprof_memory_profile(payload, mem)

    def memory_hosts(self, run: Run) -> dict:
        """Every host's memory peak side by side, worst first, with the roll-up across
        hosts (tools/memory_hosts.py): ``GET /api/memory_hosts``. The rows not cached yet
        are made at once (Workspace.fan_out: on the Dask cluster, or in several workers);
        a host whose conversion fails is a row with its error, the others are still shown."""
        if (run.kind is not RunKind.PROFILE and not run.ranks) or not run.hosts:
            raise NotFound(f"run {run.name!r} is a {run.kind.value}; /api/memory_hosts reads the hosts of a profile run "
                           "or the ranks of a distributed job")
        self.fan_out(run, [(self._memory_host_key(run, h), ("memory_host", h)) for h in run.hosts],
                     f"memory peaks of {len(run.hosts)} hosts")
        rows = []
        for host in run.hosts:
            try:
                rows.append(self.memory_host_row(run, host))
            except ProfscopeError as e:
                rows.append(memory_hosts_tool.error_row(host, e.message, e.file))
        out = memory_hosts_tool.memory_hosts(rows)
        out["run"] = run.name
        return out

    def _memory_host_key(self, run: Run, host: str) -> str:
        # The host's file and the run's inputs: the payload's own key holds all of the
        # run's files (Workspace.tool_data), so a new file renews both.
        return keys.derived(keys.MEMORY_HOST, self.logdir.url, self.tool_named("memory_profile").version,
                            self._host_file(run, host).identity(), [f.identity() for f in run.files])

    @staticmethod
    def _host_file(run: Run, host: str):
        """The file a host's row is read from: its xplane, or a rank's snapshot or trace."""
        one = run.rank_run(host)
        if one is None:
            return run.xplane(host)
        return (one.files_of(FileKind.CHROME_TRACE) or one.files)[0]

    def memory_host_row(self, run: Run, host: str) -> dict:
        """One host's row of :meth:`memory_hosts`, from that host's cached memory profile
        (the entry ``tag=memory_profile&host=`` reads), kept under ``keys.MEMORY_HOST``."""
        tool = self.tool_named("memory_profile")
        return self.cache.get_or_compute_json(
            self._memory_host_key(run, host), f"memory peak of {host}",
            lambda p: memory_hosts_tool.host_summary(
                host, orjson.loads(gzip.decompress(self.tool_data(run, tool, MemoryProfileQuery(host=host))))),
            file=self.logdir.display_path(self._host_file(run, host).path))
