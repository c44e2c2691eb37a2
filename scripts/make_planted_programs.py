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
PROGRAMS = ("input_bound", "bad_transpose", "convert_reduce", "unfused_pad")
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


BUILD = {"input_bound": _input_bound, "bad_transpose": _bad_transpose, "convert_reduce": _convert_reduce,
         "unfused_pad": _unfused_pad}


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
