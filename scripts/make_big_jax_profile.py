#!/usr/bin/env python3
"""Write a large real JAX profile for the trace viewer's benchmark and tests.

A small MLP training step is jitted and run for ``--steps`` steps inside
``jax.profiler.trace`` with the Python tracer on (``python_tracer_level=1``) and the host
tracer at level 3 (every TraceMe, XLA's per-thunk events included). Each step is a
``StepTraceAnnotation`` and goes through a few plain Python helpers, so the profile holds
what real ones hold: thread lines of the XLA CPU client and Eigen pools with per-op events
(``hlo_op``/``hlo_module``/``program_id`` stats), the ``python`` line with deeply nested
Python frames, and step annotations. Size grows linearly with ``--steps`` (about 40 KB
per step with the defaults; ``--steps 8000`` gives a few hundred MB).

Usage::

    .venv/bin/python scripts/make_big_jax_profile.py --out bigprof --steps 8000
    .venv/bin/python scripts/make_big_jax_profile.py --out small --steps 20      # tests

Prints the xplane path and its size. The run's folder is ``--out`` (a log directory:
``<out>/plugins/profile/<session>/<host>.xplane.pb``); the host part of the file name is
renamed to ``--host`` so results are stable across machines.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _layer(x, w, b):
    import jax.numpy as jnp

    return jnp.tanh(x @ w + b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--host", default="bighost")
    ap.add_argument("--python-depth", type=int, default=20, help="nested Python helpers per step")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    w = args.width
    params = {
        "w1": jax.random.normal(k1, (w, w)) * 0.1, "b1": jnp.zeros(w),
        "w2": jax.random.normal(k2, (w, w)) * 0.1, "b2": jnp.zeros(w),
        "w3": jax.random.normal(k3, (w, 1)) * 0.1, "b3": jnp.zeros(1),
    }
    x = jax.random.normal(key, (32, w))
    y = jnp.sum(x, axis=1, keepdims=True)

    def loss(p, x, y):
        h = _layer(x, p["w1"], p["b1"])
        h = _layer(h, p["w2"], p["b2"])
        out = h @ p["w3"] + p["b3"]
        return jnp.mean((out - y) ** 2)

    @jax.jit
    def train_step(p, x, y):
        lval, g = jax.value_and_grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g), lval

    def nested(depth, p):
        # plain Python frames for the Python tracer (real programs are deep)
        if depth == 0:
            return train_step(p, x, y)
        return nested(depth - 1, p)

    params, lval = train_step(params, x, y)  # compile outside the profile
    lval.block_until_ready()
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 1
    opts.host_tracer_level = 3
    args.out.mkdir(parents=True, exist_ok=True)
    jax.profiler.start_trace(str(args.out), profiler_options=opts)
    for step in range(args.steps):
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            params, lval = nested(args.python_depth, params)
            # a few eager ops: each dispatch runs through jax's Python code (frames for the
            # Python tracer) and a small compiled computation (ops for the host tracer)
            metric = jnp.sqrt(lval) * 2.0 + jnp.float32(step)
            metric.block_until_ready()
    jax.profiler.stop_trace()
    found = sorted(args.out.glob("plugins/profile/*/*.xplane.pb"), key=os.path.getmtime)
    if not found:
        sys.exit("no xplane.pb written")
    src = found[-1]
    dst = src.with_name(f"{args.host}.xplane.pb")
    if src != dst:
        src.rename(dst)
    for extra in src.parent.glob("*.trace.json.gz"):
        extra.unlink()  # the trace viewer reads the xplane; keep the folder to one host file
    print(dst, dst.stat().st_size)


if __name__ == "__main__":
    main()
