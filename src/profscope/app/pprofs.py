"""JAX device-memory profiles (pprof): a run's profiles read (formats/pprof.py) and the
memory profile tool's payload (tools/memory_profile_pprof.py)."""

from __future__ import annotations

from profscope.app import keys, lazy
from profscope.app.profile_steps import ALL_HOSTS
from profscope.app.queries import MemoryProfileQuery
from profscope.errors import NothingToAssess, NotFound
from profscope.model.catalog import Run
from profscope.storage import FileInfo

pprof = lazy.module("profscope.formats.pprof")
oom_risk = lazy.module("profscope.tools.oom_risk")
memory_profile_pprof = lazy.module("profscope.tools.memory_profile_pprof")


class Pprofs:
    """Part of :class:`~profscope.app.workspace.Workspace`: pprof runs."""

    def pprof_profiles(self, run: Run) -> list[tuple[FileInfo, object]]:
        """Each file of the run read, in the order of the job: by the profile's
        ``time_nanos`` when every file has one, else by name (JAX writes no time)."""
        read = []
        for info in run.files:
            path = self.logdir.display_path(info.path)
            with self.logdir.open(info.path) as f:
                read.append((info, pprof.read_profile(f.read(), path)))
        if all(p.time_nanos for _, p in read):
            read.sort(key=lambda r: (r[1].time_nanos, r[0].name))
        else:
            read.sort(key=lambda r: r[0].path)
        return read

    @staticmethod
    def _pprof_pick(read: list, name: str | None, what: str):
        if name is None:
            return read[-1]
        for info, p in read:
            if name in (info.name, info.path):
                return info, p
        raise NotFound(f"no {what} {name!r} in this run; profiles: {', '.join(i.name for i, _ in read)}")

    def pprof_hosts(self, run: Run) -> list[str]:
        """The devices the run's profiles name (``cpu:0``, ``cuda:0``, ``TPU_0``): each
        file's read once per version and kept in the cache (``/api/run`` and the hosts
        list ask on every page load; a folder may hold many profiles). With several
        devices, ``ALL_HOSTS`` comes first: the page sums every device unless one is
        picked, so the shell's Host picker opens on "all N hosts", as XProf's hosts list
        offers ALL_HOSTS beside the single hosts (server/xprof_api.py hosts_for_tool)."""
        def devices(f, path):
            return memory_profile_pprof.devices(pprof.read_profile(f.read(), path))

        found = set()
        for info in run.files:
            found.update(self.derived_json(keys.PPROF_DEVICES, info, "reading the devices of", "devices", devices))
        devices = sorted(d for d in found if d)
        return [ALL_HOSTS, *devices] if len(devices) > 1 else devices

    def pprof_memory_profile(self, run: Run, query: MemoryProfileQuery, progress) -> dict:
        """One profile's live bytes, icicle, top sites and buffers (``host`` = one device),
        the timeline of every profile of the run, and with ``base_profile`` the diff."""
        read = self.pprof_profiles(run)
        info, p = self._pprof_pick(read, query.profile, "profile")
        device = _one_device(query.host)
        out = {"kind": "pprof", "run": run.name, "profiles": [i.name for i, _ in read], "profile": info.name,
               "overview": memory_profile_pprof.overview(p, info.name, device),
               "timeline": memory_profile_pprof.timeline([(i.name, q) for i, q in read]), "diff": None}
        if query.base_profile is not None:
            binfo, base = self._pprof_pick(read, query.base_profile, "base profile")
            out["diff"] = {"baseProfile": binfo.name, "profile": info.name,
                           **memory_profile_pprof.diff(base, p, device)}
        return out

    def pprof_oom_evidence(self, run: Run, host: str | None) -> dict:
        """OOM risk's evidence (tools/oom_risk.py ``pprof_evidence``): live bytes of one
        device (``host``; default the device with the most) over the run's profiles, the
        sites of the profile where they are largest."""
        host = _one_device(host)
        read = self.pprof_profiles(run)
        timeline = memory_profile_pprof.timeline([(i.name, p) for i, p in read])
        devices = [d for d in timeline["devices"] if d]
        if host is not None and host not in devices:
            raise NotFound(f"run {run.name!r} has no device {host!r}; devices: {', '.join(devices) or 'none'}")
        device = host or max(devices, key=lambda d: max(pt["byDevice"].get(d, 0) for pt in timeline["profiles"]),
                             default=None)
        if device is None:
            raise NothingToAssess(f"run {run.name!r}: its profiles hold no buffer on any device")
        at = max(range(len(read)), key=lambda i: timeline["profiles"][i]["byDevice"].get(device, 0))
        info, p = read[at]
        # Sites per sample kind: OOM risk categorises a JAX profile by its kind label
        # (tools/oom_risk.py pprof_evidence), never by frame names.
        sites = {k: memory_profile_pprof.top_sites(p, device, kind=k) for k in memory_profile_pprof.kinds(p, device)}
        return oom_risk.pprof_evidence(timeline["profiles"], sites, device, info.name)


def _one_device(host: str | None) -> str | None:
    """``host=`` as one device, or None for every device (no host, or ``ALL_HOSTS``)."""
    return None if not host or host == ALL_HOSTS else host
