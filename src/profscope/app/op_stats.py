"""XProf's op statistics tools of a profile (``hlo_stats``, ``op_profile``): the device op
metrics of one host's xplane (formats/xplane_op_metrics.py) made into XProf's JSON
(tools/hlo_stats.py, tools/op_profile.py)."""

from __future__ import annotations

import dataclasses

from profscope.app import lazy
from profscope.app.queries import OpProfileQuery, OpStatsQuery
from profscope.errors import BadRequest, NotFound
from profscope.model.catalog import Run

xplane_op_metrics = lazy.module("profscope.formats.xplane_op_metrics")
hlo_stats_tool = lazy.module("profscope.tools.hlo_stats")
op_profile_tool = lazy.module("profscope.tools.op_profile")


class OpStats:
    """Part of :class:`~profscope.app.workspace.Workspace`: where the device time went, op by op."""

    def _op_metrics(self, run: Run, query: OpStatsQuery | OpProfileQuery, progress):
        info = self.host_xplane(run, query.host, "device ops")
        progress.update(message=f"reading device ops of {info.name}")
        with self.logdir.open(info.path) as f:
            db = xplane_op_metrics.read_op_metrics(f, self.logdir.display_path(info.path))
        if db.unsupported_planes:
            # XProf hangs a SparseCore's ops under the TensorCore op that offloads to them
            # (formats/xplane_op_metrics.py); without them the table would miss that time
            path = self.logdir.display_path(info.path)
            raise NotFound(f"{path}: profscope does not read the op metrics of TPU SparseCore planes yet "
                           f"({', '.join(db.unsupported_planes[:4])})", file=path)
        return db

    def hlo_stats(self, run: Run, query: OpStatsQuery, progress) -> dict:
        """XProf's ``hlo_stats`` DataTable of one host: every HLO op, ranked by device self time."""
        db = self._op_metrics(run, query, progress)
        return hlo_stats_tool.hlo_stats([dataclasses.asdict(m) for m in db.sorted()], db.total_time_ps)

    def op_profile(self, run: Run, query: OpProfileQuery, progress) -> dict:
        """XProf's ``op_profile`` of one host: the device ops as a tree with their time."""
        group_by = query.group_by or "program"
        if group_by not in op_profile_tool.GROUPINGS:
            raise BadRequest(f"group_by={group_by!r}: profscope groups op_profile by "
                             f"{' or '.join(op_profile_tool.GROUPINGS)} (XProf also by provenance)")
        db = self._op_metrics(run, query, progress)
        return op_profile_tool.op_profile(
            [dataclasses.asdict(m) for m in db.metrics.values()], total_time_ps=db.total_time_ps,
            total_op_time_ps=db.total_op_time_ps, device_type=db.device_type,
            program_names=db.program_names, has_devices=bool(db.device_planes), group_by=group_by,
            normalized_total_op_time_ps=db.normalized_total_op_time_ps)
