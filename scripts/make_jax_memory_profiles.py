#!/usr/bin/env python3
"""Write real JAX device-memory profiles (pprof) for profscope's tests.

    make-style: python3 -m venv .venv-jax && .venv-jax/bin/pip install 'jax[cpu]==0.10.2'
    .venv-jax/bin/python scripts/make_jax_memory_profiles.py --out tests/data/jax_memory_profiles

Writes, with ``jax.profiler.save_device_memory_profile`` (a gzipped pprof Profile):

* ``mlp/memory.prof``: one profile of a small MLP's training step, taken while its
  parameters, gradients and a batch are alive;
* ``leak/step_000.prof`` ... ``leak/step_004.prof``: successive profiles of a loop that
  leaks: :func:`leaky_step` keeps a reference to a growing array in a module-level list,
  so each profile holds one more (and larger) buffer made at :data:`LEAK_LINE` of this
  file. The tests name that line as where the memory grew.

Runs on CPU (JAX_PLATFORMS=cpu); the device label is ``cpu:0``. Frames outside this file
are jax's own (their paths are the venv's; the tests do not depend on them).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

KEPT: list = []  # the leak: references that are never dropped


def leaky_step(i: int, x):
    y = jnp.tanh(x) * (i + 1)
    KEPT.append(jnp.ones((256 * (i + 1), 256), jnp.float32) + y.mean())  # LEAK_LINE
    return y


LEAK_LINE = next(n for n, line in enumerate(inspect.getsourcelines(leaky_step)[0], inspect.getsourcelines(leaky_step)[1])
                 if "# LEAK_LINE" in line)


def mlp(out: Path) -> None:
    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    params = {"w1": jax.random.normal(k1, (512, 1024)) * 0.02, "w2": jax.random.normal(k2, (1024, 10)) * 0.02}
    batch = jax.random.normal(k3, (256, 512))
    labels = jnp.arange(256) % 10

    def loss(p, x, y):
        h = jax.nn.relu(x @ p["w1"])
        logits = h @ p["w2"]
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(x.shape[0]), y])

    grads = jax.jit(jax.grad(loss))(params, batch, labels)
    jax.block_until_ready(grads)
    (out / "mlp").mkdir(parents=True, exist_ok=True)
    jax.profiler.save_device_memory_profile(str(out / "mlp" / "memory.prof"))


def leak(out: Path, steps: int) -> None:
    (out / "leak").mkdir(parents=True, exist_ok=True)
    x = jnp.ones((128, 128))
    for i in range(steps):
        x = leaky_step(i, x)
        jax.block_until_ready(KEPT[-1])
        jax.profiler.save_device_memory_profile(str(out / "leak" / f"step_{i:03d}.prof"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    mlp(args.out)
    leak(args.out, args.steps)
    import jaxlib
    (args.out / "expected.json").write_text(json.dumps({
        "jax": jax.__version__, "jaxlib": jaxlib.__version__, "leak_function": "leaky_step",
        "leak_file": Path(__file__).name, "leak_line": LEAK_LINE, "steps": args.steps}, indent=1) + "\n")


if __name__ == "__main__":
    main()
