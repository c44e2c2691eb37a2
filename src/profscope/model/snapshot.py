"""A PyTorch CUDA memory snapshot as columns: the model the snapshot views consume.

:mod:`profscope.formats.snapshot_pickle` reads ``torch.cuda.memory._dump_snapshot``'s files
(pickle, JSON, ``_memory_viz`` HTML) into a :class:`Snapshot`; ``tools/memory_profile_snapshot.py``
builds the views from it. Every column is numpy, every table a list, so a snapshot of
millions of trace entries is a few arrays, not millions of dicts.

:func:`save_model` / :func:`load_model` keep a loaded snapshot on local disk (the cache
stores this model, not the pickle): ``.npy`` columns plus ``model.json``;
:data:`MODEL_FORMAT_VERSION` is part of the cache key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from profscope.model import npy_files as npy

#: Trace action codes. Unknown actions get codes from len(ACTIONS) on, named in
#: ``Snapshot.action_names``.
ACTIONS = (
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap", "snapshot", "oom",
)
#: Block state codes; unknown states are appended in ``Snapshot.state_names``.
STATES = ("active_allocated", "active_pending_free", "active_awaiting_free", "inactive")
#: Top-level keys that say the trace ring buffer overflowed ("events may be missing").
#: torch keeps the last ``max_entries`` (``_record_memory_history(max_entries=...)``)
#: trace entries in a ring buffer; newer writers may flag it explicitly.
OVERFLOW_KEYS = ("trace_overflow", "device_traces_overflow", "overflow")

#: ``time_us`` of a trace entry without one (files before 2024).
NO_TIME = -1


# -- the model ------------------------------------------------------------------------


@dataclass
class DeviceTrace:
    """One device's trace entries (``device_traces[device]``), one row per entry, in order.

    ``action`` uint8 code into ``Snapshot.action_names``; ``addr``, ``size``, ``stream``
    int64 (missing → 0); ``time_us`` int64 (2024+; -1 when absent); ``stack`` int32 into
    ``Snapshot.stacks`` (0 = the empty stack, also when ``frames`` is absent);
    ``compile_context`` / ``user_metadata`` int32 into ``Snapshot.strings`` (2025+; -1
    when absent); ``device_free`` int64 (``oom`` entries; -1 otherwise).
    """

    device: int
    action: np.ndarray
    addr: np.ndarray
    size: np.ndarray
    stream: np.ndarray
    time_us: np.ndarray
    stack: np.ndarray
    compile_context: np.ndarray
    user_metadata: np.ndarray
    device_free: np.ndarray

    def __len__(self) -> int:
        return int(self.action.shape[0])


@dataclass
class Segments:
    """The final allocator state's segments (``snapshot["segments"]``), one row each.

    ``device``, ``address``, ``total_size``, ``allocated_size``, ``active_size``,
    ``requested_size``, ``stream`` int64 (missing → 0; 2023 files have all of them);
    ``segment_type`` int32 into ``Snapshot.strings`` ("small"/"large"); ``pool_id`` int64
    (n, 2) from ``segment_pool_id`` (2024+; (0, 0) is the default pool, a private pool —
    CUDA graphs, ``torch.cuda.MemPool`` — has another id; (-1, -1) when absent);
    ``is_expandable`` bool (2024+; expandable segments); ``stack`` int32 into
    ``Snapshot.stacks`` (segment ``frames``, 2024+); ``block_start``/``block_count``
    int64: the segment's rows in :class:`Blocks`.
    """

    device: np.ndarray
    address: np.ndarray
    total_size: np.ndarray
    allocated_size: np.ndarray
    active_size: np.ndarray
    requested_size: np.ndarray
    stream: np.ndarray
    segment_type: np.ndarray
    pool_id: np.ndarray
    is_expandable: np.ndarray
    stack: np.ndarray
    block_start: np.ndarray
    block_count: np.ndarray

    def __len__(self) -> int:
        return int(self.address.shape[0])


@dataclass
class Blocks:
    """All blocks of all segments, segment by segment in file order, one row each.

    ``segment`` int64 row in :class:`Segments`; ``address`` int64 (2024+; for 2023 blocks
    computed as segment address + sizes of the blocks before it, and
    ``address_computed`` is True); ``size`` int64 (rounded block size); ``requested_size``
    int64 (the request; 2023 files without it: the first ``history`` entry's
    ``real_size``, as ``_memory_viz._block_extra_legacy`` does; else ``size``);
    ``state`` uint8 into ``Snapshot.state_names``; ``stack`` int32 into
    ``Snapshot.stacks`` (``frames``, or the first ``history`` entry's frames in 2023).
    """

    segment: np.ndarray
    address: np.ndarray
    size: np.ndarray
    requested_size: np.ndarray
    state: np.ndarray
    stack: np.ndarray
    address_computed: np.ndarray

    def __len__(self) -> int:
        return int(self.address.shape[0])


@dataclass
class Snapshot:
    """A normalized snapshot.

    ``strings``: the string table (filenames, function names, segment types,
    compile_context, user_metadata). ``frame_filename``/``frame_name`` int32 into
    ``strings`` and ``frame_line`` int64: the deduplicated frame table, one row per
    distinct (filename, line, name). ``stacks``: deduplicated tuples of frame ids, in
    torch's order (innermost first); ``stacks[0] == ()``. ``traces``: one
    :class:`DeviceTrace` per ``device_traces`` list (index = device). ``devices``: sorted
    device indices seen in traces (non-empty) or segments. ``allocator_settings`` (2024+)
    and ``external_annotations`` (2025+: ``{stage, name, device, time_us}``) as in the
    file. ``oom_events``: one dict per ``oom`` entry (device, index into its trace, size,
    device_free, stream, time_us, stack). ``trace_overflow``: True when the file says its
    trace ring buffer overflowed ("events may be missing"). ``era_keys``: the optional
    keys seen, for the settings view. ``format``: "pickle", "json" or "html";
    ``pickle_protocol`` when known.
    """

    path: str
    format: str
    pickle_protocol: int | None
    strings: list[str]
    frame_filename: np.ndarray
    frame_line: np.ndarray
    frame_name: np.ndarray
    stacks: list[tuple[int, ...]]
    traces: list[DeviceTrace]
    segments: Segments
    blocks: Blocks
    devices: list[int]
    allocator_settings: dict | None
    external_annotations: list
    oom_events: list[dict]
    trace_overflow: bool
    era_keys: dict[str, list[str]]
    action_names: list[str] = field(default_factory=lambda: list(ACTIONS))
    state_names: list[str] = field(default_factory=lambda: list(STATES))

    def frame(self, i: int) -> tuple[str, int, str]:
        """(filename, line, name) of frame ``i``."""
        return (self.strings[self.frame_filename[i]], int(self.frame_line[i]),
                self.strings[self.frame_name[i]])

    def stack_frames(self, stack_id: int) -> list[tuple[str, int, str]]:
        return [self.frame(f) for f in self.stacks[stack_id]]

    def action_code(self, name: str) -> int:
        return self.action_names.index(name)

    def state_code(self, name: str) -> int:
        return self.state_names.index(name)


# -- the model on local disk (the cache) ------------------------------------------------

#: Bump when the saved layout changes: it is part of the cache key. (2: strings with
#: their lone surrogates escaped, verbatim fields bounded.)
MODEL_FORMAT_VERSION = 2


def _json_safe(obj: Any) -> Any:
    """Allocator settings and annotations as JSON takes them (tuples become lists, other
    values their repr)."""
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)


def save_model(snap: Snapshot, folder: Path) -> None:
    """Write a loaded snapshot's columns (``.npy``) and tables (``model.json``) into an
    empty folder, so that opening the file again is a read of arrays, not a re-parse."""
    folder = Path(folder)
    arrays = {"frame_filename": snap.frame_filename, "frame_line": snap.frame_line,
              "frame_name": snap.frame_name,
              "stack_items": np.fromiter((f for st in snap.stacks for f in st), np.int32),
              "stack_offsets": np.cumsum([0] + [len(st) for st in snap.stacks], dtype=np.int64)}
    for i, tr in enumerate(snap.traces):
        arrays.update({f"trace{i}_{f.name}": getattr(tr, f.name) for f in fields(DeviceTrace) if f.name != "device"})
    arrays.update({f"segments_{f.name}": getattr(snap.segments, f.name) for f in fields(Segments)})
    arrays.update({f"blocks_{f.name}": getattr(snap.blocks, f.name) for f in fields(Blocks)})
    for name, a in arrays.items():
        np.save(folder / f"{name}.npy", np.asarray(a))
    meta = {"version": MODEL_FORMAT_VERSION, "path": snap.path, "format": snap.format,
            "pickle_protocol": snap.pickle_protocol, "strings": snap.strings,
            "traces": [tr.device for tr in snap.traces], "devices": snap.devices,
            "allocator_settings": _json_safe(snap.allocator_settings),
            "external_annotations": _json_safe(snap.external_annotations),
            "oom_events": snap.oom_events, "trace_overflow": snap.trace_overflow,
            "era_keys": snap.era_keys, "action_names": snap.action_names, "state_names": snap.state_names}
    (folder / "model.json").write_text(json.dumps(meta), encoding="utf-8")


def load_model(folder: Path) -> Snapshot:
    """The snapshot :func:`save_model` wrote."""
    folder = Path(folder)
    meta = json.loads((folder / "model.json").read_text(encoding="utf-8"))
    if meta.get("version") != MODEL_FORMAT_VERSION:
        raise ValueError(f"{folder}: saved model version {meta.get('version')}, not {MODEL_FORMAT_VERSION}")

    def arr(name: str) -> np.ndarray:
        return npy.load(folder / f"{name}.npy")

    items, offsets = arr("stack_items").tolist(), arr("stack_offsets").tolist()
    stacks = [tuple(items[a:z]) for a, z in pairwise(offsets)]
    traces = [DeviceTrace(d, *(arr(f"trace{i}_{f.name}") for f in fields(DeviceTrace) if f.name != "device"))
              for i, d in enumerate(meta["traces"])]
    return Snapshot(
        path=meta["path"], format=meta["format"], pickle_protocol=meta["pickle_protocol"],
        strings=meta["strings"], frame_filename=arr("frame_filename"), frame_line=arr("frame_line"),
        frame_name=arr("frame_name"), stacks=stacks, traces=traces,
        segments=Segments(*(arr(f"segments_{f.name}") for f in fields(Segments))),
        blocks=Blocks(*(arr(f"blocks_{f.name}") for f in fields(Blocks))),
        devices=meta["devices"], allocator_settings=meta["allocator_settings"],
        external_annotations=meta["external_annotations"], oom_events=meta["oom_events"],
        trace_overflow=meta["trace_overflow"], era_keys=meta["era_keys"],
        action_names=meta["action_names"], state_names=meta["state_names"])
