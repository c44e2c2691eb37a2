"""The memory profile's family for runtime allocations: an xplane's allocator events
(tools/memory_profile_allocator.py) and a PyTorch profiler trace's ``[memory]`` events
(tools/memory_profile_torch.py)."""

from __future__ import annotations

import gzip

import orjson

from profscope.app import keys, lazy
from profscope.app.queries import MemoryProfileQuery
from profscope.errors import NotFound
from profscope.model.catalog import Run, RunKind
from profscope.model.file_kinds import FileKind
from profscope.tools import registry

chrome_trace = lazy.module("profscope.formats.chrome_trace")
xplane_allocator = lazy.module("profscope.formats.xplane_allocator")
memory_profile_allocator = lazy.module("profscope.tools.memory_profile_allocator")
memory_profile_torch = lazy.module("profscope.tools.memory_profile_torch")


class RuntimeMemory:
    """Part of :class:`~profscope.app.workspace.Workspace`: allocations over time."""

    def xplane_memory_profile(self, run: Run, query: MemoryProfileQuery, progress) -> dict:
        """XProf's memory profile of one host: its allocator events over time."""
        hosts = run.hosts
        if not hosts:
            raise NotFound(f"run {run.name!r} has no xplane profile to read allocator events from")
        host = query.host or hosts[0]
        info = run.xplane(host)
        if info is None:
            raise NotFound(f"run {run.name!r} has no host {host!r}; hosts: {', '.join(hosts)}")
        progress.update(message=f"reading allocator events of {info.name}")
        with self.logdir.open(info.path) as f:
            events = xplane_allocator.read_allocator_events(f, self.logdir.display_path(info.path), progress=progress.part(0, 0.85))
        return memory_profile_allocator.from_allocator_events(events, progress=progress.part(0.85, 1))

    def torch_memory_profile(self, run: Run, progress) -> dict:
        """Memory over time from a PyTorch profiler trace (``[memory]`` events), with the
        ``export_memory_timeline`` categories when that JSON sits beside the trace."""
        trace = run.files_of(FileKind.CHROME_TRACE)[0]
        progress.update(message=f"reading memory events of {trace.name}")
        with self.logdir.open(trace.path) as f:
            mem = chrome_trace.memory_events(f, self.logdir.display_path(trace.path), progress=progress.part(0, 0.9))
        timeline = None
        for info in run.files_of(FileKind.MEMORY_TIMELINE):
            timeline = chrome_trace.parse_memory_timeline(self.logdir.read_bytes(info.path), self.logdir.display_path(info.path))
        return memory_profile_torch.from_memory_events(mem, timeline, progress=progress.part(0.9, 1))

    def torch_memory_payload(self, run: Run) -> bytes:
        """profscope's own memory payload of a trace run (gzip JSON, cached; the dashboard's
        /api/memory_profile and OOM risk read it)."""
        if run.kind is not RunKind.CHROME_TRACE:
            raise NotFound(f"run {run.name!r} is a {run.kind.value}; /api/memory_profile reads PyTorch profiler traces")
        tool = registry.get("memory_profile")
        key = keys.torch_memory(tool, self.logdir.url, [f.identity() for f in run.files])
        return self.cache.get_or_compute(key, f"{tool.title}: {run.name}", lambda p: self.torch_memory_profile(run, p),
                                         file=self._run_file(run))

    def torch_memory_profile_xprof(self, run: Run, query: MemoryProfileQuery, progress) -> dict:
        """XProf's memory_profile schema of a trace run, from profscope's payload."""
        return memory_profile_torch.xprof_memory_profile(orjson.loads(gzip.decompress(self.torch_memory_payload(run))))
