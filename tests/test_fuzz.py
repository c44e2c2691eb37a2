"""Issue 13's proof, bounded for CI: seeded mutants of every input format (plus the
hand-written reproducers of each finding) go straight into the readers, and a smaller
number through a real ``profscope serve`` subprocess, hitting every endpoint a browser
would. Asserted per format: no response >= 500 (no reader exception other than a
ProfscopeError), no hang over 10 s, no body that breaks off, every 4xx in the one error
shape, and peak RSS over baseline below 500 MB for every mutant.

Longer runs: ``PROFSCOPE_FUZZ_MUTANTS=5000`` (readers) and
``PROFSCOPE_FUZZ_SERVER_MUTANTS=500`` (server); ``PROFSCOPE_FUZZ_SEED`` picks another
seed. ``scripts/fuzz_campaign.py`` prints the same counts as a table.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from profscope.testing.fuzz import driver, mutators, reproducers, seeds

REPO = Path(__file__).resolve().parents[1]
SEED = int(os.environ.get("PROFSCOPE_FUZZ_SEED", "13"))
# Sized so that the whole file stays under ~3 minutes on 2 cores.
N_READERS = int(os.environ.get("PROFSCOPE_FUZZ_MUTANTS", "120"))
N_SERVER = int(os.environ.get("PROFSCOPE_FUZZ_SERVER_MUTANTS", "8"))


@pytest.fixture(scope="module")
def seed_pool():
    return seeds.collect()


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


@pytest.mark.parametrize("fmt", mutators.FORMATS)
def test_readers_refuse_hostile_inputs_cleanly(fmt, seed_pool, target, tmp_path):
    res = driver.run_readers(fmt, _inputs(fmt, N_READERS, seed_pool), target, tmp_path)
    assert res.inputs > N_READERS // 2
    _check(res)


@pytest.mark.parametrize("fmt", mutators.FORMATS)
def test_server_answers_hostile_inputs_with_4xx(fmt, seed_pool, target, tmp_path):
    res = driver.run_server(fmt, _inputs(fmt, N_SERVER, seed_pool), target, tmp_path)
    assert res.requests > res.inputs  # every run was found and browsed
    _check(res)
    # Another session stays responsive while hostile files are refused.
    assert res.latency_ms and max(res.latency_ms) < driver.HANG_S * 1000


def test_server_answers_hostile_query_parameters_with_4xx(target, tmp_path):
    # Hostile values (10^400, NaN, 2^64, lone surrogates, 5,000 characters, paths) in one
    # to three parameters of every endpoint, on good runs copied from the bundled demo.
    good = driver.good_runs_logdir(seeds.DEMO, tmp_path / "logdir")
    res = driver.run_params(good, target, tmp_path / "work", SEED, max(30, 4 * N_SERVER))
    _check(res)
