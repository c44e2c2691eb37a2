"""XSpace profiles that exercise XProf's derived device lines (``formats/xplane_derived.py``).

The shapes real profiles have, plus the corners of ``DerivedXLineBuilder``: several GPU
streams (a compute stream, an empty one, one without XLA stats), kernel runs of one
module, nested ``hlo_op`` levels (``while.1::fusion.2``), framework ops from the module's
HLO metadata and from a ``tf_op`` stat, name scopes that span exactly the same kernels
(``AdjustDurationForTraceViewer``), a module without program id; TPU planes grouped by
their ``XLA Modules`` or ``Steps`` line, ops outside any module (the gap rule), host
offload copies, and step names after the host's step roots.

``large_gpu(n)`` is a GPU profile with ``n`` kernels, for timing.
"""

from __future__ import annotations

from profscope.model.protos import hlo_pb2
from profscope.testing.allocator_xplane import MS, US, Ref, Space, Str


def hlo_module(name: str, instructions: list[tuple[str, str, str, str, int]]) -> bytes:
    """A valid ``HloProto``: a parameter and a chain of ``copy`` instructions named
    ``instructions`` ((name, op_name, op_type, source_file, source_line) each), so that
    XLA's ``HloModule::CreateFromProto`` accepts it."""
    p = hlo_pb2.HloProto()
    m = p.hlo_module
    m.name = name
    m.id = 1
    comp = m.computations.add(name="main.1", id=1)
    m.entry_computation_name = "main.1"
    m.entry_computation_id = 1

    def scalar(shape):
        shape.element_type = 4  # S32 (xla_data.proto PrimitiveType)
        shape.layout.tail_padding_alignment_in_elements = 1

    arg = comp.instructions.add(name="Arg_0.1", opcode="parameter", id=1)
    scalar(arg.shape)
    arg.metadata.op_name = "args[0]"
    prev = 1
    for k, (iname, op_name, op_type, src, line) in enumerate(instructions):
        ins = comp.instructions.add(name=iname, opcode="copy", id=k + 2)
        scalar(ins.shape)
        ins.operand_ids.append(prev)
        ins.metadata.op_name = op_name
        ins.metadata.op_type = op_type
        if src:
            ins.metadata.source_file = src
            ins.metadata.source_line = line
        prev = k + 2
    comp.root_id = prev
    for ps in (comp.program_shape, m.host_program_shape):
        scalar(ps.parameters.add())
        scalar(ps.result)
        ps.parameter_names.append("p0")
    return p.SerializeToString()


STEP_OPS = [  # (hlo op, op_name, op_type, source file, line)
    ("fusion.1", "jit(step)/jit(main)/mlp/dense/dot_general", "", "/src/model/mlp.py", 12),
    ("fusion.2", "jit(step)/jit(main)/mlp/relu/max", "", "/src/model/mlp.py", 13),
    ("dot.3", "jit(step)/jit(main)/head/dot_general", "", "/src/model/head.py", 7),
    ("copy.4", "", "", "", 0),
    ("while.1", "jit(step)/jit(main)/while", "", "/src/model/loop.py", 3),
    ("reduce.5", "jit(step)/jit(main)/transpose(jvp(loss))/reduce_sum[axes=(0,)]", "", "/src/train.py", 40),
]
EVAL_OPS = [
    ("fusion.1", "jit(eval)/jit(main)/mlp/dense/dot_general", "", "/src/model/mlp.py", 12),
    ("add.2", "jit(eval)/jit(main)/add", "", "/src/eval.py", 5),
]


def _metadata_plane(sp: Space) -> None:
    meta = sp.plane("/host:metadata", 99)
    for name, ops in (("jit_step(7)", STEP_OPS), ("jit_eval(8)", EVAL_OPS)):
        mid = meta.event_id(name)
        st = meta.p.event_metadata[mid].stats.add()
        meta.set_stat(st, "Hlo Proto", hlo_module(name.split("(")[0], ops))
    # a module recorded without "(<program id>)": its program id is the metadata id
    mid = meta.event_id("jit_init")
    st = meta.p.event_metadata[mid].stats.add()
    meta.set_stat(st, "Hlo Proto", hlo_module("jit_init", [("iota.1", "jit(init)/iota", "", "/src/init.py", 1)]))


def gpu_derived(*, hostname: str = "gpu-host") -> bytes:
    """Two GPU planes with kernels of three modules on several streams."""
    sp = Space(hostname)
    _metadata_plane(sp)
    host = sp.plane("/host:CPU", 0)
    py = host.line("python3", 1)
    gpu = sp.plane("/device:GPU:0", 1)
    gpu.plane_stat("device_vendor", Ref("Nvidia"))
    memcpy = gpu.line("Stream #3(MemcpyH2D)", 3)
    compute = gpu.line("Stream #7(Compute)", 7)
    kernel = gpu.line("Stream #9(Kernel)", 9)
    gpu.line("Stream #11(Kernel)", 11)  # no events: still takes its display ids
    plain = gpu.line("Stream #13(Kernel)", 13)  # kernels without XLA stats
    kd = ("kernel_details", Ref("regs:32 grid:128,1,1 block:256,1,1"))

    def xla(line, name, t, dur, op, module, pid, extra=()):
        stats = [("correlation_id", int(t // US)), kd, ("hlo_op", Ref(op)), ("hlo_module", Ref(module))]
        if pid is not None:
            stats.append(("program_id", pid))
        line.event(name, t, dur, stats + list(extra))

    t = 2 * MS
    for step in range(3):
        py.event("train_step", t - 50 * US, 1 * MS, [("step_num", step)])
        for op in ("fusion.1", "fusion.2", "dot.3", "copy.4", "while.1::fusion.2", "while.1::fusion.2"):
            xla(compute, op.split("::")[-1].replace(".", "_"), t, 20 * US, op, "jit_step", 7)
            t += 25 * US
        # two kernels of one op back to back, and an op of the same name in another module
        xla(compute, "reduce_5", t, 10 * US, "reduce.5", "jit_step", 7)
        xla(compute, "reduce_5", t + 10 * US, 10 * US, "reduce.5", "jit_step", 7)
        t += 30 * US
        xla(compute, "fusion_1", t, 15 * US, "fusion.1", "jit_eval", 8)
        xla(compute, "add_2", t + 20 * US, 5 * US, "add.2", "jit_eval", 8)
        t += 40 * US
        # a kernel that is no XLA op: its framework op from its tf_op stat
        compute.event("MatMul", t, 8 * US, [kd, ("tf_op", Ref("model/dense/MatMul:MatMul"))])
        # not a kernel (no kernel_details): ignored
        compute.event("memset", t + 10 * US, 2 * US, [("hlo_op", Ref("fusion.1")), ("hlo_module", Ref("jit_step"))])
        t += 20 * US
        memcpy.event("MemcpyH2D", t, 30 * US, [("memcpy_details", Ref("kind:HtoD size:4096"))])
        # the second kernel stream: a module without program id, an unknown op
        xla(kernel, "iota", t, 12 * US, "iota.1", "jit_init", None)
        xla(kernel, "mystery", t + 15 * US, 3 * US, "not_in_hlo.9", "jit_step", 7)
        xla(kernel, "fusion_1", t + 20 * US, 6 * US, "fusion.1", "jit_step", 7)
        plain.event("__amd_rocclr_copyBuffer", t + 5 * US, 4 * US, [kd])
        t += 400 * US
    gpu2 = sp.plane("/device:GPU:1", 2)
    s2 = gpu2.line("Stream #21(Kernel)", 21)
    for k in range(4):
        xla(s2, "fusion_1", 3 * MS + k * 30 * US, 25 * US, "fusion.1", "jit_step", 7)
    return sp.to_bytes()


def tpu_derived(*, hostname: str = "tpu-host") -> bytes:
    """Two TensorCore planes: one grouped by its XLA Modules line, one by its Steps line."""
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    py = host.line("python3", 1)
    for s in range(2):  # two host step roots: the device groups come after them
        py.event("train", 1 * MS + s * 5 * MS, 4 * MS, [("_r", 1), ("step_num", s)])
    for core in range(2):
        tpu = sp.plane(f"/device:TPU:{core}", 10 + core)
        steps = tpu.line("Steps", 1, timestamp_ns=0) if core == 1 else None
        mods = tpu.line("XLA Modules", 2, timestamp_ns=0)
        ops = tpu.line("XLA Ops", 3, timestamp_ns=0)
        tm = tpu.line("XLA TraceMe", 6, timestamp_ns=0)

        def op(name, display, tf_op, source, shape=""):
            mid = tpu.event_id(name)
            md = tpu.p.event_metadata[mid]
            md.display_name = display
            for k, v in (("tf_op", tf_op), ("source", source), ("shape_with_layout", shape)):
                if v:
                    tpu.set_stat(md.stats.add(), k, Ref(v) if k != "shape_with_layout" else Str(v))
            tpu.set_stat(md.stats.add(), "raw_bytes_accessed", 4096)
            return name

        fus = op("%fusion.1 = f32[8]{0} fusion(f32[8]{0} %p)", "fusion.1",
                 "jit(train)/jit(main)/mlp/dense/dot_general:", "model.py:10")
        add = op("%add.2 = f32[8]{0} add(f32[8]{0} %a, f32[8]{0} %b)", "add.2",
                 "jit(train)/jit(main)/mlp/add:", "model.py:11")
        cs = op("%copy-start = (f32[8]{0:S(5)}) copy-start(f32[8]{0} %x)", "copy-start", "", "", "f32[8]{0:S(5)}")
        cd = op("%copy-done = f32[8]{0:S(5)} copy-done((f32[8]{0:S(5)}) %copy-start)", "copy-done", "", "")
        cs1 = op("%copy-start.1 = (f32[8]{0:S(5)}) copy-start(f32[8]{0} %y)", "copy-start.1", "", "", "f32[8]{0:S(5)}")
        cd1 = op("%copy-done.1 = f32[8]{0:S(5)} copy-done((f32[8]{0:S(5)}) %copy-start.1)", "copy-done.1", "", "")
        dev = op("%copy-start.2 = (f32[8]{0}) copy-start(f32[8]{0} %z)", "copy-start.2", "", "")  # not host memory
        t = 1 * MS + 200 * US
        for s in range(3):
            if steps is not None:
                steps.event(f"{s}", t - 10 * US, 1500 * US, [("step_num", 40 + s)] if s != 1 else [])
            mods.event(f"jit_train({100 + s % 2})", t, 1200 * US, [("run_id", s), ("queue_id", 0)])
            u = t + 10 * US
            ops.event(cs, u, 5 * US)
            ops.event(cs1, u + 6 * US, 5 * US)
            ops.event(fus, u + 20 * US, 100 * US)
            ops.event(fus, u + 130 * US, 100 * US)  # same op, same group: one framework op
            ops.event(add, u + 240 * US, 50 * US)
            ops.event(cd, u + 300 * US, 5 * US)
            ops.event(dev, u + 310 * US, 5 * US)
            ops.event(cd1, u + 700 * US, 5 * US)
            tm.event("dependency-wait", u + 320 * US, 10 * US)
            t += 2 * MS
        # ops outside any module: no group, merged only when the gap is small enough
        for k, gap in enumerate((0, 30, 500)):
            ops.event(add, t + 100 * US + k * 1000 * US + gap * US, 20 * US)
            ops.event(add, t + 100 * US + k * 1000 * US + gap * US + 60 * US, 20 * US)
    return sp.to_bytes()


def large_gpu(n: int, *, hostname: str = "big-host") -> bytes:
    """One GPU plane with ``n`` kernels of one module (for timing the derivation)."""
    sp = Space(hostname)
    _metadata_plane(sp)
    gpu = sp.plane("/device:GPU:0", 1)
    line = gpu.line("Stream #7(Compute)", 7)
    kd = ("kernel_details", Ref("regs:32 grid:128,1,1 block:256,1,1"))
    ops = [o[0] for o in STEP_OPS]
    for k in range(n):
        op = ops[k % len(ops)]
        line.event(op, k * 10 * US, 8 * US, [kd, ("hlo_op", Ref(op)), ("hlo_module", Ref("jit_step")),
                                             ("program_id", 7 if (k // 1000) % 2 == 0 else 8)])
    return sp.to_bytes()


def random_gpu(seed: int = 0, n: int = 400) -> bytes:
    """Kernels with random modules, (nested) ops and framework ops, some back to back with
    the same span, on two streams."""
    import random

    rng = random.Random(seed)
    sp = Space("rand")
    _metadata_plane(sp)
    gpu = sp.plane("/device:GPU:0", 1)
    lines = [gpu.line("Stream #7(Compute)", 7), gpu.line("Stream #8(Kernel)", 8)]
    kd = ("kernel_details", Ref("grid:1,1,1"))
    ops = [o[0] for o in STEP_OPS] + ["not_in_hlo.1", "while.1::fusion.2", "while.1::fusion.2::dot.3"]
    t = [1 * MS, 1 * MS]
    for _ in range(n):
        s = rng.randrange(2)
        dur = rng.choice([1, 5, 5, 20]) * US
        stats = [kd]
        r = rng.random()
        if r < 0.8:
            stats += [("hlo_op", Ref(rng.choice(ops))), ("hlo_module", Ref(rng.choice(["jit_step", "jit_eval"]))),
                      ("program_id", rng.choice([7, 7, 8]))]
        elif r < 0.9:
            stats.append(("tf_op", Ref(rng.choice(["a/b/MatMul:MatMul", "jit(f)/jit(main)/x/add:", "Iterator::Map",
                                                    "plain name "]))))
        lines[s].event("k", t[s], dur, stats)
        t[s] += rng.choice([0, 0, dur, dur + 3 * US])
    return sp.to_bytes()


def random_tpu(seed: int = 0, n: int = 400) -> bytes:
    """TPU ops with random framework ops and sources, inside and outside modules."""
    import random

    rng = random.Random(seed)
    sp = Space("rand")
    tpu = sp.plane("/device:TPU:0", 5)
    mods = tpu.line("XLA Modules", 2, timestamp_ns=0)
    ops = tpu.line("XLA Ops", 3, timestamp_ns=0)
    names = []
    for k, tf in enumerate(["jit(f)/jit(main)/a/b/add:", "jit(f)/jit(main)/a/mul:", "x/y/MatMul:MatMul",
                            "jit(f)/jit(main)/a/b/add:", ""]):
        mid = tpu.event_id(f"%op.{k} = f32[] op()")
        md = tpu.p.event_metadata[mid]
        md.display_name = f"op.{k}"
        if tf:
            tpu.set_stat(md.stats.add(), "tf_op", Ref(tf))
        if k % 2:
            tpu.set_stat(md.stats.add(), "source", Ref(f"m.py:{k}"))
        names.append(md.name)
    t = 0
    for _ in range(n // 20):
        start = t
        for _ in range(rng.randrange(1, 25)):
            dur = rng.choice([1, 2, 2, 10]) * US
            ops.event(rng.choice(names), t, dur)
            t += rng.choice([0, dur, dur, 3 * dur])
        if rng.random() < 0.7:
            mods.event("jit_f(1)", start, t - start)
        t += rng.choice([0, 5 * US, 50 * US])
    return sp.to_bytes()
