"""Regenerate the XLA dump examples in this folder (real jax CPU compilations).

    .venv/bin/python tests/data/buffer_assignment/make_examples.py \\
        [--python PY] [--only NAME ...] [--out DIR]

Each program is compiled in its own subprocess of ``PY`` (default: this interpreter) with
``XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text --xla_dump_hlo_as_proto
--xla_dump_compress_protos`` set before jax is imported. For every program the entry
module's after-optimizations ``-buffer-assignment.txt``, ``-memory-usage-report.txt`` (when
that XLA writes one), ``.hlo.pb.gz`` and ``-memory-usage-report.pb.gz`` (written by XLA
itself, compressed to keep the checked-in files small) are copied into ``jax-<version>/``
here, under XLA's own file names. The protos let the tests cross-check the text against the
BufferAssignmentProto and the MemoryUsageReportProto of the same compilation.

The text format drifts across XLA versions, so the folder holds dumps of three jax releases:

- ``jax-0.10.2/`` (the project's pinned jax; all programs): ``-buffer-assignment.txt`` holds
  only the allocations (the values moved to ``-buffer-assignment-values.txt``); the report
  is ``Memory Space: ... / Total bytes: ...`` with one offset table per allocation.
- ``jax-0.5.3/`` (``--only donate_tuple``, from a scratch venv with
  ``pip install jax==0.5.3 jaxlib==0.5.3``): the file ends with ``Total bytes used:``,
  ``Used values:`` and ``HloLiveRange``; the report is ``Total bytes used: ... /
  Allocations sorted by size: ...``.
- ``jax-0.4.30/`` (``--only donate_tuple``, ``pip install jax==0.4.30 jaxlib==0.4.30
  'numpy<2'``): no report at all, and ``Used values:`` entries run on after
  ``from instruction: ...`` without a newline.

(Only the small module is kept for the old releases: their files carry the values and live
ranges too and would pass 30 KB for the others.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: --xla_dump_compress_protos: XLA writes ``.hlo.pb.gz`` (a real dump form; keeps the
#: checked-in protos small).
COMPRESS = True

# name -> (module name to keep, program source run in the subprocess)
PROGRAMS: dict[str, tuple[str, str]] = {
    # lax.scan over layers + jax.checkpoint (rematerialised), forward and backward.
    "scan_remat": ("jit_loss_and_grad", r'''
import jax, jax.numpy as jnp
L, D, T = 3, 16, 8
def layer(x, w):
    h = jnp.tanh(x @ w["a"])
    return x + h @ w["b"], None
def loss(ws, x):
    y, _ = jax.lax.scan(jax.checkpoint(layer), x, ws)
    return jnp.mean(y ** 2)
def loss_and_grad(ws, x):
    return jax.value_and_grad(loss)(ws, x)
ws = {"a": jnp.ones((L, D, D)) * 0.01, "b": jnp.ones((L, D, D)) * 0.01}
x = jnp.ones((T, D))
jax.jit(loss_and_grad)(ws, x)[0].block_until_ready()
'''),
    # A small conv net: conv + relu + pool + dense, with gradients.
    "convnet": ("jit_conv_step", r'''
import jax, jax.numpy as jnp
def net(p, x):
    y = jax.lax.conv_general_dilated(x, p["k1"], (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = jax.nn.relu(y)
    y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    y = y.reshape(y.shape[0], -1)
    return y @ p["w"]
def conv_step(p, x, t):
    l, g = jax.value_and_grad(lambda p: jnp.mean((net(p, x) - t) ** 2))(p)
    return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), l
p = {"k1": jnp.ones((3, 3, 3, 8)) * 0.1, "w": jnp.ones((8 * 8 * 8, 10)) * 0.01}
x = jnp.ones((4, 16, 16, 3)); t = jnp.zeros((4, 10))
jax.jit(conv_step)(p, x, t)[1].block_until_ready()
'''),
    # Tuple outputs, a non-scalar constant, donated arguments (input/output aliasing).
    "donate_tuple": ("jit_update", r'''
import numpy as np, jax, jax.numpy as jnp
TABLE = np.arange(256, dtype=np.float32).reshape(16, 16)
def update(state, grads, lr):
    new = jax.tree.map(lambda s, g: s - lr * g, state, grads)
    stats = (jnp.sum(new["w"] @ TABLE), jnp.max(new["b"]), new["w"].T @ new["w"])
    return new, stats
state = {"w": jnp.ones((16, 16)), "b": jnp.ones((16,))}
grads = {"w": jnp.full((16, 16), 0.5), "b": jnp.full((16,), 0.5)}
f = jax.jit(update, donate_argnums=(0,))
out = f(state, grads, jnp.float32(0.1))
jax.block_until_ready(out)
'''),
}


def dump(python: str, program: str, dump_dir: Path) -> None:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_dump_to={dump_dir} --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"
    if COMPRESS:
        env["XLA_FLAGS"] += " --xla_dump_compress_protos"
    env["JAX_PLATFORMS"] = "cpu"
    subprocess.run([python, "-c", program], env=env, check=True)


def jax_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import jax; print(jax.__version__)"],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable, help="interpreter with jax installed")
    ap.add_argument("--only", nargs="*", default=None, help="program names (default: all)")
    ap.add_argument("--out", type=Path, default=None, help="keep the whole dump in DIR")
    args = ap.parse_args()
    target = HERE / f"jax-{jax_version(args.python)}"
    target.mkdir(exist_ok=True)
    root = args.out or Path(tempfile.mkdtemp(prefix="ba_dumps_"))
    for name, (module, program) in PROGRAMS.items():
        if args.only is not None and name not in args.only:
            continue
        d = root / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        dump(args.python, program, d)
        picked = sorted(d.glob(f"module_*.{module}.*after_optimizations-buffer-assignment.txt"))
        if not picked:
            raise SystemExit(f"{name}: no buffer assignment for {module} in {d}")
        stem = picked[-1].name[: -len("-buffer-assignment.txt")]
        for suffix in (
            "-buffer-assignment.txt", "-memory-usage-report.txt", ".hlo.pb", ".hlo.pb.gz",
            "-memory-usage-report.pb", "-memory-usage-report.pb.gz",
        ):
            src = d / (stem + suffix)
            if src.exists():
                shutil.copyfile(src, target / src.name)
                print(f"{target.name}/{src.name}: {src.stat().st_size} bytes")
    if args.out is None:
        shutil.rmtree(root)
    else:
        print(f"dumps left in {root}")


if __name__ == "__main__":
    main()
