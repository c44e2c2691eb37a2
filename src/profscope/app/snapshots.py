"""PyTorch memory snapshots: the loaded model (columns on local disk, the last few in
memory) and its views (tools/memory_profile_snapshot.py)."""

from __future__ import annotations

import gzip
import os
import shutil
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import orjson

from profscope.app import keys, lazy
from profscope.app.compare import side_link
from profscope.app.queries import MemoryProfileQuery, SnapshotQuery
from profscope.cache.store import gzip_json_bytes
from profscope.errors import BadRequest, NotFound
from profscope.forksafe import renew_locks_after_fork
from profscope.model.catalog import Run, RunKind

if TYPE_CHECKING:
    from profscope.model.snapshot import Snapshot

snapshot_pickle = lazy.module("profscope.formats.snapshot_pickle")
snapshot_model = lazy.module("profscope.model.snapshot")
memory_profile_snapshot = lazy.module("profscope.tools.memory_profile_snapshot")
compare_memory_profile = lazy.module("profscope.tools.compare_memory_profile")

SNAPSHOTS_IN_MEMORY = 2
# The views of a snapshot beyond its overview (which is also the memory_profile tool's
# data), served under /api/snapshot/<view>.
SNAPSHOT_VIEWS = ("overview", "timeline", "segments", "events", "state", "stack", "stacks", "compare")
# The views a user steps through (one per arrow key: the allocator state at the next event,
# the next page of events, a hovered allocation's stack): answered in the server from the
# model in memory once a worker has saved its columns, not by a forked worker each that
# reads the columns again (0.2-0.6 s a step on the training fixture; ~10 ms here). Each
# is a bounded walk over columns profscope wrote itself: the pickle was read in a worker.
STEPPING_VIEWS = ("state", "events", "stack")

# A fork (cache/worker.py) copies the server's locks as they are: a module lock that an
# import in another thread holds (importlib's per-module lock; numpy imports submodules
# on first use) stays held in the child, whose own import of that module then waits
# forever. The stepping views import and run here, in the server, under this lock, and a
# fork waits for it (os.register_at_fork); the child starts with a fresh one. Re-entrant:
# nothing under it forks, but a fork from the same thread must not wait for itself.
_IN_SERVER = threading.RLock()


def _renew_in_server_lock() -> None:
    global _IN_SERVER
    _IN_SERVER = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=lambda: _IN_SERVER.acquire(), after_in_parent=lambda: _IN_SERVER.release(),
                        after_in_child=_renew_in_server_lock)


def _load_model(folder) -> Snapshot:
    """A snapshot's saved columns with what its first view derived from them (saved by
    the worker that parsed it), so that the next worker's view does not derive it again."""
    snap = snapshot_model.load_model(folder)
    memory_profile_snapshot.load_derived(snap, folder)
    return snap


class Snapshots:
    """Part of :class:`~profscope.app.workspace.Workspace`: snapshot runs."""

    def __init__(self):
        # Loaded snapshot models (columns, ~0.6x the file), the last few kept in memory:
        # every view of a snapshot (timeline windows, states, stacks) reads one.
        self._snapshots: OrderedDict[str, Snapshot] = OrderedDict()
        self._snapshots_lock = threading.Lock()
        renew_locks_after_fork(self, "_snapshots_lock")

    def _remembered(self, key) -> Snapshot | None:
        with self._snapshots_lock:
            if key in self._snapshots:
                self._snapshots.move_to_end(key)
                return self._snapshots[key]
        return None

    def _remember(self, key, snap: Snapshot) -> Snapshot:
        """Keep ``snap`` for the next views, the last SNAPSHOTS_IN_MEMORY of them."""
        with self._snapshots_lock:
            self._snapshots[key] = snap
            while len(self._snapshots) > SNAPSHOTS_IN_MEMORY:
                self._snapshots.popitem(last=False)
        return snap

    def snapshot(self, run: Run, progress=None) -> Snapshot:
        """The loaded model of a snapshot run: kept in memory for the next views (the
        last few), and its columns on local disk, so that opening it again, after a
        restart or once evicted, reads arrays instead of parsing the pickle (0.1 s
        instead of ~3 s for 1 GB with the native reader, a minute without)."""
        info = run.files[0]
        key = info.identity()
        if (snap := self._remembered(key)) is not None:
            return snap
        parsed = []

        def build(job, folder):
            reporter = progress if progress is not None else job
            reporter.update(message=f"loading {info.name}")
            with self.logdir.open(info.path) as f:
                snap = snapshot_pickle.load_snapshot(f, self.logdir.display_path(info.path), progress=reporter)
            reporter.update(message="saving its columns in the cache")
            snapshot_model.save_model(snap, folder)
            if snap.devices:  # the first view's device (``hosts()[0]``), derived once for every process
                memory_profile_snapshot.save_derived(snap, snap.devices[0], folder)
            parsed.append(snap)

        model_key = keys.derived(keys.SNAPSHOT_MODEL, self.logdir.url, key)
        folder = self.cache.get_or_build_dir(model_key, f"Snapshot: loading {info.name}", build,
                                             file=self.logdir.display_path(info.path))
        if parsed:
            snap = parsed[0]
        else:
            if progress is not None:
                progress.update(message=f"reading the columns of {info.name}")
            try:
                snap = _load_model(folder)
            except (OSError, ValueError, KeyError, TypeError):  # a damaged cache entry: parse again
                shutil.rmtree(folder, ignore_errors=True)
                return self.snapshot(run, progress)
        return self._remember(key, snap)

    def snapshot_device(self, run: Run, host: str | None) -> int:
        hosts = self.hosts(run)
        if not hosts:
            raise NotFound(f"{run.name}: the snapshot holds no device")
        host = host or hosts[0]
        if host not in hosts:
            raise NotFound(f"run {run.name!r} has no device {host!r}; devices: {', '.join(hosts)}")
        return int(host.split(":", 1)[1])

    def snapshot_memory_profile_xprof(self, run: Run, query: MemoryProfileQuery, progress) -> dict:
        """XProf's memory_profile schema of one device, keyed by its host name (cuda:N)."""
        device = self.snapshot_device(run, query.host)
        return memory_profile_snapshot.xprof_memory_profile(self.snapshot(run, progress), device, f"cuda:{device}")

    def snapshot_view(self, run: Run, view: str, query: SnapshotQuery) -> bytes:
        """One of the snapshot views (timeline window, segment timeline, a page of events
        or a search of them, state at an event, stacks, one stack's frames, compare),
        converted once per query and cached. A stack's frames get their ``source`` (issue
        37): ``{file, line, path}`` when the file is under a source root, else null."""
        body = self._snapshot_view(*self.rank_route(run, query), view)
        if view != "stack":
            return body
        # Added to every answer, never cached: the roots are this server's (--source-root),
        # not the snapshot's, and may differ at the next start.
        st = orjson.loads(gzip.decompress(body))
        found: dict = {}
        for f in st.get("frames") or []:
            name = f.get("filename") or ""
            if name not in found:
                found[name] = self.source_link(name)
            f["source"] = None if found[name] is None else {**found[name], "line": f.get("line")}
        return gzip_json_bytes(orjson.dumps(st))

    def _snapshot_view(self, run: Run, query: SnapshotQuery, view: str) -> bytes:
        if run.kind is not RunKind.TORCH_SNAPSHOT:
            raise NotFound(f"run {run.name!r} is not a PyTorch memory snapshot")
        if view not in SNAPSHOT_VIEWS:
            raise NotFound(f"no snapshot view {view!r}; views: {', '.join(SNAPSHOT_VIEWS)}")
        if view in STEPPING_VIEWS:
            device = self.snapshot_device(run, query.host)  # may ask a worker: not under the lock
            with _IN_SERVER:
                snap = self._snapshot_in_process(run)
                body = None if snap is None else self._view(snap, device, view, query)
            if body is not None:
                return gzip_json_bytes(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY))
        inputs = [run.files[0].identity()]
        other = None
        if query.base is not None or query.base_host is not None:
            # ``base``/``base_host`` are the compare's names on every tool (docs/compare.md);
            # ``other``/``other_host`` stay as their aliases: one cache key for both spellings
            query = query.but(other=query.base or query.other, other_host=query.base_host or query.other_host,
                              base=None, base_host=None)
        if view == "compare":
            other = self.run(query.other)
            if other.kind is not RunKind.TORCH_SNAPSHOT:
                raise BadRequest(f"'other' must be a snapshot run; {other.name!r} is a {other.kind.value}")
            inputs.append(other.files[0].identity())
        key = keys.snapshot_view(view, self.logdir.url, inputs, query.cache_parts())
        q = query

        def compute(progress):
            if view == "compare":
                other_snap = self.snapshot(other, progress)
                other_device = self.snapshot_device(other, q.other_host)
                raw = memory_profile_snapshot.compare(self.snapshot(run, progress), other_snap,
                                                      self.snapshot_device(run, q.host), other_device)
                # the same compare in the diff JSON of every tool (docs/compare.md "Snapshots"):
                # this run is the compare's ``a`` and the current, the other (``base=``) its ``b``
                raw["diff"] = compare_memory_profile.diff_snapshots(
                    raw, base_ref={"run": other.name}, current_ref={"run": run.name},
                    link=side_link(run.name), base_is="b")
                return raw
            return self._view(self.snapshot(run, progress), self.snapshot_device(run, q.host), view, q)

        return self.cache.get_or_compute(key, f"snapshot {view} of {run.name}", compute, file=self._run_file(run))

    def _snapshot_in_process(self, run: Run) -> Snapshot | None:
        """The model of a snapshot run from memory, or read here from the columns a worker
        saved; None while they are not saved yet (the request then goes to a worker)."""
        info = run.files[0]
        key = info.identity()
        if (snap := self._remembered(key)) is not None:
            return snap
        folder = self.cache.built_dir(keys.derived(keys.SNAPSHOT_MODEL, self.logdir.url, key))
        if folder is None:
            return None
        try:
            snap = _load_model(folder)
        except (OSError, ValueError, KeyError, TypeError):
            return None  # a damaged entry: a worker reads the file again
        return self._remember(key, snap)

    def _view(self, snap: Snapshot, device: int, view: str, q: SnapshotQuery) -> dict:
        if view == "overview":
            return memory_profile_snapshot.overview(snap, device)
        if view in ("timeline", "segments"):
            draw = memory_profile_snapshot.timeline if view == "timeline" else memory_profile_snapshot.segment_timeline
            return draw(snap, device, start=q.start, end=q.end, x=q.x or "index",
                        max_points=2000 if q.max_points is None else q.max_points,
                        top=memory_profile_snapshot.MAX_DETAIL if q.top is None else q.top)
        if view == "events":
            return memory_profile_snapshot.events(snap, device, start=q.start, end=q.end, q=q.q)
        if view == "state":
            return memory_profile_snapshot.state_at(snap, device, q.event)
        if view == "stack":
            return memory_profile_snapshot.stack(snap, q.stack or 0, filtered=q.filtered is not False)
        if view == "stacks":
            return memory_profile_snapshot.stacks_at(snap, device, q.event)
        raise NotFound(f"no snapshot view {view!r}")
