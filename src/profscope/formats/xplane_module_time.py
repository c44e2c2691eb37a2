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
Planes are read one at a time, their events decoded in bulk (the OOM risk reads this for
every profile: a Python loop over protobuf events took 15 s on a 308 MB profile).
"""

from __future__ import annotations

from typing import IO

import numpy as np

from profscope.formats import xplane
from profscope.formats import xplane_wire as xw
from profscope.formats.protos import xplane_pb2

__all__ = ["module_run_times"]

XLA_MODULE_LINE = "XLA Modules"
METADATA_PLANE = "/host:metadata"


def _key(name: str, program_id) -> str:
    if program_id is None or (name.endswith(")") and "(" in name):
        return name
    return f"{name}({program_id})"


CHUNK_EVENTS = 1 << 20  # events decoded at once (bounds the decoder's memory)


def module_run_times(raw: IO[bytes], path: str) -> dict[str, dict]:
    """``{"<module>(<program_id>)": {"ps": total duration, "events": count, "source":
    "XLA Modules line" | "HLO op events"}}`` over every plane but ``/host:metadata``.

    Events are decoded in bulk (:mod:`profscope.formats.xplane_wire`): an event's module
    is its own last ``hlo_module`` stat, else its metadata's, else (on the XLA Modules
    line) its metadata's name; its program id its own last ``program_id`` stat, else
    its metadata's. Keys come out in the order their first events are stored."""
    out: dict[str, dict] = {}
    index = xplane.scan(raw, path)
    with xw.xspace_errors(path):
        raw.seek(0)
        f, size = xplane.open_stream(raw, path)
        for ref in sorted(index.planes, key=lambda r: r.offset):  # a gzip stream seeks forward only
            if ref.name == METADATA_PLANE:
                continue
            data, _ = xw.map_plane_bytes(f, size, ref, pad=xw.PAD + (-ref.length) % 8)
            _plane_times(data, ref.length, out)
            del data
    return out


def _plane_times(data, length: int, out: dict[str, dict]) -> None:
    meta_bytes, line_spans = xw.split_plane(data, length)
    plane = xplane_pb2.XPlane.FromString(meta_bytes)
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    b = np.frombuffer(data, dtype=np.uint8)
    lines = []
    for a, z in line_spans:
        head, starts, ends = xw.line_events(data, b, a, z)
        lines.append((xplane_pb2.XLine.FromString(head).name, starts, ends))
    has_module_line = any(name == XLA_MODULE_LINE for name, _, _ in lines)
    source = "XLA Modules line" if has_module_line else "HLO op events"
    kept = [(s, e) for name, s, e in lines if not has_module_line or name == XLA_MODULE_LINE]
    if not kept:
        return
    starts = xw.cat([s for s, _ in kept], np.int64)
    ends = xw.cat([e for _, e in kept], np.int64)
    # per event metadata: its hlo_module / program_id stats (the metadata's last of each)
    # and its name, as the Python values xplane.stat_value gives
    md = {}
    for k, m in plane.event_metadata.items():
        st = {names.get(x.metadata_id): x for x in m.stats}
        md[k] = (xplane.stat_value(st["hlo_module"], names) if "hlo_module" in st else _ABSENT,
                 xplane.stat_value(st["program_id"], names) if "program_id" in st else None, m.name or "")
    ids = np.fromiter(md, np.int64, len(md))
    md_has_mod = ids[np.fromiter((m[0] is not _ABSENT for m in md.values()), bool, len(md))]
    strings = xw.Strings(data, names)
    wanted = {k: v for k, v in names.items() if v in ("hlo_module", "program_id")}  # the only stats decoded
    for lo in range(0, len(starts), CHUNK_EVENTS):
        ev = xw.decode_events(b, starts[lo:lo + CHUNK_EVENTS], ends[lo:lo + CHUNK_EVENTS],
                              np.zeros(min(CHUNK_EVENTS, len(starts) - lo), np.int32), wanted)
        _chunk_times(ev, md, md_has_mod, strings, source, out)


_ABSENT = object()  # no such stat (a stat without a value reads None)


def _chunk_times(ev, md: dict, md_has_mod: np.ndarray, strings, source: str, out: dict[str, dict]) -> None:
    """Add one chunk's events to ``out``; ``md_has_mod``: the metadata ids with a module stat."""
    mod = xw.StatView(ev, "hlo_module")
    pid = xw.StatView(ev, "program_id")
    n = ev.n
    mod_case = np.zeros(n, np.int8)
    mod_case[mod.present] = mod.ks.case[mod.stat[mod.present]]
    pid_case = np.zeros(n, np.int8)
    pid_case[pid.present] = pid.ks.case[pid.stat[pid.present]]
    named_by_md = ~mod.present & np.isin(ev.metadata_id, md_has_mod)
    if source == "XLA Modules line":  # there, an event without the stat is named by its metadata
        named_by_md = ~mod.present
    plain_pid = ~pid.present | (pid_case == xw.INT64) | (pid_case == xw.UINT64)
    # grouped in bulk: a str/ref module of its own, or its metadata's; an integer program
    # id of its own, or its metadata's. One by one: the other value types. Left out: HLO
    # op events with no module at all (most of a host plane's events).
    own = mod.present & ((mod_case == xw.STR) | (mod_case == xw.REF)) & plain_pid
    by_md = named_by_md & plain_pid
    odd = (mod.present & ~own) | (named_by_md & ~plain_pid)
    rows: list[tuple[str, int, int]] = []  # (key, ps, events), with where each first occurs
    first_at: list[int] = []
    sel = np.flatnonzero(own | by_md)
    if len(sel):
        own_name = strings.str_or_ref(mod.ks, mod.stat[sel]).astype(np.int64)
        pid_kind = np.where(pid.present[sel], np.where(pid_case[sel] == xw.UINT64, 2, 1), 0)
        pid_value = pid.int_or_uint_value()[sel].view(np.int64)
        mid = ev.metadata_id[sel]
        code = np.stack([own[sel].astype(np.int64), np.where(own[sel], own_name, mid), pid_kind,
                         np.where(pid_kind > 0, pid_value, mid)], axis=1)
        uniq, first, inv = np.unique(code, axis=0, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        ps = _int_sums(inv, ev.duration_ps[sel], len(uniq))
        count = np.bincount(inv, minlength=len(uniq))
        for (is_own, who, kind, value), at, p, c in zip(uniq.tolist(), first.tolist(), ps.tolist(), count.tolist()):
            if is_own:
                name = strings.table[who]
            else:
                m_mod, m_pid, m_name = md.get(who, (_ABSENT, None, ""))
                name = m_name if m_mod is _ABSENT else m_mod
            if kind == 0:
                program = md.get(value, (_ABSENT, None, ""))[1]
            else:
                program = value if kind == 1 else value % (1 << 64)
            if isinstance(name, bytes):
                name = name.decode("utf-8", "replace")
            if not name:
                continue
            rows.append((_key(str(name), program), p, c))
            first_at.append(int(sel[at]))
    for i in np.flatnonzero(odd).tolist():
        m_mod, m_pid, m_name = md.get(int(ev.metadata_id[i]), (_ABSENT, None, ""))
        if mod.present[i]:
            name = _value(mod, i, strings)
        else:
            name = m_name if m_mod is _ABSENT else m_mod
        program = _value(pid, i, strings) if pid.present[i] else m_pid
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        if not name:
            continue
        rows.append((_key(str(name), program), int(ev.duration_ps[i]), 1))
        first_at.append(i)
    for k in np.argsort(np.asarray(first_at, np.int64), kind="stable").tolist():
        key, p, c = rows[k]
        row = out.setdefault(key, {"ps": 0, "events": 0, "source": source})
        row["ps"] += p
        row["events"] += c


def _int_sums(inv: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """Exact int64 sums of ``values`` per group ``inv`` (bincount would sum in float64)."""
    order = np.argsort(inv, kind="stable")
    starts = np.searchsorted(inv[order], np.arange(k))
    return np.add.reduceat(values[order].astype(np.int64), starts) if len(order) else np.zeros(k, np.int64)


def _value(view, i: int, strings):
    """One event's stat as xplane.stat_value reads it."""
    s = int(view.stat[i])
    case = int(view.ks.case[s])
    bits = view.ks.value[s]
    if case == 0:
        return None
    if case == xw.INT64:
        return int(bits.view(np.int64))
    if case == xw.UINT64:
        return int(bits)
    if case == xw.DOUBLE:
        return float(np.array([bits]).view(np.float64)[0])
    if case == xw.REF:
        return strings.stat_names.get(int(bits), "")
    raw = bytes(strings.data[int(bits):int(view.ks.str_end[s])])
    return raw.decode("utf-8", "replace") if case == xw.STR else raw
