"""Write a realistic large PyTorch CUDA memory snapshot pickle (2026 structure).

    python scripts/make_big_snapshot.py OUT.pickle [--target-mb 1000] [--seed 0]

Millions of alloc / free_requested / free_completed entries with time_us,
compile_context, user_metadata and deep (40-70 frame) C++ + Python stacks drawn from a
pool of 4000 call sites, plus one segment whose blocks are the trace's live set at the
end.

The file is what ``pickle.dump(torch.cuda.memory._snapshot(), f, protocol=2)`` writes
for such a trace, opcode for opcode, but streamed so the generator stays small in
memory. It shares objects the way torch's snapshot does (``torch/csrc/cuda/Module.cpp``
``_memorySnapshot`` symbolizes each distinct frame once and caches the frame list per
``CapturedTraceback*``): every frame dict is written once and referenced by ``BINGET``
afterwards, and an allocation's frame list is written with its ``alloc`` entry and
referenced by its ``free_requested`` / ``free_completed`` entries. Like the pickler,
every dict and list gets a memo slot (``BINPUT``/``LONG_BINPUT``). Not for the repo.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import struct


class Writer:
    """Protocol-2 opcodes for the few kinds of value a snapshot holds."""

    def __init__(self, f):
        self.f = f
        self.buf: list[bytes] = []
        self.next_memo = 0
        self.memo: dict[object, int] = {}  # str / frame key -> memo index

    def put(self) -> None:  # memoize the object on top of the stack, as the pickler does
        i = self.next_memo
        self.next_memo += 1
        self.buf.append(b"q" + bytes([i]) if i < 256 else b"r" + struct.pack("<I", i))

    def get(self, i: int) -> None:
        self.buf.append(b"h" + bytes([i]) if i < 256 else b"j" + struct.pack("<I", i))

    def str(self, s: str) -> None:
        i = self.memo.get(s)
        if i is not None:
            return self.get(i)
        b = s.encode()
        self.buf.append(b"X" + struct.pack("<I", len(b)) + b)
        self.memo[s] = self.next_memo
        self.put()

    def int(self, v: int) -> None:
        if 0 <= v < 256:
            self.buf.append(b"K" + bytes([v]))
        elif 0 <= v < 65536:
            self.buf.append(b"M" + struct.pack("<H", v))
        elif -2**31 <= v < 2**31:
            self.buf.append(b"J" + struct.pack("<i", v))
        else:
            b = pickle.encode_long(v)
            self.buf.append(b"\x8a" + bytes([len(b)]) + b)

    def value(self, v) -> None:
        if isinstance(v, bool):
            self.buf.append(b"\x88" if v else b"\x89")
        elif isinstance(v, int):
            self.int(v)
        elif isinstance(v, str):
            self.str(v)
        elif v is None:
            self.buf.append(b"N")
        else:
            raise TypeError(type(v))

    def dict(self, items) -> None:
        self.buf.append(b"}")
        self.put()
        self.buf.append(b"(")
        for k, v in items:
            self.str(k)
            if callable(v):
                v()
            else:
                self.value(v)
        self.buf.append(b"u")

    def frame(self, fr: tuple[str, int, str]) -> None:
        i = self.memo.get(fr)
        if i is not None:
            return self.get(i)
        self.memo[fr] = self.next_memo  # the dict's own memo slot comes first
        self.dict((("name", fr[2]), ("filename", fr[0]), ("line", fr[1])))

    def frame_list(self, frames) -> int:
        """A new list of frame dicts; returns its memo index for later references."""
        self.buf.append(b"]")
        i = self.next_memo
        self.put()
        for start in range(0, len(frames), 1000):  # the pickler batches APPENDS by 1000
            self.buf.append(b"(")
            for fr in frames[start:start + 1000]:
                self.frame(fr)
            self.buf.append(b"e")
        return i

    def flush(self) -> None:
        self.f.write(b"".join(self.buf))
        self.buf.clear()


def make_stacks(rng: random.Random, n_sites: int):
    cpp = [("??" if i % 4 == 0 else "CUDACachingAllocator.cpp", 0,
            f"c10::cuda::CUDACachingAllocator::Native::fn_{i}(unsigned long)") for i in range(300)]
    py = [(f"/home/user/proj/model/mod_{i % 40}.py", 10 + i, f"layer_{i}_forward") for i in range(600)]
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
    live: dict[int, tuple[int, int, int]] = {}  # addr -> (size, site, frame list memo index)
    t = 1_780_000_000_000_000
    target = int(args.target_mb * (1 << 20))
    n = 0
    next_addr = base
    with open(args.out, "wb") as f:
        w = Writer(f)
        w.buf.append(b"\x80\x02}")  # PROTO 2, the top-level dict
        w.put()
        w.buf.append(b"(")  # MARK for its SETITEMS
        w.str("device_traces")
        w.buf.append(b"]")  # the list of devices
        w.put()
        w.buf.append(b"]")  # device 0's trace
        w.put()
        while f.tell() < target:
            w.buf.append(b"(")
            batch = 0
            while batch < 998:
                t += rng.randint(1, 50)
                if live and (len(live) > 5000 or rng.random() < 0.48):
                    addr = next(iter(live)) if rng.random() < 0.7 else rng.choice(list(live)[:64])
                    size, site, frames_at = live.pop(addr)
                    for action in ("free_requested", "free_completed"):
                        w.dict((("action", action), ("addr", addr), ("size", size), ("stream", 0),
                                ("time_us", t), ("frames", lambda i=frames_at: w.get(i)),
                                ("compile_context", "N/A"), ("user_metadata", "")))
                        batch += 1
                else:
                    size = rng.choice([512, 4096, 1 << 20, 2 << 20, 3 << 21, 48 << 20])
                    addr = next_addr
                    next_addr += (size + 511) // 512 * 512
                    site = rng.randrange(len(stacks))
                    at = []
                    w.dict((("action", "alloc"), ("addr", addr), ("size", size), ("stream", 0),
                            ("time_us", t), ("frames", lambda s=site, at=at: at.append(w.frame_list(stacks[s]))),
                            ("compile_context", "N/A"), ("user_metadata", "")))
                    live[addr] = (size, site, at[0])
                    batch += 1
            w.buf.append(b"e")  # APPENDS this batch of entries
            n += batch
            w.flush()
        w.buf.append(b"a")  # APPEND device 0's trace to the device list
        w.str("segments")
        w.buf.append(b"]")
        w.put()
        w.buf.append(b"(")
        blocks = sorted(live.items())
        total = sum((s + 511) // 512 * 512 for _, (s, _, _) in blocks)
        requested = sum(s for _, (s, _, _) in blocks)

        def write_blocks():
            w.buf.append(b"]")
            w.put()
            for start in range(0, len(blocks), 1000):
                w.buf.append(b"(")
                for a, (s, _, frames_at) in blocks[start:start + 1000]:
                    w.dict((("address", a), ("size", (s + 511) // 512 * 512), ("requested_size", s),
                            ("state", "active_allocated"), ("frames", lambda i=frames_at: w.get(i))))
                w.buf.append(b"e")

        def pool_id():
            w.buf.append(b"K\x00K\x00\x86")  # (0, 0): TUPLE2
            w.put()

        def empty_list():
            w.buf.append(b"]")
            w.put()

        w.dict((("device", 0), ("address", base), ("total_size", seg_size), ("allocated_size", total),
                ("active_size", total), ("requested_size", requested), ("stream", 0),
                ("segment_type", "large"), ("segment_pool_id", pool_id), ("is_expandable", False),
                ("frames", empty_list), ("blocks", write_blocks)))
        w.buf.append(b"e")
        w.str("allocator_settings")
        w.dict((("PYTORCH_CUDA_ALLOC_CONF", ""), ("max_split_size", -1), ("expandable_segments", False)))
        w.str("external_annotations")
        empty_list()
        w.buf.append(b"u.")  # SETITEMS, STOP
        w.flush()
    print(f"{args.out}: {os.path.getsize(args.out):,} bytes, {n:,} trace entries, "
          f"{len(live):,} live blocks")


if __name__ == "__main__":
    main()
