#!/usr/bin/env python3
"""Real JAX programs (on CPU) with one planted problem each, for the Summary's planted
suite (issue 35, ``profscope.testing.planted``; docs/analysis.md, "Planted problems").

What it makes, under ``--out`` (default ``tests/data/planted_programs``), one log-directory
run per program (``<program>/plugins/profile/<session>/host.xplane.pb``, the compiled
modules' HLO protos in its ``/host:metadata`` plane, as ``jax.profiler.trace`` writes it):

``input_bound``
    a small jitted MLP step run 6 times, each step (``jax.profiler.StepTraceAnnotation``
    ``train``) first sleeping 20 ms on the host (a slow data loader) and then running a
    ~2 ms step: the steps are mostly host time with nothing for the device to do.
``bad_transpose``
    a module whose output is ``jnp.transpose(x, (0, 2, 1))`` of a (64, 512, 256) float32
    array used once more after: XLA must materialise the transposed layout as its own
    ``copy``/``transpose`` (the entry result's layout is row-major), 32 MiB moved for no
    arithmetic.
``convert_reduce``
    ``jnp.sum(x.astype(jnp.float32), axis=-1).astype(jnp.bfloat16)`` of a bf16 (2048, 4096)
    array in an inference-style function: bf16 -> f32 convert, the reduction, f32 -> bf16
    (the pattern of XProf's ``detect_unnecessary_convert_reduce``).
``unfused_pad``
    a (2048, 4032) activation padded to 4096 columns (``jnp.pad``, as to a tile multiple)
    and multiplied by a weight: the padded copy (32 MiB) is made by a kernel of its own
    (XLA CPU's ``wrapped_pad``) before the dot reads it, a data-formatting op not fused
    into its consumer. (A reshape + transpose before a dot becomes a layout-changing copy
    on CPU: ``bad_transpose``.)

Pairs, two problems in one real program:

``undonated_remat``
    wide residual MLP blocks without ``jax.checkpoint`` (activations most of the peak),
    trained with SGD, the parameters passed without ``donate_argnums``.
``transpose_convert``
    one module doing both ``bad_transpose``'s transposed output and ``convert_reduce``'s
    bf16 -> f32 -> sum -> bf16.
``pad_convert``
    one module doing ``unfused_pad``'s pad before a dot and ``convert_reduce``'s sum.
``eval_undonated``
    an MLP (256-1024-256, 2 MiB of weights) train step without ``donate_argnums`` (batch
    16) and an eval step on a batch of 4096, whose compiled peak (16 MiB of activations)
    is above the train step's.

``programs.json`` lists each program, its modules and jax's version. Each program runs in
its own interpreter (a profile's metadata plane lists every module the process compiled).

Usage: ``.venv/bin/python scripts/make_planted_programs.py [--out DIR] [PROGRAM ...]``
(jax on CPU, ``JAX_PLATFORMS=cpu``; a few seconds per program).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "planted_programs"
PROGRAMS = ("input_bound", "bad_transpose", "convert_reduce", "unfused_pad", "undonated_remat", "transpose_convert",
            "pad_convert", "eval_undonated")
INPUT_SLEEP_S = 0.020
STEPS = 6


def _f32(rng, shape):
    import jax.numpy as jnp
    import numpy as np

    return jnp.asarray(rng.normal(size=shape).astype(np.float32))


def _input_bound(rng):
    import jax
    import jax.numpy as jnp

    w1, w2 = _f32(rng, (256, 512)), _f32(rng, (512, 64))

    def train_step(w1, w2, x):
        def loss(w1, w2):
            return jnp.mean(jnp.tanh(x @ w1) @ w2)
        g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2)
        return w1 - 1e-3 * g1, w2 - 1e-3 * g2

    step = jax.jit(train_step)
    x = _f32(rng, (128, 256))

    def loop():
        nonlocal w1, w2
        for i in range(STEPS):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                time.sleep(INPUT_SLEEP_S)  # the planted problem: the host prepares the batch
                w1, w2 = jax.block_until_ready(step(w1, w2, x))
    jax.block_until_ready(step(w1, w2, x))
    return loop, 2


def _bad_transpose(rng):
    import jax

    x = _f32(rng, (64, 512, 256))

    def f(x):
        t = x.transpose(0, 2, 1)
        return t, t.sum(axis=1)

    fn = jax.jit(f)
    return (lambda: jax.block_until_ready(fn(x))), 0


def _convert_reduce(rng):
    import jax
    import jax.numpy as jnp

    x = _f32(rng, (2048, 4096)).astype(jnp.bfloat16)
    fn = jax.jit(lambda x: jnp.sum(x.astype(jnp.float32), axis=-1).astype(jnp.bfloat16))
    return (lambda: jax.block_until_ready(fn(x))), 0


def _unfused_pad(rng):
    import jax
    import jax.numpy as jnp

    x, w = _f32(rng, (2048, 4032)), _f32(rng, (4096, 256))
    fn = jax.jit(lambda x, w: jnp.pad(x, ((0, 0), (0, 64))) @ w)
    return (lambda: jax.block_until_ready(fn(x, w))), 0


def _undonated_remat(rng):
    import jax
    import jax.numpy as jnp

    layers, d, ff, tokens = 6, 128, 1024, 512
    params = {"w1": _f32(rng, (layers, d, ff)) * 0.05, "w2": _f32(rng, (layers, ff, d)) * 0.05}
    x = _f32(rng, (tokens, d))

    def block(h, p):
        return h + jax.nn.gelu(h @ p["w1"]) @ p["w2"], None

    def train_step(params, x):
        def loss(params):
            h, _ = jax.lax.scan(block, x, params)
            return jnp.mean(h * h)
        g = jax.grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, g)

    step = jax.jit(train_step)  # no donate_argnums: the old parameters live beside the new

    def loop():
        nonlocal params
        params = jax.block_until_ready(step(params, x))
    return loop, 0


def _transpose_convert(rng):
    import jax
    import jax.numpy as jnp

    x, y = _f32(rng, (64, 512, 256)), _f32(rng, (2048, 4096)).astype(jnp.bfloat16)

    def f(x, y):
        t = x.transpose(0, 2, 1)
        return t, t.sum(axis=1), jnp.sum(y.astype(jnp.float32), axis=-1).astype(jnp.bfloat16)

    fn = jax.jit(f)
    return (lambda: jax.block_until_ready(fn(x, y))), 0


def _pad_convert(rng):
    import jax
    import jax.numpy as jnp

    x, w = _f32(rng, (2048, 4032)), _f32(rng, (4096, 256))
    y = _f32(rng, (2048, 4096)).astype(jnp.bfloat16)

    def f(x, w, y):
        return jnp.pad(x, ((0, 0), (0, 64))) @ w, jnp.sum(y.astype(jnp.float32), axis=-1).astype(jnp.bfloat16)

    fn = jax.jit(f)
    return (lambda: jax.block_until_ready(fn(x, w, y))), 0


def _eval_undonated(rng):
    import jax
    import jax.numpy as jnp

    sizes = (256, 1024, 256)  # 2 MiB of weights kept twice by the undonated step
    params = [(_f32(rng, (a, b)) * 0.05, jnp.zeros((b,), jnp.float32)) for a, b in zip(sizes, sizes[1:])]

    def forward(params, x):
        for i, (w, b) in enumerate(params):
            x = x @ w + b
            x = jax.nn.relu(x) if i < len(params) - 1 else x
        return x

    def train_step(params, x):
        g = jax.grad(lambda p: jnp.mean(forward(p, x) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, g)

    def eval_step(params, x):
        return jnp.argmax(forward(params, x), -1)

    train, evaluate = jax.jit(train_step), jax.jit(eval_step)  # train without donate_argnums
    x, big = _f32(rng, (16, 256)), _f32(rng, (4096, 256))

    def loop():
        nonlocal params
        params = jax.block_until_ready(train(params, x))
        jax.block_until_ready(evaluate(params, big))
    return loop, 0


BUILD = {"input_bound": _input_bound, "bad_transpose": _bad_transpose, "convert_reduce": _convert_reduce,
         "unfused_pad": _unfused_pad, "undonated_remat": _undonated_remat, "transpose_convert": _transpose_convert,
         "pad_convert": _pad_convert, "eval_undonated": _eval_undonated}


def run(program: str, out: Path) -> dict:
    import jax
    import numpy as np

    loop, host_level = BUILD[program](np.random.default_rng(7))
    loop()  # compiled and warmed up outside the trace
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0
    # input_bound keeps the host tracer: its steps are TraceMe annotations on the host.
    opts.host_tracer_level = host_level
    target = out / program
    with jax.profiler.trace(str(target), profiler_options=opts):
        loop()
    for f in target.rglob("*.trace.json.gz"):
        f.unlink()
    return {"program": program, "jax_version": jax.__version__}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("programs", nargs="*", default=list(PROGRAMS))
    ap.add_argument("--_one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args._one:
        import jax

        jax.config.update("jax_platforms", "cpu")
        (args.out / f"{args._one}.json").write_text(json.dumps(run(args._one, args.out)))
        return 0
    listed = args.out / "programs.json"
    results = json.loads(listed.read_text()) if listed.exists() else {}
    for p in args.programs:
        if p not in PROGRAMS:
            raise SystemExit(f"unknown program {p!r}; programs: {', '.join(PROGRAMS)}")
        for old in (args.out / p).glob("plugins/profile/*"):
            for f in old.iterdir():
                f.unlink()
            old.rmdir()
        subprocess.run([sys.executable, os.path.abspath(__file__), "--out", str(args.out), "--_one", p], check=True)
        results[p] = json.loads((args.out / f"{p}.json").read_text())
        (args.out / f"{p}.json").unlink()
    listed.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
