"""Every cache key the application asks the store for, with its version, in one place.

A key is ``sha256([kind, version, logdir URL, input identities, parameters])``
(cache/store.py ``cache_key``). Bump a version when what is stored under that kind
changes shape; tool payloads carry their tool's version (app/tool_table.py).
:class:`FileDerived` reads a value out of one file under one of these keys.
"""

from __future__ import annotations

import gzip
from typing import TYPE_CHECKING

import orjson

from profscope.cache.store import cache_key
from profscope.errors import NotFound

if TYPE_CHECKING:
    from profscope.app.tool_table import Tool

# (kind, version) of the derived values kept beside the tools' payloads.
MODULE_LIST = ("module_list", 1)  # the HLO modules embedded in one xplane
MODULE_PEAK = ("module_peak", 1)  # one module's peak summary (the OOM ranking, /api/module_peaks)
DEVICE_CAPS = ("device_caps", 2)  # an xplane's device planes' capabilities; 2: a TPU's peak FLOP/s and HBM bandwidth
MODULE_RUN_TIMES = ("module_run_times", 1)  # time spent in each module's events
OP_METRICS = ("op_metrics", 2)  # one host's device op metrics (OpMetricsDb.to_json), for hlo_stats, op_profile, ops; 2: flops, bytes_accessed
TRACE_DEVICE_PROPERTIES = ("trace_device_properties", 1)  # a PyTorch trace's deviceProperties
SNAPSHOT_DEVICES = ("snapshot_devices", 1)
PPROF_DEVICES = ("pprof_devices", 1)  # the device labels of one pprof file (a JAX device-memory profile)
MEMORY_HOST = ("memory_host", 1)  # one host's row of /api/memory_hosts, from its memory profile
TRACE_HOST = ("trace_host", 1)  # one host's row of /api/trace_hosts: steps, busy and idle, from its xplane
XPLANE_STEPS = ("xplane_steps", 10)  # 2: step_name, hostname; 3: TPU Steps lines; 4: memory_us; 5: TF op types; 6: step_name roots; 7: origin_ps; 8: grouping "steps-line"; 9: steps' trace_window_ps; 10: barrier-cores a collective; one host's XProf step database and profscope's step breakdown (app/profile_steps.py)
TRACE_HOSTS_BATCH = ("trace_hosts_batch", 1)  # marks a set of hosts whose TRACE_HOST rows one worker made
TRACE_TIERS = ("trace_tiers", 2)  # a folder: the resolution tiers of a trace index built without them (Steps & ops' build); 2: and its flow slices' arrows
TRACE_ZOOM_LEVELS = ("trace_zoom_levels", 3)  # a folder: XProf's zoom level per row of one trace index (by its key); 2: the flow arrows' uint64 rule, per depth; 3: zero-length xplane events as 0 ps
SNAPSHOT_VIEW_VERSION = 3  # /api/snapshot/<view> payloads: ("snapshot", view, version); 2: windowX ends past the last event, stack userFrame; 3: compare's "diff" (the diff JSON, docs/compare.md)
TORCH_MEMORY = "torch_memory_profile"  # profscope's payload of a trace run (memory_profile's version)


def __getattr__(name: str):
    """The kinds whose version their own module holds, read when first used: those
    modules import numpy, which the server's first answer does without."""
    if name == "SNAPSHOT_MODEL":  # a folder of columns
        from profscope.model import snapshot

        return ("snapshot_model", snapshot.MODEL_FORMAT_VERSION)
    if name == "TRACE_INDEX":  # a folder: one file's trace index
        from profscope.tools import trace_index

        return ("trace_index", trace_index.INDEX_VERSION)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def derived(kind: tuple[str, int], logdir: str, *parts: object) -> str:
    name, version = kind
    return cache_key(name, version, logdir, *parts)


def snapshot_view(view: str, logdir: str, inputs: list[str], query: list) -> str:
    return cache_key("snapshot", view, SNAPSHOT_VIEW_VERSION, logdir, inputs, query)


def tool_payload(tool: Tool, logdir: str, inputs: list[str], query: list) -> str:
    from profscope.app import tool_table  # (tool_table's producers import this module)

    return cache_key(tool.name, tool_table.cache_version(tool), logdir, inputs, query)


def torch_memory(tool: Tool, logdir: str, inputs: list[str]) -> str:
    return cache_key(TORCH_MEMORY, tool.version, logdir, inputs)


class FileDerived:
    """Part of the workspace: a value read out of one file (a module list, device
    capabilities), kept in the cache under ``kind`` and the file's identity."""

    @staticmethod
    def host_xplane(run, host: str | None, reading: str):
        """The xplane of ``host`` in a profile run (None: its first host), or a 404 that
        says what was to be read and names the hosts the run has."""
        if not run.hosts:
            raise NotFound(f"run {run.name!r} has no xplane profile to read {reading} from")
        host = host or run.hosts[0]
        info = run.xplane(host)
        if info is None:
            raise NotFound(f"run {run.name!r} has no host {host!r}; hosts: {', '.join(run.hosts)}")
        return info

    def derived_key(self, kind: tuple[str, int], info) -> str:
        """The cache key of what ``kind`` derives from the file ``info`` (:meth:`derived_json`'s)."""
        return derived(kind, self.logdir.url, info.identity())

    def derived_json(self, kind: tuple[str, int], info, doing: str, label: str, read, *, as_made: bool = False,
                     load: bool = True):
        """``read(file object, display path)`` once per file identity; ``doing`` is the
        progress message, ``label`` the job's name. ``as_made``: a value ``read`` made in
        this process (no conversion worker: ``PROFSCOPE_WORKERS=0``, the CLI, a worker's
        nested conversions) is answered as it is, not as its cache entry's JSON loaded
        back (still written for the next request): for a ``read`` whose value is plain
        JSON data (str keys, lists, no numpy), which the load would give back equal. The
        steps of a 44,000-step CPU profile are a 14 MB entry: 0.23 s to load.
        ``load=False`` (with ``as_made``): the entry made or found, nothing returned (a
        prefetch)."""
        path = self.logdir.display_path(info.path)
        made = []

        def compute(progress):
            progress.update(message=f"{doing} {info.name}")
            with self.logdir.open(info.path) as f:
                out = read(f, path)
            if as_made:
                made.append(out)  # (in a forked worker, the worker's list: the answer is its bytes)
            return out

        key, label = self.derived_key(kind, info), f"{label} of {info.path}"
        if not as_made:
            return self.cache.get_or_compute_json(key, label, compute, file=path)
        gz = self.cache.get_or_compute(key, label, compute, file=path)
        if not load:
            return None
        return made[0] if made else orjson.loads(gzip.decompress(gz))
