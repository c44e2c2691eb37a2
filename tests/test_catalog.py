"""Run discovery beyond XProf's sessions: dump folders, snapshots, traces, name clashes."""

from __future__ import annotations

from profscope.model import dump_layout
from profscope.app.discovery import discover
from profscope.model.catalog import RunKind
from profscope.storage import FileInfo, Listing


def _listing(*paths, dirs=()):
    listing = Listing({p: FileInfo(p, 1) for p in paths}, set(dirs))
    for p in paths:
        parts = p.split("/")[:-1]
        listing.dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return listing


def test_mixed_logdir():
    runs = discover(_listing(
        "plugins/profile/2026_01_01/h.xplane.pb",
        "exp/plugins/profile/2026_01_02/h1.xplane.pb",
        "exp/plugins/profile/2026_01_02/h2.xplane.pb.gz",
        "exp/plugins/profile/2026_01_02/h1.trace.json.gz",
        "xla/module_0003.jit_f.cpu_after_optimizations.hlo.pb",
        "xla/module_0003.jit_f.cpu_after_optimizations-buffer-assignment.txt",
        "xla/module_0003.jit_f.before_optimizations.hlo.pb",
        "xla/module_0007.jit_g.cpu_after_optimizations-buffer-assignment.txt",
        "texts_only/module_0001.jit_h.before_optimizations.txt",
        "torch/oom.pickle",
        "torch/run.pt.trace.json.gz",
        "torch/run.memory_timeline.json",
        "notes.txt",
    ))
    kinds = {r.name: r.kind for r in runs}
    assert kinds == {
        "2026_01_01": RunKind.PROFILE,
        "exp/2026_01_02": RunKind.PROFILE,
        "xla": RunKind.XLA_DUMP,
        "torch/oom.pickle": RunKind.TORCH_SNAPSHOT,
        "torch/run.pt.trace.json.gz": RunKind.CHROME_TRACE,
    }
    assert [r.name for r in runs] == sorted(kinds, reverse=True)
    trace = next(r for r in runs if r.kind is RunKind.CHROME_TRACE)
    assert [f.path for f in trace.files] == ["torch/run.memory_timeline.json", "torch/run.pt.trace.json.gz"]
    exp = next(r for r in runs if r.name == "exp/2026_01_02")
    assert exp.hosts == ["h1", "h2"]  # .xplane.pb.gz counts (XProf 2.24 skips it)
    xla = next(r for r in runs if r.name == "xla")
    assert [(m.display_name, sorted(m.files)) for m in xla.dump_modules()] == [
        ("jit_f(3)", ["buffer_assignment", "hlo_proto", "hlo_proto_before"]),
        ("jit_g(7)", ["buffer_assignment"]),
    ]


def test_empty_session_folder_is_a_run_like_in_xprof():
    runs = discover(_listing("a/plugins/profile/s1/h.xplane.pb", dirs=["a/plugins/profile/s0"]))
    assert [r.name for r in runs] == ["a/s1", "a/s0"]
    assert runs[1].files == [] and runs[1].hosts == []


def test_files_deeper_than_a_session_or_beside_it_are_not_runs():
    runs = discover(_listing("plugins/profile/stray.xplane.pb", "weird/profile/s/h.xplane.pb"))
    assert runs == [] or all(r.kind is not RunKind.PROFILE for r in runs)


def test_root_dump_folder_and_name_clash():
    runs = discover(_listing(
        "module_0001.jit_f.cpu_after_optimizations-memory-usage-report.txt",
        "a/plugins/profile/s/h.xplane.pb",
        "a/s/module_0002.jit_k.cpu_after_optimizations.hlo.pb",
    ))
    names = {r.name: r.kind for r in runs}
    assert names == {".": RunKind.XLA_DUMP, "a/s": RunKind.PROFILE, "a/s [xla_dump]": RunKind.XLA_DUMP}


def test_dump_file_names():
    parsed = dump_layout.parse_name("module_0014.jit_train_step.cpu_after_optimizations-buffer-assignment.txt")
    assert (parsed.module_id, parsed.module_name, parsed.stage, parsed.after_optimizations) == (14, "jit_train_step", "cpu_after_optimizations", True)
    parsed = dump_layout.parse_name("module_0002.jit__lambda_.1.before_optimizations.hlo.pb.gz")
    assert (parsed.module_name, parsed.stage) == ("jit__lambda_.1", "before_optimizations")
    parsed = dump_layout.parse_name("module_0040.pjit_f.sm_9.0_gpu_after_optimizations.hlo.pb")
    assert parsed.module_name == "pjit_f" and parsed.after_optimizations
    assert dump_layout.parse_name("notes.txt") is None
