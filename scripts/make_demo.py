#!/usr/bin/env python3
"""Generate profscope's bundled demo log directory from real JAX programs (CPU).

What it makes (under ``--out``, default ``src/profscope/demo``)::

    README.md        what each run is, how it was made, versions, sizes (generated)
    expected.json    machine-readable facts the tests compare against
    logdir/
      mlp/plugins/profile/<session>/demo-host.xplane.pb (+ demo-host.trace.json.gz)
      transformer/plugins/profile/<session>/demo-host.xplane.pb (+ ...)
      convnet/plugins/profile/<session>/demo-host.xplane.pb (+ ...)
      dumps/mlp/     XLA dump of the MLP training step (jit_train_step only)

Three small training programs are run on the CPU backend:

1. ``mlp``: a 3-layer MLP, Adam, ``jax.jit(train_step, donate_argnums=(0,))``
   (the whole train state -- params and optimizer state -- is donated), plus
   a jitted ``eval_step``.
2. ``transformer``: a tiny decoder-only transformer; its layers are applied
   with ``jax.lax.scan`` over stacked layer params, the layer body wrapped in
   ``jax.checkpoint`` (remat); loss + grad + Adam update in one donated jit.
3. ``convnet``: a small conv net (``lax.conv_general_dilated``), SGD with
   momentum, donated.

Each program runs in its own subprocess twice: once inside
``jax.profiler.trace`` (the profile) and, for ``mlp``, once more with
``XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"``
set before jax is imported (the XLA dump). Profile files are renamed from
``<hostname>.*`` to ``demo-host.*`` so the demo is stable across machines (the
real hostname is still recorded inside the XSpace ``hostnames`` field).

Set-up (a separate virtual environment; nothing else is needed -- the script
parses the xplane files with a tiny built-in protobuf wire reader)::

    python3 -m venv .venv-jax
    .venv-jax/bin/pip install 'jax[cpu]==0.10.2'
    .venv-jax/bin/python scripts/make_demo.py --out src/profscope/demo

Seeds are fixed; file contents still differ between runs in timestamps, session
folder names, program ids and measured durations.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

PROGRAMS = ("mlp", "transformer", "convnet")
DUMP_PROGRAMS = ("mlp",)
DEMO_HOST = "demo-host"
TRAIN_MODULE = "jit_train_step"
# Dump files kept per module of interest (suffix after "module_NNNN.<name>.").
DUMP_KEEP_SUFFIXES = (
    "before_optimizations.txt",
    "before_optimizations.hlo.pb",
    "cpu_after_optimizations.txt",
    "cpu_after_optimizations.hlo.pb",
    "cpu_after_optimizations-buffer-assignment.txt",
    "cpu_after_optimizations-memory-usage-report.txt",
)
DUMP_MODULES = (TRAIN_MODULE,)
TRACE_JSON_MAX_BYTES = 512 * 1024
TOTAL_MAX_BYTES = 5 * 1024 * 1024
MEMORY_FIELDS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "temp_size_in_bytes",
    "alias_size_in_bytes",
    "generated_code_size_in_bytes",
    "peak_memory_in_bytes",
    "host_argument_size_in_bytes",
    "host_output_size_in_bytes",
    "host_temp_size_in_bytes",
    "host_alias_size_in_bytes",
    "host_generated_code_size_in_bytes",
)


# --------------------------------------------------------------------------
# The programs (run in the worker subprocess; jax is imported lazily there).
# --------------------------------------------------------------------------

def _adam_init(params):
    import jax
    import jax.numpy as jnp

    zeros = jax.tree.map(jnp.zeros_like, params)
    return {"mu": zeros, "nu": jax.tree.map(jnp.zeros_like, params),
            "count": jnp.zeros((), jnp.int32)}


def _adam_update(params, grads, opt, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0):
    import jax
    import jax.numpy as jnp

    count = opt["count"] + 1
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, opt["mu"], grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, opt["nu"], grads)
    t = count.astype(jnp.float32)
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t

    def upd(p, m, v):
        return p - lr * ((m / c1) / (jnp.sqrt(v / c2) + eps) + wd * p)

    new_params = jax.tree.map(upd, params, mu, nu)
    return new_params, {"mu": mu, "nu": nu, "count": count}


def _global_norm_clip(grads, max_norm):
    import jax
    import jax.numpy as jnp

    leaves = jax.tree.leaves(grads)
    norm = jnp.sqrt(sum(jnp.sum(g * g) for g in leaves))
    scale = jnp.minimum(1.0, max_norm / (norm + 1e-6))
    return jax.tree.map(lambda g: g * scale, grads), norm


def build_mlp(rng):
    """3 Dense layers (64 -> 512 -> 512 -> 10), softmax cross-entropy, Adam."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    sizes = [64, 512, 512, 10]
    batch = 64
    params = {}
    for i, (din, dout) in enumerate(zip(sizes[:-1], sizes[1:])):
        params[f"dense_{i}"] = {
            "w": (rng.standard_normal((din, dout)) * np.sqrt(2.0 / din)).astype(np.float32),
            "b": np.zeros((dout,), np.float32),
        }
    params = jax.device_put(params)

    def forward(params, x):
        h = x
        n = len(params)
        for i in range(n):
            layer = params[f"dense_{i}"]
            h = h @ layer["w"] + layer["b"]
            if i < n - 1:
                h = jax.nn.relu(h)
        return h

    def loss_fn(params, x, y):
        logits = forward(params, x)
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def train_step(state, batch):
        x, y = batch
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, y)
        params, opt = _adam_update(state["params"], grads, state["opt"], lr=1e-3)
        return {"params": params, "opt": opt}, loss

    def eval_step(params, batch):
        x, y = batch
        logits = forward(params, x)
        acc = jnp.mean((jnp.argmax(logits, -1) == y).astype(jnp.float32))
        return loss_fn(params, x, y), acc

    state = {"params": params, "opt": _adam_init(params)}
    batches = [
        (rng.standard_normal((batch, sizes[0])).astype(np.float32),
         rng.integers(0, sizes[-1], (batch,)).astype(np.int32))
        for _ in range(4)
    ]
    config = {"layer_sizes": sizes, "batch": batch, "optimizer": "adam",
              "dtype": "float32"}
    return {
        "train_step": jax.jit(train_step, donate_argnums=(0,)),
        "eval_step": jax.jit(eval_step),
        "eval_arg": lambda st: st["params"],
        "state": state,
        "batches": [jax.device_put(b) for b in batches],
        "config": config,
    }


def build_transformer(rng):
    """Tiny decoder: embeddings, N x (pre-LN causal attention + MLP) via
    lax.scan over stacked layer params with jax.checkpoint on the body."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    vocab, d, heads, d_ff, layers, seq, batch = 256, 64, 4, 256, 4, 32, 8
    hd = d // heads

    def normal(shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    params = {
        "embed": normal((vocab, d), 0.02),
        "pos": normal((seq, d), 0.02),
        "layers": {
            "ln1_scale": np.ones((layers, d), np.float32),
            "wqkv": normal((layers, d, 3 * d), d ** -0.5),
            "wo": normal((layers, d, d), d ** -0.5),
            "ln2_scale": np.ones((layers, d), np.float32),
            "w1": normal((layers, d, d_ff), d ** -0.5),
            "b1": np.zeros((layers, d_ff), np.float32),
            "w2": normal((layers, d_ff, d), d_ff ** -0.5),
            "b2": np.zeros((layers, d), np.float32),
        },
        "ln_f_scale": np.ones((d,), np.float32),
        "head": normal((d, vocab), d ** -0.5),
    }
    params = jax.device_put(params)

    def rms_norm(x, scale):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * scale

    def layer(x, p):
        b, t, _ = x.shape
        h = rms_norm(x, p["ln1_scale"])
        qkv = (h @ p["wqkv"]).reshape(b, t, 3, heads, hd)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd)
        mask = jnp.tril(jnp.ones((t, t), bool))
        scores = jnp.where(mask, scores, -1e9)
        attn = jax.nn.softmax(scores, axis=-1)
        o = jnp.einsum("bhqk,bkhd->bqhd", attn, v).reshape(b, t, d)
        x = x + o @ p["wo"]
        h = rms_norm(x, p["ln2_scale"])
        h = jax.nn.gelu(h @ p["w1"] + p["b1"])
        x = x + h @ p["w2"] + p["b2"]
        return x, None

    def loss_fn(params, tokens):
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        t = inputs.shape[1]
        x = params["embed"][inputs] + params["pos"][:t]
        x, _ = jax.lax.scan(jax.checkpoint(layer), x, params["layers"])
        x = rms_norm(x, params["ln_f_scale"])
        logits = x @ params["head"]
        logp = jax.nn.log_softmax(logits)
        nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)
        return jnp.mean(nll)

    def train_step(state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], tokens)
        grads, gnorm = _global_norm_clip(grads, 1.0)
        params, opt = _adam_update(state["params"], grads, state["opt"],
                                   lr=3e-4, wd=0.01)
        return {"params": params, "opt": opt}, (loss, gnorm)

    def eval_step(params, tokens):
        return loss_fn(params, tokens)

    state = {"params": params, "opt": _adam_init(params)}
    batches = [rng.integers(0, vocab, (batch, seq + 1)).astype(np.int32)
               for _ in range(4)]
    config = {"vocab": vocab, "d_model": d, "heads": heads, "d_ff": d_ff,
              "layers": layers, "seq_len": seq, "batch": batch,
              "optimizer": "adamw + global-norm clip",
              "remat": "jax.checkpoint (default policy) on the scanned layer body",
              "dtype": "float32"}
    return {
        "train_step": jax.jit(train_step, donate_argnums=(0,)),
        "eval_step": jax.jit(eval_step),
        "eval_arg": lambda st: st["params"],
        "state": state,
        "batches": [jax.device_put(b) for b in batches],
        "config": config,
    }


def build_convnet(rng):
    """3 conv layers (NHWC, 3x3) + global average pool + Dense, SGD momentum."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    batch, hw, classes = 16, 32, 10
    convs = [(3, 16, 1), (16, 32, 2), (32, 64, 2)]  # (cin, cout, stride)
    params = {}
    for i, (cin, cout, _) in enumerate(convs):
        params[f"conv_{i}"] = {
            "w": (rng.standard_normal((3, 3, cin, cout))
                  * np.sqrt(2.0 / (9 * cin))).astype(np.float32),
            "b": np.zeros((cout,), np.float32),
        }
    params["dense"] = {
        "w": (rng.standard_normal((convs[-1][1], classes)) * 0.05).astype(np.float32),
        "b": np.zeros((classes,), np.float32),
    }
    params = jax.device_put(params)

    def forward(params, x):
        h = x
        for i, (_, _, stride) in enumerate(convs):
            p = params[f"conv_{i}"]
            h = jax.lax.conv_general_dilated(
                h, p["w"], window_strides=(stride, stride), padding="SAME",
                dimension_numbers=("NHWC", "HWIO", "NHWC"))
            h = jax.nn.relu(h + p["b"])
        h = jnp.mean(h, axis=(1, 2))
        return h @ params["dense"]["w"] + params["dense"]["b"]

    def loss_fn(params, x, y):
        logp = jax.nn.log_softmax(forward(params, x))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def train_step(state, batch):
        x, y = batch
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, y)
        mom = jax.tree.map(lambda m, g: 0.9 * m + g, state["momentum"], grads)
        params = jax.tree.map(lambda p, m: p - 0.01 * m, state["params"], mom)
        return {"params": params, "momentum": mom}, loss

    state = {"params": params,
             "momentum": jax.tree.map(jnp.zeros_like, params)}
    batches = [
        (rng.standard_normal((batch, hw, hw, 3)).astype(np.float32),
         rng.integers(0, classes, (batch,)).astype(np.int32))
        for _ in range(4)
    ]
    config = {"input": [batch, hw, hw, 3], "convs(cin,cout,stride)": convs,
              "classes": classes, "optimizer": "sgd momentum 0.9",
              "dtype": "float32"}
    return {
        "train_step": jax.jit(train_step, donate_argnums=(0,)),
        "eval_step": None,
        "state": state,
        "batches": [jax.device_put(b) for b in batches],
        "config": config,
    }


BUILDERS = {"mlp": build_mlp, "transformer": build_transformer,
            "convnet": build_convnet}
SEEDS = {"mlp": 0, "transformer": 1, "convnet": 2}


def worker(program, mode, target, result_path, steps):
    """Runs in a fresh interpreter. XLA_FLAGS was set by the parent."""
    import numpy as np
    import jax

    jax.config.update("jax_platforms", "cpu")
    rng = np.random.default_rng(SEEDS[program])
    prog = BUILDERS[program](rng)
    step = prog["train_step"]
    state = prog["state"]
    batches = prog["batches"]

    # Compile ahead of time for the numbers; the jit call below reuses the
    # executable (checked against the /host:metadata plane by the parent).
    lowered = step.lower(state, batches[0])
    compiled = lowered.compile()
    ma = compiled.memory_analysis()
    memory = {f: int(getattr(ma, f)) for f in MEMORY_FIELDS if hasattr(ma, f)}
    hlo_text = compiled.as_text()
    module_name = re.match(r"HloModule (\S+?),", hlo_text).group(1)

    # Warm-up step outside the trace (compiles / loads everything).
    state, out = step(state, batches[0])
    jax.block_until_ready(out)
    if prog["eval_step"] is not None:
        jax.block_until_ready(prog["eval_step"](prog["eval_arg"](state), batches[0]))

    losses = []
    if mode == "profile":
        with jax.profiler.trace(target):
            for i in range(steps):
                with jax.profiler.StepTraceAnnotation("train", step_num=i):
                    state, out = step(state, batches[i % len(batches)])
                    jax.block_until_ready(out)
                losses.append(float(jax.tree.leaves(out)[0]))
            if prog["eval_step"] is not None:
                with jax.profiler.TraceAnnotation("eval"):
                    jax.block_until_ready(
                        prog["eval_step"](prog["eval_arg"](state), batches[-1]))

    result = {
        "program": program,
        "module_name": module_name,
        "memory_analysis": memory,
        "config": prog["config"],
        "losses": losses,
        "steps_traced": steps if mode == "profile" else 0,
        "jax_version": jax.__version__,
        "jaxlib_version": __import__("jaxlib").__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "hostname": __import__("socket").gethostname(),
        "python": sys.version.split()[0],
    }
    Path(result_path).write_text(json.dumps(result, indent=2))


# --------------------------------------------------------------------------
# Minimal protobuf wire reader (enough to check the xplane files).
# --------------------------------------------------------------------------

def _varint(buf, pos):
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf):
    """Yield (field_number, wire_type, value) for one message. LEN -> memoryview."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, pos = _varint(buf, pos)
        elif wt == 1:
            val = bytes(buf[pos:pos + 8])
            pos += 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            val = buf[pos:pos + n]
            pos += n
        elif wt == 5:
            val = bytes(buf[pos:pos + 4])
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        yield num, wt, val


def _signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def read_xspace_summary(path):
    """Planes (name, #lines, #events, #event metadata), hostnames, and the
    /host:metadata module entries (name, program_id, HloProto size/name)."""
    data = memoryview(Path(path).read_bytes())
    out = {"hostnames": [], "planes": [], "modules": []}
    for num, _, val in _fields(data):
        if num == 4:
            out["hostnames"].append(bytes(val).decode())
        if num != 1:
            continue
        name, lines, events, ev_md, st_md = "", 0, 0, {}, {}
        for pn, _, pv in _fields(val):
            if pn == 2:
                name = bytes(pv).decode()
            elif pn == 3:
                lines += 1
                events += sum(1 for ln, _, _ in _fields(pv) if ln == 4)
            elif pn in (4, 5):
                key, value = None, None
                for en, _, ev in _fields(pv):
                    if en == 1:
                        key = _signed(ev)
                    elif en == 2:
                        value = ev
                (ev_md if pn == 4 else st_md)[key] = value
        stat_names = {}
        for k, v in st_md.items():
            for sn, _, sv in _fields(v if v is not None else b""):
                if sn == 2:
                    stat_names[k] = bytes(sv).decode()
        out["planes"].append({"name": name, "lines": lines, "events": events,
                              "event_metadata": len(ev_md)})
        if name != "/host:metadata":
            continue
        for mid, md in sorted(ev_md.items()):
            entry = {"metadata_id": mid, "name": None, "stats": {}}
            for mn, _, mv in _fields(md if md is not None else b""):
                if mn == 2:
                    entry["name"] = bytes(mv).decode()
                elif mn == 5:
                    sid, sval = None, None
                    for sn, swt, sv in _fields(mv):
                        if sn == 1:
                            sid = sv
                        elif sn in (3, 7):
                            sval = sv
                        elif sn == 4:
                            sval = _signed(sv)
                        elif sn == 5:
                            sval = bytes(sv).decode()
                        elif sn == 6:
                            sval = bytes(sv)
                    sname = stat_names.get(sid, str(sid))
                    if isinstance(sval, bytes):
                        entry["stats"][sname] = _hlo_proto_summary(sval)
                    else:
                        entry["stats"][sname] = sval
            out["modules"].append(entry)
    return out


def _hlo_content_digest(blob):
    """sha256 of an HloProto that ignores the order of map entries in
    HloModuleProto.schedule (field 7; map order is not fixed on the wire)."""
    h = hashlib.sha256()
    for n, wt, v in _fields(memoryview(blob)):
        if n == 1 and wt == 2:
            for mn, mwt, mv in _fields(v):
                if mn == 7 and mwt == 2:
                    entries = sorted(bytes(e) for _, _, e in _fields(mv))
                    h.update(repr((1, 7, entries)).encode())
                else:
                    h.update(repr((1, mn, bytes(mv) if mwt == 2 else mv)).encode())
        else:
            h.update(repr((n, bytes(v) if wt == 2 else v)).encode())
    return h.hexdigest()


def _hlo_proto_summary(blob):
    """HloProto{hlo_module=1 {name=1, id=5}, buffer_assignment=3}."""
    info = {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest(),
            "content_sha256": _hlo_content_digest(blob),
            "hlo_module_name": None, "hlo_module_id": None,
            "has_buffer_assignment": False}
    try:
        for n, _, v in _fields(memoryview(blob)):
            if n == 1:
                for mn, _, mv in _fields(v):
                    if mn == 1:
                        info["hlo_module_name"] = bytes(mv).decode()
                    elif mn == 5:
                        info["hlo_module_id"] = _signed(mv)
            elif n == 3:
                info["has_buffer_assignment"] = True
    except (IndexError, ValueError, UnicodeDecodeError):
        info["parse_error"] = True
    return info


# --------------------------------------------------------------------------
# Parent: orchestrate subprocesses, rename, prune, document.
# --------------------------------------------------------------------------

def _run_worker(program, mode, target, result_path, steps, xla_flags):
    env = dict(os.environ)
    env["XLA_FLAGS"] = xla_flags
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    cmd = [sys.executable, os.path.abspath(__file__), "--_worker", program,
           "--_mode", mode, "--_target", str(target), "--_result",
           str(result_path), "--steps", str(steps)]
    subprocess.run(cmd, env=env, check=True)
    return json.loads(Path(result_path).read_text())


def _prune_dump(dump_dir):
    kept = []
    pat = re.compile(r"^module_\d+\.(?P<name>[^.]+)\.(?P<rest>.+)$")
    for f in sorted(dump_dir.iterdir()):
        m = pat.match(f.name)
        if (f.is_file() and m and m.group("name") in DUMP_MODULES
                and m.group("rest") in DUMP_KEEP_SUFFIXES):
            kept.append(f.name)
        elif f.is_dir():
            shutil.rmtree(f)
        else:
            f.unlink()
    return kept


def _rename_host_files(run_dir):
    sessions = sorted(p for p in (run_dir / "plugins" / "profile").iterdir()
                      if p.is_dir())
    if len(sessions) != 1:
        raise RuntimeError(f"expected one session in {run_dir}, got {sessions}")
    session = sessions[0]
    files = {}
    for f in sorted(session.iterdir()):
        for suffix in (".xplane.pb", ".trace.json.gz"):
            if f.name.endswith(suffix):
                new = session / (DEMO_HOST + suffix)
                f.rename(new)
                files[suffix] = new
    if ".xplane.pb" not in files:
        raise RuntimeError(f"no xplane.pb in {session}")
    tj = files.get(".trace.json.gz")
    if tj is not None and tj.stat().st_size > TRACE_JSON_MAX_BYTES:
        tj.unlink()
        del files[".trace.json.gz"]
    return session, files


_XPROF_HELPER = r"""
import json, sys
from importlib.metadata import version
from xprof.convert import raw_to_tool_data as r
jobs = json.load(open(sys.argv[1]))
res = {"_xprof_version": version("xprof")}
MIB = ("peakHeapMib", "peakUnpaddedHeapMib", "totalBufferAllocationMib",
       "indefiniteBufferAllocationMib", "entryComputationParametersMib",
       "maybeLiveOutMib", "nonReusableMib")
for program, (path, modules) in jobs.items():
    r.xspace_to_tool_names([path])
    res[program] = {}
    for m in modules:
        out = r.xspace_to_tool_data([path], "memory_viewer",
                                    {"module_name": m, "memory_space": 0})
        d = json.loads(out[0] if isinstance(out, tuple) else out)
        e = {k[:-3] + "Bytes": round(d[k] * 1048576) for k in MIB if k in d}
        e["peakHeapSizePosition"] = d.get("peakHeapSizePosition")
        e["heapSizesLength"] = len(d.get("heapSizes", []))
        e["maxHeapLength"] = len(d.get("maxHeap", []))
        e["entryComputationName"] = d.get("entryComputationName")
        res[program][m] = e
json.dump(res, open(sys.argv[2], "w"), indent=1)
"""


def _xprof_reference(xprof_python, out, expected, tmp):
    """XProf 2.24 memory-viewer numbers for every module of every run (on
    copies of the xplanes: XProf writes HLO protos beside its input)."""
    jobs = {}
    for program, e in expected["programs"].items():
        d = tmp / "xprof" / program
        d.mkdir(parents=True)
        copy = d / Path(e["xplane"]).name
        shutil.copyfile(out / e["xplane"], copy)
        jobs[program] = [str(copy), [m["name"] for m in e["metadata_modules"]]]
    (tmp / "xprof_jobs.json").write_text(json.dumps(jobs))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([xprof_python, "-c", _XPROF_HELPER,
                           str(tmp / "xprof_jobs.json"), str(tmp / "xprof_out.json")],
                          env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.stderr.write(proc.stderr[-4000:])
        raise RuntimeError(f"XProf helper failed with exit status {proc.returncode}")
    return json.loads((tmp / "xprof_out.json").read_text())


def _human(n):
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="src/profscope/demo",
                    help="demo folder to (re)write (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=3,
                    help="training steps inside each trace (default: %(default)s)")
    ap.add_argument("--programs", default=",".join(PROGRAMS),
                    help="comma-separated subset of " + ",".join(PROGRAMS))
    ap.add_argument("--dump-programs", default=",".join(DUMP_PROGRAMS),
                    help="programs to XLA-dump (default: %(default)s)")
    ap.add_argument("--xprof-python", default=os.environ.get("XPROF_PYTHON") or None,
                    help="python of a scratch venv with `xprof` installed (default: "
                    "$XPROF_PYTHON); if given, XProf's memory-viewer numbers for every module are "
                    "recorded in expected.json (XProf runs on copies: it "
                    "writes *.hlo_proto.pb files next to the xplane)")
    ap.add_argument("--_worker", help=argparse.SUPPRESS)
    ap.add_argument("--_mode", help=argparse.SUPPRESS)
    ap.add_argument("--_target", help=argparse.SUPPRESS)
    ap.add_argument("--_result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._worker:
        worker(args._worker, args._mode, args._target, args._result, args.steps)
        return 0

    programs = [p for p in args.programs.split(",") if p]
    for p in programs:
        if p not in BUILDERS:
            ap.error(f"unknown program {p!r}")
    out = Path(args.out).resolve()
    logdir = out / "logdir"
    tmp = out / ".make_demo_tmp"
    # Only remove what this script writes.
    for stale in (logdir, tmp):
        if stale.exists():
            shutil.rmtree(stale)
    for stale in (out / "README.md", out / "expected.json"):
        if stale.exists():
            stale.unlink()
    logdir.mkdir(parents=True)
    tmp.mkdir()

    expected = {"demo_host": DEMO_HOST, "logdir": "logdir", "programs": {},
                "dumps": {}}
    results = {}
    try:
        for i, program in enumerate(programs):
            if i:
                time.sleep(1.1)  # distinct session folder names
            run_dir = logdir / program
            print(f"[make_demo] profiling {program} ...", flush=True)
            res = _run_worker(program, "profile", run_dir,
                              tmp / f"{program}.profile.json", args.steps, "")
            session, files = _rename_host_files(run_dir)
            xplane = files[".xplane.pb"]
            summary = read_xspace_summary(xplane)
            planes = {p["name"]: p for p in summary["planes"]}
            if "/host:metadata" not in planes:
                raise RuntimeError(f"{xplane}: no /host:metadata plane")
            if "/host:CPU" not in planes:
                raise RuntimeError(f"{xplane}: no /host:CPU plane")
            train = [m for m in summary["modules"]
                     if (m["name"] or "").split("(")[0] == res["module_name"]]
            if len(train) != 1:
                raise RuntimeError(
                    f"{xplane}: expected one {res['module_name']} module in "
                    f"/host:metadata, found {[m['name'] for m in summary['modules']]}")
            ma = res["memory_analysis"]
            res.update(session=session.name, files=files, summary=summary,
                       train_entry=train[0])
            results[program] = res
            expected["programs"][program] = {
                "run": program,
                "run_folder": f"logdir/{program}",
                "session": session.name,
                "host": DEMO_HOST,
                "xplane": str(xplane.relative_to(out)),
                "trace_json": (str(files[".trace.json.gz"].relative_to(out))
                               if ".trace.json.gz" in files else None),
                "module_name": res["module_name"],
                "profile_module_name": train[0]["name"],
                "program_id": train[0]["stats"].get("program_id"),
                "memory_analysis": ma,
                "arg_plus_out_plus_temp_minus_alias_bytes": (
                    ma["argument_size_in_bytes"] + ma["output_size_in_bytes"]
                    + ma["temp_size_in_bytes"] - ma["alias_size_in_bytes"]),
                "metadata_modules": [
                    {"name": m["name"], "program_id": m["stats"].get("program_id"),
                     "hlo_proto_bytes": (m["stats"].get("Hlo Proto") or {}).get("bytes"),
                     "hlo_proto_sha256": (m["stats"].get("Hlo Proto") or {}).get("sha256")}
                    for m in sorted(summary["modules"], key=lambda m: (
                        m["stats"].get("program_id", 1 << 62), m["name"] or ""))],
                "xspace_hostnames": summary["hostnames"],
                "planes": sorted(planes),
                "steps_traced": res["steps_traced"],
                "config": res["config"],
            }

        dump_programs = [p for p in args.dump_programs.split(",") if p]
        for program in [p for p in dump_programs if p in programs]:
            print(f"[make_demo] dumping XLA modules of {program} ...", flush=True)
            dump_dir = logdir / "dumps" / program
            flags = (f"--xla_dump_to={dump_dir} --xla_dump_hlo_as_text "
                     "--xla_dump_hlo_as_proto")
            dres = _run_worker(program, "dump", dump_dir,
                               tmp / f"{program}.dump.json", args.steps, flags)
            kept = _prune_dump(dump_dir)
            missing = [s for s in DUMP_KEEP_SUFFIXES
                       if not any(k.endswith(s) for k in kept)]
            if missing:
                raise RuntimeError(f"dump of {program} lacks {missing}: {kept}")
            if dres["memory_analysis"] != results[program]["memory_analysis"]:
                print(f"[make_demo] WARNING: memory analysis of the dump run "
                      f"differs: {dres['memory_analysis']}", flush=True)
            after_pb = next(k for k in kept
                            if k.endswith("cpu_after_optimizations.hlo.pb"))
            dump_blob = (dump_dir / after_pb).read_bytes()
            prof = results[program]["train_entry"]["stats"]["Hlo Proto"]
            same_bytes = hashlib.sha256(dump_blob).hexdigest() == prof["sha256"]
            same_content = _hlo_content_digest(dump_blob) == prof["content_sha256"]
            expected["dumps"][program] = {
                "folder": f"logdir/dumps/{program}",
                "module_name": dres["module_name"],
                "files": kept,
                "memory_analysis": dres["memory_analysis"],
                "after_optimizations_hlo_pb_same_bytes_as_profile": same_bytes,
                "after_optimizations_hlo_pb_same_content_as_profile": same_content,
            }
            print(f"[make_demo] {after_pb} vs the profile's embedded Hlo Proto: "
                  f"same bytes {same_bytes}, same content (schedule map order "
                  f"ignored) {same_content}", flush=True)
            if not same_content:
                print("[make_demo] WARNING: dump and profile HLO differ", flush=True)

        if not args.xprof_python:
            print("[make_demo] XProf reference numbers skipped: set XPROF_PYTHON or give "
                  "--xprof-python (a venv's python with xprof==2.24.2)", flush=True)
        if args.xprof_python:
            print("[make_demo] computing XProf reference numbers ...", flush=True)
            ref = _xprof_reference(args.xprof_python, out, expected, tmp)
            expected["xprof_version"] = ref.pop("_xprof_version", None)
            for program, per_module in ref.items():
                expected["programs"][program]["xprof_memory_viewer"] = per_module
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    any_res = next(iter(results.values()))
    expected["jax_version"] = any_res["jax_version"]
    expected["jaxlib_version"] = any_res["jaxlib_version"]
    expected["generated"] = _dt.datetime.now(_dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")

    all_files = sorted(p for p in logdir.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in all_files)
    expected["files"] = {str(p.relative_to(out)): p.stat().st_size
                         for p in all_files}
    expected["total_bytes"] = total
    (out / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    (out / "README.md").write_text(_readme(expected, results))
    total_all = total + sum((out / n).stat().st_size
                            for n in ("expected.json", "README.md"))

    print(f"[make_demo] wrote {len(all_files)} files, {_human(total_all)} "
          f"under {out}")
    for p in all_files:
        print(f"  {p.stat().st_size:>9}  {p.relative_to(out)}")
    for program, e in expected["programs"].items():
        print(f"[make_demo] {program}: {e['profile_module_name']} "
              f"program_id={e['program_id']} peak(arg+out+temp-alias)="
              f"{e['arg_plus_out_plus_temp_minus_alias_bytes']} xprof peak="
              f"{e.get('xprof_memory_viewer', {}).get(e['profile_module_name'], {}).get('peakHeapBytes')} "
              f"metadata modules="
              f"{[m['name'] for m in e['metadata_modules']]} "
              f"hostnames={e['xspace_hostnames']}")
    if total_all > TOTAL_MAX_BYTES:
        print(f"[make_demo] ERROR: demo is {total_all} bytes, over "
              f"{TOTAL_MAX_BYTES}", file=sys.stderr)
        return 1
    return 0


DESCRIPTIONS = {
    "mlp": ("MLP training step: 3 Dense layers, softmax cross-entropy, Adam; "
            "`jax.jit(train_step, donate_argnums=(0,))` with the whole train "
            "state (params + Adam moments + count) donated, plus a jitted "
            "`eval_step` (second module in `/host:metadata`)."),
    "transformer": ("Tiny decoder-only transformer: token + position embeddings, "
                    "layers applied with `jax.lax.scan` over stacked layer "
                    "params, the layer body wrapped in `jax.checkpoint` (remat); "
                    "loss + grad + global-norm clip + AdamW in one donated jit, "
                    "plus a jitted `eval_step`."),
    "convnet": ("Small conv net: 3 x `lax.conv_general_dilated` (NHWC, 3x3), "
                "global average pool, Dense; SGD with momentum, donated state."),
}


def _readme(expected, results):
    lines = [
        "# profscope demo log directory",
        "",
        "Generated by `scripts/make_demo.py` -- do not edit by hand; regenerate with",
        "",
        "```",
        "python3 -m venv .venv-jax",
        ".venv-jax/bin/pip install 'jax[cpu]==0.10.2'",
        ".venv-jax/bin/python scripts/make_demo.py --out src/profscope/demo",
        "```",
        "",
        f"Made with jax {expected['jax_version']} / jaxlib "
        f"{expected['jaxlib_version']} on the CPU backend, "
        f"{expected['generated']}. Seeds are fixed, so shapes, HLO and the "
        "memory numbers below repeat; timestamps, session names and durations "
        "change on every regeneration (program ids have repeated so far but "
        "are not promised).",
        "",
        "Each run was profiled with `jax.profiler.trace` (default "
        "`ProfileOptions`: host tracer level 2, python tracer level 1, HLO "
        "protos on) around a few training steps, after one warm-up step "
        "outside the trace. Profile files were renamed from `<hostname>.*` to "
        f"`{expected['demo_host']}.*`; the original hostname is still recorded "
        "in the XSpace `hostnames` field. On CPU a profile has the "
        "`/host:metadata` plane (one event-metadata entry per compiled module, "
        "stats `Hlo Proto` and `program_id`) and `/host:CPU` (python tracer, "
        "per-HLO-op events), no device planes and no allocator events.",
        "",
        "## Runs",
        "",
    ]
    for program, e in expected["programs"].items():
        ma = e["memory_analysis"]
        lines += [
            f"### `{program}`",
            "",
            DESCRIPTIONS[program],
            "",
            f"- config: `{json.dumps(e['config'])}`",
            f"- session: `{e['run_folder']}/plugins/profile/{e['session']}`, "
            f"host `{e['host']}`, {e['steps_traced']} traced steps",
            f"- train-step module: `{e['module_name']}` "
            f"(in the profile: `{e['profile_module_name']}`, program_id "
            f"{e['program_id']})",
            "- modules in `/host:metadata`: "
            + ", ".join(f"`{m['name']}`" for m in e["metadata_modules"]),
            f"- planes: {', '.join('`%s`' % p for p in e['planes'])}",
            "- `compiled.memory_analysis()` of the train step: "
            + ", ".join(f"{k}={ma[k]}" for k in MEMORY_FIELDS[:5] if k in ma),
            f"- argument + output + temp - alias "
            f"= {e['arg_plus_out_plus_temp_minus_alias_bytes']} bytes "
            f"({_human(e['arg_plus_out_plus_temp_minus_alias_bytes'])}); "
            f"`peak_memory_in_bytes` ({ma.get('peak_memory_in_bytes')}) "
            "leaves out temporaries on CPU",
        ]
        xp = e.get("xprof_memory_viewer", {}).get(e["profile_module_name"])
        if xp:
            frag = xp["totalBufferAllocationBytes"] - xp["peakHeapBytes"]
            lines += [
                f"- XProf {expected.get('xprof_version')} memory viewer on this "
                f"module: peak heap {xp['peakHeapBytes']} bytes at heap-event "
                f"{xp['peakHeapSizePosition']} of {xp['heapSizesLength']}, total "
                f"buffer allocation {xp['totalBufferAllocationBytes']} bytes "
                f"(allocation - simulated peak = {frag} bytes)",
            ]
        lines.append("")
    if any("xprof_memory_viewer" in e for e in expected["programs"].values()):
        lines += [
            "`expected.json` also holds, per run and module, XProf's memory-viewer "
            "numbers (`peakHeapBytes`, `totalBufferAllocationBytes`, ...; XProf's "
            "MiB floats times 2^20) computed with `--xprof-python`. "
            "argument + output + temp - alias matches XProf's *total buffer "
            "allocation*; XProf's *peak heap* (max of the simulated live bytes) "
            "can be lower when the temp allocation has holes, as in the scanned "
            "transformer.",
            "",
        ]
    if expected["dumps"]:
        lines += ["## XLA dumps", ""]
        for program, d in expected["dumps"].items():
            lines += [
                f"`{d['folder']}`: the `{program}` program run again with "
                "`XLA_FLAGS=\"--xla_dump_to=DIR --xla_dump_hlo_as_text "
                "--xla_dump_hlo_as_proto\"`, pruned to the "
                f"`{', '.join(DUMP_MODULES)}` module: "
                + ", ".join(f"`{f}`" for f in d["files"]) + ".",
                "The `*.cpu_after_optimizations.hlo.pb` is an `xla.HloProto` "
                "(module + buffer assignment with heap-simulator traces). Same "
                "content as the profile's embedded `Hlo Proto` (ignoring the "
                "order of `schedule.sequences` map entries, which is not fixed "
                "on the wire): "
                f"{d['after_optimizations_hlo_pb_same_content_as_profile']}; "
                "byte-identical: "
                f"{d['after_optimizations_hlo_pb_same_bytes_as_profile']}.",
                "",
            ]
    lines += ["## Files", "", "| bytes | file |", "|---:|---|"]
    for f, n in expected["files"].items():
        lines.append(f"| {n} | `{f}` |")
    lines += ["", f"Total under `logdir/`: {expected['total_bytes']} bytes "
              f"({_human(expected['total_bytes'])}).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
