"""Builders of PyTorch CUDA memory snapshots in the real structure, for cases the real
fixtures lack: expandable segments (segment_map/unmap), an oom event, several devices, a
private pool, an overflow flag, a ring-buffer trace (starting mid-run), 2023-era
``history`` blocks. Keys and value shapes follow ``torch.cuda.memory._snapshot``.
"""

from __future__ import annotations

import base64
import json
import pickle

PY_FRAME = {"filename": "/src/train.py", "line": 42, "name": "forward"}
CPP_FRAME = {"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::malloc"}
OPT_FRAME = {"filename": "/src/train.py", "line": 77, "name": "step"}


def frames(*fs):
    return [dict(f) for f in fs]


def block(address, size, requested, state="active_allocated", fr=()):
    return {"address": address, "size": size, "requested_size": requested, "state": state,
            "frames": frames(*fr)}


def segment(device, address, blocks, *, stream=0, seg_type="large", pool=(0, 0),
            expandable=False):
    total = sum(b["size"] for b in blocks)
    active = [b for b in blocks if b["state"].startswith("active")]
    alloc = [b for b in blocks if b["state"] == "active_allocated"]
    return {"device": device, "address": address, "total_size": total,
            "allocated_size": sum(b["size"] for b in alloc),
            "active_size": sum(b["size"] for b in active),
            "requested_size": sum(b["requested_size"] for b in active),
            "stream": stream, "segment_type": seg_type, "segment_pool_id": pool,
            "is_expandable": expandable, "frames": [], "blocks": blocks}


def entry(action, addr, size, t, *, stream=0, fr=(), **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t,
         "frames": frames(*fr), "compile_context": "N/A", "user_metadata": ""}
    e.update(extra)
    return e


SETTINGS = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "max_split_size": -1,
            "garbage_collection_threshold": 0.0, "expandable_segments": True,
            "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
            "pinned_use_cuda_host_register": False, "roundup_power2_divisions": {"1": 0}}

MB = 1 << 20
GB = 1 << 30


def expandable_oom_multidevice() -> dict:
    """Two devices. Device 0: expandable segment grown by segment_map, shrunk by
    segment_unmap, then an OOM. Device 1: a normal segment and a private pool
    (CUDA-graph pool id (1, 0)) on another stream. Overflow flag set."""
    base0 = 0x7F0000000000
    base1 = 0x7E0000000000
    t = 1_700_000_000_000_000
    tr0 = [
        entry("segment_map", base0, 20 * MB, t + 1),
        entry("alloc", base0, 2 * MB, t + 2, fr=(CPP_FRAME, PY_FRAME)),
        entry("alloc", base0 + 2 * MB, 4 * MB, t + 3, fr=(CPP_FRAME, PY_FRAME)),
        entry("free_requested", base0 + 2 * MB, 4 * MB, t + 4, fr=(CPP_FRAME, OPT_FRAME)),
        entry("free_completed", base0 + 2 * MB, 4 * MB, t + 5, fr=(CPP_FRAME, OPT_FRAME)),
        entry("segment_unmap", base0 + 18 * MB, 2 * MB, t + 6),
        entry("oom", 0, 64 * GB, t + 7, fr=(CPP_FRAME, PY_FRAME), device_free=123 * MB),
    ]
    tr1 = [
        entry("segment_alloc", base1, 2 * MB, t + 10, stream=7),
        entry("alloc", base1, 512, t + 11, stream=7, fr=(PY_FRAME,)),
        entry("alloc", base1 + 2 * MB, 1 * MB, t + 12, stream=7, user_metadata="graph",
              compile_context="[0/0] fwd"),
    ]
    segs = [
        segment(0, base0, [block(base0, 2 * MB, 2 * MB, fr=(CPP_FRAME, PY_FRAME)),
                           block(base0 + 2 * MB, 16 * MB, 16 * MB, "inactive")],
                expandable=True),
        segment(1, base1, [block(base1, 512, 512, fr=(PY_FRAME,)),
                           block(base1 + 512, 2 * MB - 512, 2 * MB - 512, "inactive")],
                stream=7, seg_type="small"),
        segment(1, base1 + 2 * MB, [block(base1 + 2 * MB, 2 * MB, 1 * MB)], stream=7,
                pool=(1, 0)),
    ]
    return {"segments": segs, "device_traces": [tr0, tr1], "allocator_settings": SETTINGS,
            "external_annotations": [
                {"stage": "START", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": t + 3},
                {"stage": "END", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": t + 5}],
            "trace_overflow": True}


def ring_buffer() -> dict:
    """A trace that starts mid-run (as after the ring buffer wrapped): frees of blocks
    allocated before recording, no timestamps (2023 trace keys only)."""
    base = 0x100000
    segs = [segment(0, base, [block(base, 1024, 1000), block(base + 1024, 1024, 1024, "inactive")])]
    tr = [{"action": "free_requested", "addr": base + 1024, "size": 1024, "stream": 0},
          {"action": "free_completed", "addr": base + 1024, "size": 1024, "stream": 0},
          {"action": "alloc", "addr": base, "size": 1000, "stream": 0}]
    return {"segments": segs, "device_traces": [tr]}


def legacy_2023() -> dict:
    """2023 era: blocks with ``history`` and no ``address``; no block ``frames``."""
    base = 0x200000
    hist = lambda addr, sz, fr: [{"addr": addr, "real_size": sz, "frames": frames(*fr)}]
    blocks = [
        {"size": 512, "requested_size": 500, "state": "active_allocated", "history": hist(base, 500, (PY_FRAME,))},
        {"size": 1536, "requested_size": 0, "state": "inactive", "history": []},
        {"size": 2048, "state": "active_allocated", "history": hist(base + 2048, 2000, (CPP_FRAME, PY_FRAME))},
    ]
    seg = {"device": 0, "address": base, "total_size": 4096, "allocated_size": 2560,
           "active_size": 2560, "requested_size": 2500, "stream": 0, "segment_type": "small",
           "blocks": blocks}
    return {"segments": [seg], "device_traces": [[{"action": "snapshot", "addr": 0, "size": 2560, "stream": 0}]]}


def to_pickle(snap: dict, protocol: int = 4) -> bytes:
    return pickle.dumps(snap, protocol=protocol)


def to_json(snap: dict) -> bytes:
    return json.dumps(snap).encode()


def to_memory_viz_html(snap: dict) -> bytes:
    """What ``torch.cuda._memory_viz._format_viz`` writes: the pickle padded with NULs to
    a multiple of 3, base64 in ``local_files``, inside a module script."""
    buf = pickle.dumps(snap)
    buf += b"\x00" * (3 - len(buf) % 3)
    files = json.dumps([{"name": "snapshot.pickle", "base64": base64.b64encode(buf).decode()}])
    return ("\n<!DOCTYPE html>\n<html>\n<head>\n</head>\n<body>\n<script type=\"module\">\n"
            "import {add_local_files} from \"https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/"
            "torch/utils/viz/MemoryViz.js\"\n"
            f"const local_files = {files}\nadd_local_files(local_files, 'Active Memory Timeline')\n"
            "</script>\n</body>\n").encode()


#: The real snapshots in ``shared/fixtures/torch_snapshots`` (see its README), relative to
#: that folder: what the builders above complete.
FIXTURE_FILES = [
    "Yiyi-philosophy_LLM-inference/oom_snapshot.pickle",
    "Yiyi-philosophy_LLM-inference/1.3b_snapshot.pickle",
    "LfieLike_SketchKV2/my_snapshot.pickle",
    "Wedsonlin_assignment2-systems/medium_128_inference_memory_snapshot.pickle",
    "Wedsonlin_assignment2-systems/medium_128_training_memory_snapshot.pickle",
]


def segment_freed_mid_trace() -> dict:
    """One device whose largest reservation is gone before the end: a 64 MiB segment
    (reserved, as the caching allocator rounds a large request up) holds a 16 MiB
    activation, which is freed, and ``torch.cuda.empty_cache()`` returns the segment
    (``segment_free``); then a 20 MiB segment takes two allocations (8 + 12 MiB), the
    allocated peak. Reserved: 64 MiB at most, 20 MiB at the allocated peak and at the end."""
    a, b = 0x7F1000000000, 0x7F2000000000
    t = 1_700_000_100_000_000
    tr = [
        entry("segment_alloc", a, 64 * MB, t + 1),
        entry("alloc", a, 16 * MB, t + 2, fr=(CPP_FRAME, PY_FRAME)),
        entry("free_requested", a, 16 * MB, t + 3, fr=(CPP_FRAME, PY_FRAME)),
        entry("free_completed", a, 16 * MB, t + 4, fr=(CPP_FRAME, PY_FRAME)),
        entry("segment_free", a, 64 * MB, t + 5),
        entry("segment_alloc", b, 20 * MB, t + 6),
        entry("alloc", b, 8 * MB, t + 7, fr=(CPP_FRAME, PY_FRAME)),
        entry("alloc", b + 8 * MB, 12 * MB, t + 8, fr=(CPP_FRAME, OPT_FRAME)),
    ]
    segs = [segment(0, b, [block(b, 8 * MB, 8 * MB, fr=(CPP_FRAME, PY_FRAME)),
                           block(b + 8 * MB, 12 * MB, 12 * MB, fr=(CPP_FRAME, OPT_FRAME))])]
    return {"segments": segs, "device_traces": [tr]}
