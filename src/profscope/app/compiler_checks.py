"""The Summary's compiler checks of a run (issue 35): its optimized HLO modules read as the
memory viewer reads them (app/compiled_memory.py: an xplane's embedded ``HloProto`` per
module, or an XLA dump's ``*after_optimizations.hlo.pb``), checked by
tools/analysis_hlo.py, with each op's share of the device time where the profile has
device op metrics (app/op_stats.py, XProf's ``OpMetricsDb``)."""

from __future__ import annotations

import re
from typing import Callable

from profscope.app import lazy
from profscope.app.profile_steps import ALL_HOSTS
from profscope.errors import ProfscopeError
from profscope.model.catalog import Run, RunKind

analysis_hlo = lazy.module("profscope.tools.analysis_hlo")

# XProf's module display name: "<HloModuleProto.name>(<program id>)"
_PROGRAM_ID = re.compile(r"\((\d+)\)$")


def hlo_findings_for(ws, run: Run, host: str | None, link: Callable[..., str], refused: list | None = None) -> list[dict]:
    """The compiler findings of ``run`` (one host's modules, or every module of the run for
    ``None``/``ALL_HOSTS``). A module whose HloProto cannot be read is left out and, when
    ``refused`` is given, listed there (``{"file", "reason"}``) while the other modules are
    checked; without ``refused`` the first such error is raised, so it is never silent."""
    one = host if host and host != ALL_HOSTS else None
    if run.kind is RunKind.PROFILE and one:
        info = run.xplane(one)
        names = sorted(ws._modules_of(info)) if info is not None else []
    else:
        names = ws.modules(run)
    modules, errors = [], []
    for name in names:
        try:
            source = ws.module_source(run, name, one)
            if source.hlo_file is None:
                continue  # a dump written without --xla_dump_hlo_as_proto: text only, no instructions
            modules.append((name, ws.hlo_proto(source)))
        except ProfscopeError as e:
            errors.append((name, e))
    if refused is not None:
        refused += [{"file": e.file or f"module {name}", "reason": e.message} for name, e in errors]
    elif errors:
        raise errors[0][1]
    return analysis_hlo.hlo_findings(modules, link, op_share_of(ws, run, one))


def op_share_of(ws, run: Run, host: str | None):
    """``op_share(module, instruction)``: the instruction's self time over the device time
    of the host (XProf's hlo_stats "Total self time (%)" over device planes, idle included);
    None where the run has no device op metrics (a dump, a CPU-only profile)."""
    if run.kind is not RunKind.PROFILE or (host is None and len(run.hosts) != 1):
        return None
    try:
        db = ws.op_metrics(run, host or run.hosts[0])
    except ProfscopeError:
        return None
    if not db.total_time_ps or not db.metrics:
        return None

    def share(module: str, instruction: str) -> float | None:
        m = _PROGRAM_ID.search(module)
        metric = db.metrics.get((int(m.group(1)), instruction)) if m else None
        return metric.self_time_ps / db.total_time_ps if metric is not None else None

    return share
