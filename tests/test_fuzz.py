"""Issue 13's proof, bounded for CI: seeded mutants of every input format (plus the
hand-written reproducers of each finding) go straight into the readers, and a smaller
number through a real ``profscope serve`` subprocess, hitting every endpoint a browser
would. Asserted per format: no response >= 500 (no reader exception other than a
ProfscopeError), no hang (a reader step or a request costing over 10 CPU seconds, or
stuck for driver.BACKSTOP_S of wall time), no body that breaks off, every 4xx in the one
error shape, and peak RSS over baseline below 500 MB for every mutant. No wall-clock
speed is asserted: a busy machine stretches it (benchmarks/ measure speed).

The campaigns are ``slow`` (``make test-fast`` leaves them out); the tests that an
interrupted campaign leaves no process behind are not.

Longer runs: ``PROFSCOPE_FUZZ_MUTANTS=5000`` (readers) and
``PROFSCOPE_FUZZ_SERVER_MUTANTS=500`` (server); ``PROFSCOPE_FUZZ_SEED`` picks another
seed. ``scripts/fuzz_campaign.py`` prints the same counts as a table.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from profscope.testing.fuzz import driver, mutators, reproducers, seeds
from profscope.testing.processes import interruptible

REPO = Path(__file__).resolve().parents[1]
SEED = int(os.environ.get("PROFSCOPE_FUZZ_SEED", "13"))
# Sized so that the whole file stays under ~3 minutes on 2 cores.
N_READERS = int(os.environ.get("PROFSCOPE_FUZZ_MUTANTS", "120"))
N_SERVER = int(os.environ.get("PROFSCOPE_FUZZ_SERVER_MUTANTS", "8"))


@pytest.fixture(scope="module")
def seed_pool(shared_fixtures_if_any):
    return seeds.collect(shared_fixtures_if_any)


@pytest.fixture(scope="module")
def target():
    # This checkout's profscope, whatever is installed in the interpreter.
    return driver.Target(python=sys.executable, src=str(REPO / "src"))


def _inputs(fmt: str, n: int, pool) -> list[mutators.Mutant]:
    return [m for m in reproducers.reproducers() if m.fmt == fmt] + list(mutators.mutants(fmt, pool, SEED, n))


def _check(res: driver.FormatResult) -> None:
    problems = {k: getattr(res, k) for k in ("s5xx", "hangs", "broken", "conn_errors", "bad_4xx_shape", "rss_over_bound")
                if getattr(res, k)}
    if problems:
        sigs = driver.signatures([res])
        lines = [f"{sig}: {len(fs)}x, e.g. {fs[0]['mutant']} {' '.join(fs[0]['ops'][:3])} {fs[0]['detail'][:200]}"
                 for sig, fs in sigs.items()]
        pytest.fail(f"{res.fmt} ({res.mode}, seed {SEED}): {problems}\n" + "\n".join(lines[:30]), pytrace=False)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", mutators.FORMATS)
def test_readers_refuse_hostile_inputs_cleanly(fmt, seed_pool, target, tmp_path):
    res = driver.run_readers(fmt, _inputs(fmt, N_READERS, seed_pool), target, tmp_path)
    assert res.inputs > N_READERS // 2
    _check(res)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", mutators.FORMATS)
def test_server_answers_hostile_inputs_with_4xx(fmt, seed_pool, target, tmp_path):
    res = driver.run_server(fmt, _inputs(fmt, N_SERVER, seed_pool), target, tmp_path)
    assert res.requests > res.inputs  # every run was found and browsed
    _check(res)
    # Another session is answered while hostile files are refused: no poll of it waited
    # out the backstop. (How fast it is answered is benchmarks/bench_hostile_latency.py's.)
    assert res.latency_ms and max(res.latency_ms) < driver.BACKSTOP_S * 1000


@pytest.mark.slow
def test_server_answers_hostile_query_parameters_with_4xx(target, tmp_path):
    # Hostile values (10^400, NaN, 2^64, lone surrogates, 5,000 characters, paths) in one
    # to three parameters of every endpoint, on good runs copied from the bundled demo.
    good = driver.good_runs_logdir(seeds.DEMO, tmp_path / "logdir")
    res = driver.run_params(good, target, tmp_path / "work", SEED, max(30, 4 * N_SERVER))
    _check(res)


# -- an interrupted campaign leaves no process behind ------------------------------------

def _gone(pid: int) -> bool:
    """Not running: no such process, or a zombie waiting for init to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _started(proc_pids: list[int]) -> list[int]:
    """Every live process of the groups the driver started: the worker or the server,
    and the server's forked conversion workers."""
    return sorted({p for pid in proc_pids for p in driver._tree(pid)})


INTERRUPTED_RUN = """
import sys, time
from pathlib import Path
from profscope.testing.fuzz import driver, reproducers

mode, work, src = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
mutants = [m for m in reproducers.reproducers() if m.fmt == "xplane"][:3]

def progress(i):
    print("started", *[p.pid for p in driver._LIVE], flush=True)
    time.sleep(600)  # interrupted here, with the worker or the server up

run = driver.run_readers if mode == "readers" else driver.run_server
run("xplane", mutants, driver.Target(sys.executable, src), work, progress=progress)
"""


@pytest.mark.parametrize("mode,sig", [("server", signal.SIGINT), ("server", signal.SIGTERM), ("readers", signal.SIGTERM)],
                         ids=["server-SIGINT", "server-SIGTERM", "readers-SIGTERM"])
def test_an_interrupted_campaign_leaves_no_process_running(mode, sig, target, tmp_path):
    """Ctrl+C or SIGTERM (a CI timeout) in the middle of a campaign: the reader worker or
    the ``profscope serve`` it started ends with it, forked conversion workers included."""
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED_RUN, mode, str(tmp_path / "work"), target.src],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=interruptible)
    try:
        line = proc.stdout.readline()
        assert line.startswith("started "), line + proc.stderr.read()[-3000:]
        pids = _started([int(p) for p in line.split()[1:]])
        assert pids and not any(_gone(p) for p in pids)
        proc.send_signal(sig)
        proc.wait(timeout=driver.BACKSTOP_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0
    assert [p for p in pids if not _gone(p)] == [], f"still running after {signal.Signals(sig).name}: {pids}"


def test_a_campaign_that_raises_leaves_no_server_running(target, tmp_path):
    started = []

    def progress(i):
        started.extend(_started([p.pid for p in driver._LIVE]))
        raise RuntimeError("a callback broke")

    mutants = [m for m in reproducers.reproducers() if m.fmt == "xplane"][:2]
    with pytest.raises(RuntimeError, match="a callback broke"):
        driver.run_server("xplane", mutants, target, tmp_path, progress=progress)
    assert started and [p for p in started if not _gone(p)] == []
    assert not driver._LIVE
