"""The seeds of every format: small real files (the bundled demo and the shared public
fixtures, each under ``MAX_SEED_BYTES`` so that a mutant costs well under a second),
builder-made inputs for structures the real files lack, and the reproducers."""

from __future__ import annotations

import pickle
from pathlib import Path

from profscope.testing.fuzz.mutators import Seed
from profscope.testing.fuzz.reproducers import DUMP, XPLANE, live_range_seed, minimal_xspace, reproducers
from profscope.testing.shared_fixtures import shared_fixtures_dir

PACKAGE = Path(__file__).resolve().parents[2]
DEMO = PACKAGE / "demo" / "logdir"  # the bundled demo
MAX_SEED_BYTES = 400_000


def fixtures_dir() -> Path | None:
    """The shared fixtures folder (``$PROFSCOPE_SHARED_FIXTURES`` or ``../shared/fixtures``
    beside the checkout, as tests/conftest.py); None when it is not a folder."""
    return shared_fixtures_dir()


def collect(fixtures: Path | None = None, demo: Path | None = DEMO, max_bytes: int = MAX_SEED_BYTES) -> list[Seed]:
    """Every seed; real files only up to ``max_bytes`` (a bounded CI run takes smaller
    ones: a mutant's cost grows with its size)."""

    def _small(paths):
        return [p for p in sorted(paths) if p.is_file() and p.stat().st_size <= max_bytes]

    from profscope.testing import allocator_xplane, derived_xplane
    from profscope.testing import memory_trace as chrome_builder
    from profscope.testing import torch_snapshot as snap_builder

    fixtures = fixtures if fixtures is not None else fixtures_dir()
    seeds: list[Seed] = []

    def add(fmt, name, files, target):
        seeds.append(Seed(fmt, name, files, target))

    roots = [r for r in (demo, fixtures) if r is not None and r.is_dir()]
    for root in roots:
        tag = "demo" if root == demo else "fixture"
        for p in _small(root.rglob("*.xplane.pb")):
            add("xplane", f"{tag}:{p.parent.parent.parent.parent.name}", {XPLANE: p.read_bytes()}, XPLANE)
        for p in _small(root.rglob("*.hlo.pb")) + _small(root.rglob("*.hlo_proto.pb")):
            add("hlo", f"{tag}:{p.name[:40]}", {f"{DUMP}.hlo.pb": p.read_bytes()}, f"{DUMP}.hlo.pb")
        for p in _small(root.rglob("*.trace.json.gz")):
            if "plugins" in p.parts:
                continue  # a session's trace is read beside its xplane, not as a trace run
            add("trace", f"{tag}:{p.name[:40]}", {"t.trace.json.gz": p.read_bytes()}, "t.trace.json.gz")
        for p in _small(root.rglob("*.memory_timeline.json")):
            trace = p.with_name(p.name.replace(".memory_timeline.json", ".pt.trace.json.gz"))
            if trace.is_file() and trace.stat().st_size <= max_bytes:
                add("memory_timeline", f"{tag}:{p.name[:40]}",
                    {"x.pt.trace.json.gz": trace.read_bytes(), "x.memory_timeline.json": p.read_bytes()},
                    "x.memory_timeline.json")
        for p in _small(root.rglob("*.pickle")):
            add("snapshot", f"{tag}:{p.name[:40]}", {"s.pickle": p.read_bytes()}, "s.pickle")
        bas = _small(root.rglob("*-buffer-assignment.txt"))
        for ba in bas:
            stem = ba.name[: -len("-buffer-assignment.txt")]
            ba_name = f"{DUMP}-buffer-assignment.txt"
            add("dump_text", f"{tag}:ba:{stem[:30]}", {ba_name: ba.read_bytes()}, ba_name)
            rep = ba.with_name(stem + "-memory-usage-report.txt")
            if rep.is_file():
                rn = f"{DUMP}-memory-usage-report.txt"
                add("dump_text", f"{tag}:report:{stem[:30]}", {ba_name: ba.read_bytes(), rn: rep.read_bytes()}, rn)
            lr = f"{DUMP}-live-range.txt"
            add("dump_text", f"{tag}:live_range:{stem[:30]}", {ba_name: ba.read_bytes(), lr: live_range_seed()}, lr)

    # Builders: structures real CPU files lack (allocator events, GPU/TPU planes, several
    # snapshot devices, OOM events), and they are small, so mutants run fast.
    add("xplane", "builder:tf_training", {XPLANE: allocator_xplane.tf_training(steps=2)}, XPLANE)
    add("xplane", "builder:gpu_derived", {XPLANE: derived_xplane.gpu_derived()}, XPLANE)
    add("xplane", "builder:tpu_derived", {XPLANE: derived_xplane.tpu_derived()}, XPLANE)
    add("xplane", "builder:minimal", {XPLANE: minimal_xspace()}, XPLANE)
    add("trace", "builder:steady_leak", {"t.trace.json": chrome_builder.steady_leak(steps=3).to_bytes()}, "t.trace.json")
    for fn in (snap_builder.expandable_oom_multidevice, snap_builder.ring_buffer, snap_builder.legacy_2023):
        add("snapshot", f"builder:{fn.__name__}", {"s.pickle": pickle.dumps(fn(), 4)}, "s.pickle")
    # The reproducers seed further mutations too, except the bombs (a mutant of one
    # would cost its full size in the generator).
    for m in reproducers():
        if m.size > 64_000 or len(m.files) != 1:
            continue
        (target,) = m.files
        add(m.fmt, m.name, dict(m.files), target)
    return seeds
