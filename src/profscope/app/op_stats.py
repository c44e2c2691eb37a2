"""XProf's op statistics tools of a profile (``hlo_stats``): the device op metrics of one
host's xplane (formats/xplane_op_metrics.py) made into XProf's JSON (tools/hlo_stats.py)."""

from __future__ import annotations

import dataclasses

from profscope.app import lazy
from profscope.app.queries import OpStatsQuery
from profscope.errors import NotFound
from profscope.model.catalog import Run

xplane_op_metrics = lazy.module("profscope.formats.xplane_op_metrics")
hlo_stats_tool = lazy.module("profscope.tools.hlo_stats")


class OpStats:
    """Part of :class:`~profscope.app.workspace.Workspace`: where the device time went, op by op."""

    def _op_metrics(self, run: Run, query: OpStatsQuery, progress):
        hosts = run.hosts
        if not hosts:
            raise NotFound(f"run {run.name!r} has no xplane profile to read device ops from")
        host = query.host or hosts[0]
        info = run.xplane(host)
        if info is None:
            raise NotFound(f"run {run.name!r} has no host {host!r}; hosts: {', '.join(hosts)}")
        progress.update(message=f"reading device ops of {info.name}")
        with self.logdir.open(info.path) as f:
            db = xplane_op_metrics.read_op_metrics(f, self.logdir.display_path(info.path))
        if db.unsupported_planes and not db.device_planes:
            # XProf reads TPU planes another way (formats/xplane_op_metrics.py); an empty
            # table would claim the TPU ran nothing
            raise NotFound(f"{self.logdir.display_path(info.path)}: profscope does not read the op metrics of TPU "
                           f"device planes yet ({', '.join(db.unsupported_planes[:4])}); GPU and ROCm planes only",
                           file=self.logdir.display_path(info.path))
        return db

    def hlo_stats(self, run: Run, query: OpStatsQuery, progress) -> dict:
        """XProf's ``hlo_stats`` DataTable of one host: every HLO op, ranked by device self time."""
        db = self._op_metrics(run, query, progress)
        return hlo_stats_tool.hlo_stats([dataclasses.asdict(m) for m in db.sorted()], db.total_time_ps)
