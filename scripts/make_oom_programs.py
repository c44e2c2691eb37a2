"""Real JAX programs built to trigger (or not trigger) the OOM-risk findings.

Each program is compiled and run a few steps under ``jax.profiler.trace``; the profile
(``<out>/<program>/plugins/profile/<session>/host.xplane.pb``, HLO protos embedded in its
``/host:metadata`` plane) is what the OOM-risk tests read. Pairs differ in one thing:

``donated`` / ``undonated``
    an MLP train step with Adam, the whole train state passed with / without
    ``donate_argnums``. Without donation XLA must keep the old state (an entry parameter
    that is not live-out) next to the new one (a live-out output of the same shape).
``remat_off`` / ``remat_on``
    a stack of wide residual MLP blocks whose activations dwarf the parameters, trained
    with plain SGD; ``remat_on`` wraps every block in ``jax.checkpoint`` so that only
    block inputs are saved for the backward pass.
``eval_heavy``
    a small train step and an ``eval_step`` on a large batch: the eval module, not the
    training step, has the highest compiled peak.
``two_batch``
    one Adam MLP train step compiled twice: ``train_step`` at batch 256 (run six times,
    so it is the module that ran most) and ``train_step_big`` at batch 1024 (run once):
    the run's verdict must be the big step's. The same program is also compiled with
    ``XLA_FLAGS=--xla_dump_to=<out>/two_batch_dump`` (the XLA dump of both steps, pruned
    to their optimized HLO protos and buffer-assignment texts), so that the dump and the
    profile can be rated side by side; ``<out>/two_batch_text_dump`` holds the same
    compiles' buffer-assignment and live-range texts alone (a text-only dump).

Also writes ``<out>/programs.json``: per program its modules, the train-step module and
``compiled.memory_analysis()``, so tests can compare against XLA's own numbers.

Usage: ``python scripts/make_oom_programs.py --out DIR [PROGRAM ...]`` (jax on CPU;
``JAX_PLATFORMS=cpu`` is set here). Takes ~10-20 s on two cores; profiles are small
(python and host tracers off: only the metadata plane with the HLO protos matters).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PROGRAMS = ("donated", "undonated", "remat_off", "remat_on", "eval_heavy", "two_batch")
TWO_BATCH = {"sizes": (128, 384, 384, 64), "batch": 256, "big_batch": 1024}
MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes")


def _adam(params, grads, opt, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    import jax
    import jax.numpy as jnp

    count = opt["count"] + 1
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, opt["mu"], grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, opt["nu"], grads)
    c = count.astype(jnp.float32)
    params = jax.tree.map(
        lambda p, m, v: p - lr * (m / (1 - b1**c)) / (jnp.sqrt(v / (1 - b2**c)) + eps), params, mu, nu
    )
    return params, {"mu": mu, "nu": nu, "count": count}


def _f32(a):
    # Converted on the host: a float64 array converted by jnp would compile one more
    # (convert_element_type) module into the profile, with a peak of its own.
    import jax.numpy as jnp
    import numpy as np

    return jnp.asarray(np.asarray(a, np.float32))


def _mlp(rng, sizes):
    import numpy as np

    return {
        f"dense_{i}": {"w": _f32(rng.normal(0, 0.05, (a, b))), "b": _f32(np.zeros((b,)))}
        for i, (a, b) in enumerate(itertools.pairwise(sizes))
    }


def _mlp_forward(params, x):
    import jax

    n = len(params)
    for i in range(n):
        p = params[f"dense_{i}"]
        x = x @ p["w"] + p["b"]
        if i < n - 1:
            x = jax.nn.relu(x)
    return x


def _xent(logits, y):
    import jax
    import jax.numpy as jnp

    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def build_adam_mlp(rng, donate: bool, sizes=(256, 1024, 1024, 256), batch=32, eval_batch=None):
    import jax
    import jax.numpy as jnp
    import numpy as np

    params = _mlp(rng, sizes)
    zeros = jax.tree.map(jnp.zeros_like, params)
    state = {"params": params, "opt": {"mu": zeros, "nu": jax.tree.map(jnp.zeros_like, params), "count": jnp.zeros((), jnp.int32)}}

    def train_step(state, batch):
        x, y = batch
        loss, grads = jax.value_and_grad(lambda p: _xent(_mlp_forward(p, x), y))(state["params"])
        params, opt = _adam(state["params"], grads, state["opt"])
        return {"params": params, "opt": opt}, loss

    def eval_step(params, batch):
        x, y = batch
        logits = _mlp_forward(params, x)
        return _xent(logits, y), jnp.argmax(logits, -1)

    def data(n):
        return (_f32(rng.normal(size=(n, sizes[0]))), jnp.asarray(rng.integers(0, sizes[-1], n).astype(np.int32)))

    return {
        "train_step": jax.jit(train_step, donate_argnums=(0,) if donate else ()),
        "eval_step": jax.jit(eval_step) if eval_batch else None,
        "state": state,
        "batch": data(batch),
        "eval_batch": data(eval_batch) if eval_batch else None,
        "config": {"layer_sizes": list(sizes), "batch": batch, "eval_batch": eval_batch, "optimizer": "adam", "donate": donate},
    }


def build_blocks(rng, remat: bool, layers=6, d=128, ff=1024, tokens=512):
    """Residual MLP blocks (x + W2 gelu(W1 x)): per block the backward pass needs x, W1 x
    and gelu(W1 x) (ff wide); under ``jax.checkpoint`` only x is saved."""
    import jax
    import jax.numpy as jnp

    # Layers stacked and applied with lax.scan: the backward scan then runs one layer at
    # a time, so with jax.checkpoint only one layer's recomputed activations are live.
    params = {"w1": _f32(rng.normal(0, 0.05, (layers, d, ff))), "w2": _f32(rng.normal(0, 0.05, (layers, ff, d)))}

    def block(x, p):
        return x + jax.nn.gelu(x @ p["w1"]) @ p["w2"], None

    body = jax.checkpoint(block) if remat else block

    def loss_fn(params, x):
        x, _ = jax.lax.scan(body, x, params)
        return jnp.mean(x * x)

    def train_step(params, x):
        loss, grads = jax.value_and_grad(loss_fn)(params, x)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), loss

    return {
        "train_step": jax.jit(train_step, donate_argnums=(0,)),
        "eval_step": None,
        "state": params,
        "batch": _f32(rng.normal(size=(tokens, d))),
        "eval_batch": None,
        "config": {"layers": layers, "d_model": d, "d_ff": ff, "tokens": tokens, "optimizer": "sgd", "remat": remat},
    }


def build_two_batch(rng):
    """The same train step under two names (JAX names a module after the function:
    ``jit_train_step``, ``jit_train_step_big``), at batch 256 and 1024."""
    import jax

    prog = build_adam_mlp(rng, donate=True, sizes=TWO_BATCH["sizes"], batch=TWO_BATCH["batch"])
    small = prog["train_step"]

    def train_step_big(state, batch):
        return small(state, batch)

    big = build_adam_mlp(rng, donate=True, sizes=TWO_BATCH["sizes"], batch=TWO_BATCH["big_batch"])
    # Inlined into jit_train_step_big: the inner jit is traced, not called as a module.
    prog["big_step"] = jax.jit(train_step_big, donate_argnums=(0,))
    prog["big_batch"] = big["batch"]
    prog["steps"] = 6
    prog["host_tracer_level"] = 2
    prog["config"] = {**prog["config"], "big_batch": TWO_BATCH["big_batch"], "big_step_module": "jit_train_step_big"}
    return prog


def build(program: str, rng):
    if program == "donated":
        return build_adam_mlp(rng, donate=True)
    if program == "undonated":
        return build_adam_mlp(rng, donate=False)
    if program == "remat_off":
        return build_blocks(rng, remat=False)
    if program == "remat_on":
        return build_blocks(rng, remat=True)
    if program == "eval_heavy":
        return build_adam_mlp(rng, donate=True, sizes=(64, 128, 64), batch=16, eval_batch=4096)
    if program == "two_batch":
        return build_two_batch(rng)
    raise SystemExit(f"unknown program {program!r}; programs: {', '.join(PROGRAMS)}")


def run(program: str, out: Path, steps: int = 2) -> dict:
    import jax
    import numpy as np

    rng = np.random.default_rng(7)
    prog = build(program, rng)
    step, state, batch = prog["train_step"], prog["state"], prog["batch"]
    compiled = step.lower(state, batch).compile()
    ma = compiled.memory_analysis()
    memory = {f: int(getattr(ma, f)) for f in MEMORY_FIELDS}
    # Warm-up outside the trace: the traced steps reuse the executable.
    state, loss = step(state, batch)
    jax.block_until_ready(loss)
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0
    # two_batch keeps the host tracer: its CPU op events (hlo_module, program_id) time
    # each module, which is how the profile says which step ran most.
    opts.host_tracer_level = prog.get("host_tracer_level", 0)
    target = out / program
    big = prog.get("big_step")
    if big is not None:
        state, loss = big(state, prog["big_batch"])
        jax.block_until_ready(loss)
        ma_big = big.lower(state, prog["big_batch"]).compile().memory_analysis()
        memory_big = {f: int(getattr(ma_big, f)) for f in MEMORY_FIELDS}
    with jax.profiler.trace(str(target), profiler_options=opts):
        for _ in range(prog.get("steps", steps)):
            state, loss = step(state, batch)
            jax.block_until_ready(loss)
        if big is not None:
            state, loss = big(state, prog["big_batch"])
            jax.block_until_ready(loss)
        if prog["eval_step"] is not None:
            params = state["params"]
            jax.block_until_ready(prog["eval_step"](params, prog["eval_batch"]))
    # The traced session may also write a trace.json.gz; the tests need the xplane only.
    for f in target.rglob("*.trace.json.gz"):
        f.unlink()
    out_ = {"program": program, "config": prog["config"], "train_memory_analysis": memory,
            "train_step_module": "jit_train_step", "has_eval_step": prog["eval_step"] is not None}
    if big is not None:
        out_["big_step_memory_analysis"] = memory_big
    return out_


DUMP_KEEP = ("after_optimizations.hlo.pb", "after_optimizations-buffer-assignment.txt")


def _prune_dump(folder: Path, text_only: Path) -> None:
    """Keep the train steps' optimized HLO protos and buffer-assignment texts (what the
    memory viewer reads); JAX also dumps every helper jit (device_put, initialisers).
    ``text_only`` gets the same compiles' texts alone (buffer assignment + XLA's
    ``*-live-range.txt``, no proto): a text-only dump, as ``--xla_dump_hlo_as_text``
    without ``--xla_dump_hlo_as_proto`` writes it."""
    text_only.mkdir(exist_ok=True)
    for f in folder.glob("*jit_train_step*after_optimizations-*.txt"):
        if f.name.endswith(("-buffer-assignment.txt", "-live-range.txt")):
            shutil.copy(f, text_only / f.name)
    for f in folder.iterdir():
        if f.is_dir():
            shutil.rmtree(f)
        elif not ("jit_train_step" in f.name and f.name.endswith(DUMP_KEEP)):
            f.unlink()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="folder to write the log directory into")
    ap.add_argument("programs", nargs="*", default=list(PROGRAMS), help=f"programs (default all: {', '.join(PROGRAMS)})")
    ap.add_argument("--_one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args._one:
        # One program per interpreter: a profile's /host:metadata plane lists every module
        # the process compiled so far, so programs run side by side would share modules.
        import jax

        jax.config.update("jax_platforms", "cpu")
        result = run(args._one, args.out)
        result["jax_version"] = jax.__version__
        (args.out / f"{args._one}.json").write_text(json.dumps(result, indent=2))
        return 0
    # Programs made before (another call's) stay listed.
    listed = args.out / "programs.json"
    results = json.loads(listed.read_text()) if listed.exists() else {}
    for p in args.programs:
        if p not in PROGRAMS:
            raise SystemExit(f"unknown program {p!r}; programs: {', '.join(PROGRAMS)}")
        env = dict(os.environ)
        dump = args.out / f"{p}_dump"
        if p == "two_batch":
            # XLA reads XLA_FLAGS when the backend starts: set for the child only.
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_dump_to={dump} --xla_dump_hlo_as_proto --xla_dump_hlo_as_text".strip()
        subprocess.run([sys.executable, os.path.abspath(__file__), "--out", str(args.out), "--_one", p], check=True, env=env)
        if p == "two_batch":
            _prune_dump(dump, args.out / f"{p}_text_dump")
        one = args.out / f"{p}.json"
        results[p] = json.loads(one.read_text())
        one.unlink()
    (args.out / "programs.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
