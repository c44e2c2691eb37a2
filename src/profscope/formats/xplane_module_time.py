"""How long each XLA module ran in a profile: the total time of its module events.

Which module a user means when they ask "will it fit" is the one that ran most, not the
one with the largest compiled peak (that is often a one-off initialiser). The profile
says what ran:

* GPU/TPU device planes have an ``XLA Modules`` line (XProf's derived line on GPU, the
  runtime's own on TPU): one event per run of a module, named by the module, with a
  ``program_id`` stat (tsl ``xplane_schema.cc`` ``kProgramId``).
* On CPU (and on host threads) the runtime writes one event per HLO op with the stats
  ``hlo_module`` and ``program_id`` (XLA ``thunk_executor.cc``): a module's time is the
  sum of its ops' durations.

Per plane the ``XLA Modules`` line wins when there is one (its ops would count the same
time twice). Modules are keyed as the memory viewer names them, ``<name>(<program_id>)``.
Planes are read one at a time (:func:`profscope.formats.xplane.read_plane`).
"""

from __future__ import annotations

from typing import IO

from google.protobuf.message import DecodeError

from profscope.formats import protowire as wire
from profscope.formats import xplane

__all__ = ["module_run_times"]

XLA_MODULE_LINE = "XLA Modules"
METADATA_PLANE = "/host:metadata"


def _key(name: str, program_id) -> str:
    if program_id is None or (name.endswith(")") and "(" in name):
        return name
    return f"{name}({program_id})"


def module_run_times(raw: IO[bytes], path: str) -> dict[str, dict]:
    """``{"<module>(<program_id>)": {"ps": total duration, "events": count, "source":
    "XLA Modules line" | "HLO op events"}}`` over every plane but ``/host:metadata``."""
    out: dict[str, dict] = {}
    try:
        index = xplane.scan(raw, path)
        for ref in index.planes:
            if ref.name == METADATA_PLANE:
                continue
            plane = xplane.read_plane(raw, ref, path)
            names = {k: v.name for k, v in plane.stat_metadata.items()}
            meta_stats: dict[int, dict] = {}

            def stats_of(md_id: int) -> dict:
                s = meta_stats.get(md_id)
                if s is None:
                    md = plane.event_metadata.get(md_id)
                    s = {names.get(st.metadata_id): xplane.stat_value(st, names) for st in (md.stats if md else [])}
                    meta_stats[md_id] = s
                return s

            has_module_line = any(line.name == XLA_MODULE_LINE for line in plane.lines)
            for line in plane.lines:
                if has_module_line and line.name != XLA_MODULE_LINE:
                    continue
                source = "XLA Modules line" if line.name == XLA_MODULE_LINE else "HLO op events"
                for ev in line.events:
                    md_stats = stats_of(ev.metadata_id)
                    own = {names.get(st.metadata_id): st for st in ev.stats}
                    if source == "HLO op events" and "hlo_module" not in own and "hlo_module" not in md_stats:
                        continue
                    pid = xplane.stat_value(own["program_id"], names) if "program_id" in own else md_stats.get("program_id")
                    if "hlo_module" in own:
                        name = xplane.stat_value(own["hlo_module"], names)
                    elif "hlo_module" in md_stats:
                        name = md_stats["hlo_module"]
                    else:
                        md = plane.event_metadata.get(ev.metadata_id)
                        name = (md.name if md else "") or ""
                    if isinstance(name, bytes):
                        name = name.decode("utf-8", "replace")
                    if not name:
                        continue
                    row = out.setdefault(_key(str(name), pid), {"ps": 0, "events": 0, "source": source})
                    row["ps"] += int(ev.duration_ps)
                    row["events"] += 1
    except (wire.Truncated, OSError, EOFError, ValueError) as e:
        raise wire.wire_error(path, "XSpace profile", e) from e
    except DecodeError as e:  # upb's parser
        raise wire.wire_error(path, "XPlane module events", e) from e
    return out
