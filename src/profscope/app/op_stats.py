"""XProf's op statistics tools of a profile (``hlo_stats``, ``op_profile``): the device op
metrics of one host's xplane (formats/xplane_op_metrics.py) made into XProf's JSON
(tools/hlo_stats.py, tools/op_profile.py)."""

from __future__ import annotations

import dataclasses

from profscope.app import keys, lazy
from profscope.app.queries import OpProfileQuery, OpStatsQuery
from profscope.errors import BadRequest, NotFound
from profscope.model.catalog import Run

xplane_op_metrics = lazy.module("profscope.formats.xplane_op_metrics")
hlo_stats_tool = lazy.module("profscope.tools.hlo_stats")
op_profile_tool = lazy.module("profscope.tools.op_profile")


class OpStats:
    """Part of :class:`~profscope.app.workspace.Workspace`: where the device time went, op by op."""

    def op_metrics(self, run: Run, host: str | None, progress=None):
        """The device op metrics (``OpMetricsDb``) of one host's xplane, decoded once per
        file identity and kept in the cache: hlo_stats, op_profile (both groupings) and the
        ops table of /api/steps_ops all start from it, so a second tool on the same host
        reads this entry instead of decoding the xplane again."""
        info = self.host_xplane(run, host, "device ops")
        if progress is not None:
            progress.update(message=f"reading device ops of {info.name}")
        data = self.derived_json(keys.OP_METRICS, info, "reading device ops of", "device op metrics",
                                 lambda f, path: xplane_op_metrics.read_op_metrics(f, path).to_json())
        db = xplane_op_metrics.OpMetricsDb.from_json(data)
        if db.unsupported_planes:
            # XProf hangs a SparseCore's ops under the TensorCore op that offloads to them
            # (formats/xplane_op_metrics.py); without them the table would miss that time
            path = self.logdir.display_path(info.path)
            raise NotFound(f"{path}: profscope does not read the op metrics of TPU SparseCore planes yet "
                           f"({', '.join(db.unsupported_planes[:4])})", file=path)
        return db

    def hlo_stats(self, run: Run, query: OpStatsQuery, progress) -> dict:
        """XProf's ``hlo_stats`` DataTable of one host: every HLO op, ranked by device self time."""
        db = self.op_metrics(run, query.host, progress)
        return hlo_stats_tool.hlo_stats([dataclasses.asdict(m) for m in db.sorted()], db.total_time_ps)

    def op_profile(self, run: Run, query: OpProfileQuery, progress) -> dict:
        """XProf's ``op_profile`` of one host: the device ops as a tree with their time."""
        group_by = query.group_by or "program"
        if group_by not in op_profile_tool.GROUPINGS:
            raise BadRequest(f"group_by={group_by!r}: profscope groups op_profile by "
                             f"{' or '.join(op_profile_tool.GROUPINGS)} (XProf also by provenance)")
        db = self.op_metrics(run, query.host, progress)
        return op_profile_tool.op_profile(
            [dataclasses.asdict(m) for m in db.metrics.values()], total_time_ps=db.total_time_ps,
            total_op_time_ps=db.total_op_time_ps, device_type=db.device_type,
            program_names=db.program_names, has_devices=bool(db.device_planes), group_by=group_by,
            normalized_total_op_time_ps=db.normalized_total_op_time_ps)
