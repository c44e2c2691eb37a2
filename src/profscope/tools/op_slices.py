"""Where one HLO instruction of one module ran: its slices in a host's trace index
(tools/trace_index.py), found by name, without decoding the profile again.

- GPU and TPU profiles put each HLO op on the device planes' ``XLA Ops`` lines (a GPU's
  ``XLA Ops - from #<stream>``, one per stream), named by the
  instruction, and the module's runs on the ``XLA Modules`` line beside them, named
  ``<module>(<program id>)`` as the memory viewer names modules: an op's slice belongs to
  the module whose run on the same device (pid) covers its start.
- A CPU profile (jax's thunk executor) has no such lines: the ops are slices of the host
  threads named by the instruction, each with ``hlo_op``, ``hlo_module`` and ``program_id``
  args; a slice belongs to the module its args name (decoded for the candidates only).
"""

from __future__ import annotations

import numpy as np

from profscope.tools.trace_index import TraceIndex

OPS_LINE = "XLA Ops"
MODULES_LINE = "XLA Modules"
#: The most candidate slices whose args are decoded to check their module (CPU profiles).
MAX_ARG_CHECKS = 256


def _names_equal(ix: TraceIndex, name: str) -> list[int]:
    return [i for i, n in enumerate(ix.names) if n == name]


def _tracks_named(ix: TraceIndex, name: str) -> np.ndarray:
    """The tracks of a device line: ``XLA Ops`` on a TPU, ``XLA Ops - from #16`` on a GPU
    (XProf derives the lines once per stream and names the stream)."""
    return np.asarray([i for i, t in enumerate(ix.tracks) if t["name"] == name or t["name"].startswith(name + " - from ")],
                      dtype=np.int64)


def op_rows(ix: TraceIndex, op: str, module: str | None) -> np.ndarray:
    """The rows of ``op``'s slices in ``module`` (None: any module), by start. On a CPU
    profile only the first :data:`MAX_ARG_CHECKS` slices of that name are checked
    (:func:`unchecked` says how many were not)."""
    rows = ix.rows_named(_names_equal(ix, op))
    if not rows.size:
        return rows
    rows = rows[np.argsort(np.asarray(ix.cols["start"][rows]), kind="stable")]
    tracks = np.asarray(ix.cols["track"][rows]).astype(np.int64)
    op_tracks = _tracks_named(ix, OPS_LINE)
    on_ops = np.isin(tracks, op_tracks)
    if on_ops.any():
        rows = rows[on_ops]
        return rows if module is None else _within_module_runs(ix, rows, module)
    return rows if module is None else _module_by_args(ix, rows, op, module)


def _within_module_runs(ix: TraceIndex, rows: np.ndarray, module: str) -> np.ndarray:
    mod_tracks = _tracks_named(ix, MODULES_LINE)
    mrows = ix.rows_named(_names_equal(ix, module))
    mrows = mrows[np.isin(np.asarray(ix.cols["track"][mrows]).astype(np.int64), mod_tracks)]
    if not mrows.size:
        # The module never ran here (or this profile keeps no XLA Modules line): an op of
        # the same name may be another module's, so nothing is claimed.
        return rows[:0]
    pid_of = np.asarray([t["pid"] for t in ix.tracks], dtype=np.int64)
    r_pid = pid_of[np.asarray(ix.cols["track"][rows]).astype(np.int64)]
    r_start = np.asarray(ix.cols["start"][rows]).astype(np.int64)
    m_pid = pid_of[np.asarray(ix.cols["track"][mrows]).astype(np.int64)]
    m_start = np.asarray(ix.cols["start"][mrows]).astype(np.int64)
    m_end = m_start + np.asarray(ix.cols["dur"][mrows]).astype(np.int64)
    keep = np.zeros(len(rows), bool)
    for pid in np.unique(r_pid):
        sel = m_pid == pid
        if not sel.any():
            continue
        order = np.argsort(m_start[sel])
        s, e = m_start[sel][order], m_end[sel][order]
        e = np.maximum.accumulate(e)  # runs may nest or overlap: the furthest end so far
        mine = r_pid == pid
        k = np.searchsorted(s, r_start[mine], side="right") - 1
        ok = k >= 0
        ok[ok] = r_start[mine][ok] <= e[k[ok]]
        keep[np.flatnonzero(mine)[ok]] = True
    return rows[keep]


def _module_by_args(ix: TraceIndex, rows: np.ndarray, op: str, module: str) -> np.ndarray:
    keep = []
    for row in rows[:MAX_ARG_CHECKS].tolist():
        args = ix.args(row)
        name, pid = args.get("hlo_module"), args.get("program_id")
        if name is None or args.get("hlo_op", op) != op:
            continue
        full = str(name) if pid is None or str(name).endswith(f"({pid})") else f"{name}({pid})"
        if full == module or (pid is None and module.startswith(f"{name}(")):
            keep.append(row)
    return np.asarray(keep, dtype=np.int64)


def unchecked(ix: TraceIndex, op: str) -> int:
    """How many slices named ``op`` :func:`op_rows` left unchecked on a profile without
    XLA Ops lines (their module is read from each slice's args, for the first
    MAX_ARG_CHECKS only): its count is then a lower bound."""
    if _tracks_named(ix, OPS_LINE).size:
        return 0
    return max(0, len(ix.rows_named(_names_equal(ix, op))) - MAX_ARG_CHECKS)
