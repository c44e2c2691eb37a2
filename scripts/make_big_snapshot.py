"""Write a realistic large PyTorch CUDA memory snapshot pickle (2026 structure).

    python scripts/make_big_snapshot.py OUT.pickle [--target-mb 1000] [--seed 0]

Millions of alloc / free_requested / free_completed entries with time_us,
compile_context, user_metadata and deep (40-70 frame) C++ + Python stacks drawn from a
pool of 4000 call sites, plus one segment whose blocks are the trace's live set at the
end. Written chunk by chunk so the generator stays small in memory: each chunk of 1000
entries is pickled (protocol 2, whose BINPUT opcodes carry explicit memo indices, so a
chunk's memo entries simply overwrite the previous chunk's) and spliced, as
``MARK items APPENDS``, into one hand-written top-level dict. Frames are shared inside a
chunk only (torch shares them file-wide), so this file unpickles into *more* objects than
a real one of the same size: a conservative benchmark. Not for the repo.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random


def _short_str(s: str) -> bytes:
    b = s.encode()
    return b"X" + len(b).to_bytes(4, "little") + b  # BINUNICODE


def _inner(obj) -> bytes:
    """Opcodes that push ``obj`` (no PROTO, no STOP)."""
    data = pickle.dumps(obj, protocol=2)
    assert data[:2] == b"\x80\x02" and data[-1:] == b"."
    return data[2:-1]


def _append_items(items: list) -> bytes:
    """``MARK items APPENDS``: appends ``items`` to the list on top of the stack."""
    assert 0 < len(items) <= 1000  # pickle batches APPENDS by 1000
    body = _inner(items)
    assert body[:3] == b"]q\x00" and body[3:4] == b"(" and body[-1:] == b"e"
    return body[3:]


def make_stacks(rng: random.Random, n_sites: int):
    cpp = [{"name": f"c10::cuda::CUDACachingAllocator::Native::fn_{i}(unsigned long)",
            "filename": rng.choice(["??", "CUDACachingAllocator.cpp", "RegisterCUDA_0.cpp", ""]),
            "line": 0} for i in range(300)]
    py = [{"name": f"layer_{i}_forward", "filename": f"/home/user/proj/model/mod_{i % 40}.py",
           "line": 10 + i} for i in range(600)]
    out = []
    for _ in range(n_sites):
        depth = rng.randint(40, 70)
        out.append([rng.choice(cpp) for _ in range(depth // 2)]
                   + [rng.choice(py) for _ in range(depth - depth // 2)])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--target-mb", type=float, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    stacks = make_stacks(rng, 4000)
    base = 0x7F0000000000
    seg_size = 1 << 40
    live: dict[int, tuple[int, int]] = {}
    t = 1_780_000_000_000_000
    target = int(args.target_mb * (1 << 20))
    n = 0
    next_addr = base
    with open(args.out, "wb") as f:
        f.write(b"\x80\x02}(")  # PROTO 2, EMPTY_DICT, MARK (for SETITEMS)
        f.write(_short_str("device_traces") + b"]]")  # key, device list, device-0 trace
        while f.tell() < target:
            chunk = []
            while len(chunk) < 999:
                t += rng.randint(1, 50)
                if live and (len(live) > 5000 or rng.random() < 0.48):
                    addr = next(iter(live)) if rng.random() < 0.7 else rng.choice(list(live)[:64])
                    size, site = live.pop(addr)
                    for action in ("free_requested", "free_completed"):
                        chunk.append({"action": action, "addr": addr, "size": size, "stream": 0,
                                      "time_us": t, "frames": stacks[site],
                                      "compile_context": "N/A", "user_metadata": ""})
                else:
                    size = rng.choice([512, 4096, 1 << 20, 2 << 20, 3 << 21, 48 << 20])
                    addr = next_addr
                    next_addr += (size + 511) // 512 * 512
                    site = rng.randrange(len(stacks))
                    live[addr] = (size, site)
                    chunk.append({"action": "alloc", "addr": addr, "size": size, "stream": 0,
                                  "time_us": t, "frames": stacks[site],
                                  "compile_context": "N/A", "user_metadata": ""})
            n += len(chunk)
            f.write(_append_items(chunk))
        f.write(b"a")  # APPEND the device-0 trace to the device list
        blocks = [{"address": a, "size": (s + 511) // 512 * 512, "requested_size": s,
                   "state": "active_allocated", "frames": stacks[site]}
                  for a, (s, site) in sorted(live.items())]
        segs = [{"device": 0, "address": base, "total_size": seg_size,
                 "allocated_size": sum(b["size"] for b in blocks),
                 "active_size": sum(b["size"] for b in blocks),
                 "requested_size": sum(b["requested_size"] for b in blocks),
                 "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                 "is_expandable": False, "frames": [], "blocks": blocks}]
        f.writelines(_short_str(key) + _inner(value) for key, value in (("segments", segs),
                           ("allocator_settings", {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                                   "expandable_segments": False}),
                           ("external_annotations", [])))
        f.write(b"u.")  # SETITEMS, STOP
    print(f"{args.out}: {os.path.getsize(args.out):,} bytes, {n:,} trace entries, "
          f"{len(live):,} live blocks")


if __name__ == "__main__":
    main()
