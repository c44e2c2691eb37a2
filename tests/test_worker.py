"""Conversions in forked workers (cache/worker.py): results, errors, limits, progress."""

from __future__ import annotations

import gzip
import os
import resource
import signal
import sys
import threading
import time

import orjson
import pytest

from profscope.cache.progress import ProgressBoard
from profscope.cache.store import DiskCache
from profscope.cache.worker import WorkerPool, parse_size
from profscope import errors
from profscope.errors import BadInput, BadRequest, NotFound, ProfscopeError, TooLarge

# A stop that never comes fails the test, not a slow one: these limits are a backstop
# against a real hang, far above what the stop takes on a busy machine (no test asserts
# a speed; benchmarks/ measure those).
BACKSTOP_S = 120


def run(pool: WorkerPool, fn, board: ProgressBoard | None = None, key: str = "k", label: str = "test.pb"):
    board = board or ProgressBoard()
    job = board.start(key, label)
    try:
        return pool.run(fn, job, board)
    finally:
        board.finish(job)


def test_result_comes_back_and_runs_in_another_process():
    pool = WorkerPool(enabled=True)
    parent = os.getpid()
    assert run(pool, lambda job: str(os.getpid()).encode()) != str(parent).encode()
    assert run(pool, lambda job: None) == b""
    big = os.urandom(3 << 20)  # more than a pipe holds: the parent reads while it writes
    assert run(pool, lambda job: big) == big


def test_profscope_errors_keep_their_class_status_and_file():
    def fail(job):
        raise NotFound("no host 'x'", file="logs/a.xplane.pb")

    with pytest.raises(NotFound) as e:
        run(WorkerPool(enabled=True), fail)
    assert (e.value.status, e.value.file, e.value.message) == (404, "logs/a.xplane.pb", "no host 'x'")


def test_an_unexpected_exception_is_a_422_naming_the_job():
    def fail(job):
        raise OverflowError("int too large to convert")

    with pytest.raises(BadInput) as e:
        run(WorkerPool(enabled=True), fail, label="Trace viewer: indexing bad.trace.json")
    assert e.value.status == 422
    assert "bad.trace.json" in e.value.message and "OverflowError" in e.value.message


def test_memory_beyond_the_limit_is_a_413_and_the_server_does_not_grow():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    pool = WorkerPool(memory_limit=256 << 20, enabled=True)

    def hog(job):
        blocks = []
        while True:
            blocks.append(bytearray(32 << 20))  # touched: resident, not only reserved

    t = time.perf_counter()
    with pytest.raises(TooLarge) as e:
        run(pool, hog, label="bomb.xplane.pb.gz")
    assert e.value.status == 413 and "256 MiB" in e.value.message and "bomb.xplane.pb.gz" in e.value.message
    assert time.perf_counter() - t < BACKSTOP_S
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB
    assert pool.stats["killed"] == 1


def test_a_crash_in_c_code_is_reported_not_propagated():
    with pytest.raises(TooLarge) as e:
        run(WorkerPool(enabled=True), lambda job: os.abort())
    assert "SIGABRT" in e.value.message


def test_cpu_limit_stops_a_reader_stuck_in_a_loop():
    def spin(job):
        while True:
            pass

    t = time.perf_counter()
    with pytest.raises(TooLarge) as e:
        run(WorkerPool(cpu_seconds=1, enabled=True), spin)
    assert "CPU" in e.value.message and time.perf_counter() - t < BACKSTOP_S


def test_progress_of_the_job_and_nested_jobs_reaches_the_parent_board():
    board = ProgressBoard()
    seen: list[list[dict]] = []
    gate = threading.Event()

    def work(job):
        job.update(0.5, "half way")
        nested = board.start("inner", "module list of x")
        nested.update(0.25, "reading")
        time.sleep(0.5)  # the parent reads the board meanwhile
        board.finish(nested)
        gate.wait(0)  # nothing shared: the event lives in the parent
        return b"ok"

    done = []
    t = threading.Thread(target=lambda: done.append(run(WorkerPool(enabled=True), work, board, key="outer")))
    t.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(seen) < 1:
        snap = board.snapshot()
        if any(j["key"] == "inner" for j in snap):
            seen.append(snap)
        time.sleep(0.02)
    t.join()
    assert done == [b"ok"]
    jobs = {j["key"]: j for j in seen[0]}
    assert jobs["outer"]["message"] == "half way" and jobs["outer"]["fraction"] == 0.5
    assert jobs["inner"]["message"] == "reading"
    assert board.snapshot() == []


def test_conversions_beyond_the_concurrency_wait_for_a_slot():
    pool = WorkerPool(concurrency=1, enabled=True)
    board = ProgressBoard()
    results, messages = [], []

    def slow(job):
        time.sleep(0.6)
        return b"x"

    threads = [threading.Thread(target=lambda k=k: results.append(run(pool, slow, board, key=f"k{k}"))) for k in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(0.3)
    messages = [j["message"] for j in board.snapshot()]
    for t in threads:
        t.join()
    assert results == [b"x", b"x"]
    assert time.perf_counter() - start >= 1.2  # one after the other
    assert any(m.startswith("queued") for m in messages)


def test_a_child_runs_nested_conversions_inline():
    pool = WorkerPool(enabled=True)

    def outer(job):
        return run(pool, lambda j: str(os.getpid()).encode()) + b" " + str(os.getpid()).encode()

    inner_pid, outer_pid = run(pool, outer).split()
    assert inner_pid == outer_pid


def test_only_a_workers_own_job_keeps_objects_for_its_exit():
    """forksafe.keep_until_exit holds in the job a worker was forked for (it exits right
    after answering), not in a conversion nested in it (the job goes on after it) nor in
    the server process (it frees as usual)."""
    import weakref

    from profscope import forksafe

    class Big:
        pass

    pool = WorkerPool(enabled=True)

    def kept(job) -> bytes:
        obj = Big()
        ref = weakref.ref(obj)
        forksafe.keep_until_exit(obj)
        del obj
        return b"held" if ref() is not None else b"freed"

    assert run(pool, kept) == b"held"
    assert run(pool, lambda job: run(pool, kept) + b" " + kept(job)) == b"freed held"
    assert kept(None) == b"freed"  # here, in the server process


def test_disabled_pool_runs_in_the_calling_process():
    assert run(WorkerPool(enabled=False), lambda job: str(os.getpid()).encode()) == str(os.getpid()).encode()


def test_parse_size():
    assert parse_size("4GiB", "x") == 4 << 30
    assert parse_size("500MB", "x") == 500_000_000
    assert parse_size("123", "x") == 123
    assert parse_size(None, "x") is None
    with pytest.raises(BadRequest):
        parse_size("lots", "--worker-memory")


def test_a_child_lets_go_of_the_servers_sockets():
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    conn, _ = listener.accept()

    def hold(job):
        time.sleep(1.0)
        return b""

    t = threading.Thread(target=run, args=(WorkerPool(enabled=True), hold))
    t.start()
    time.sleep(0.3)
    conn.close()  # the server closes the connection while a conversion runs
    client.settimeout(0.5)
    assert client.recv(1) == b""  # the peer sees the close now, not when the worker ends
    t.join()
    client.close()
    listener.close()


def test_an_io_error_reading_the_input_is_a_422_that_is_not_remembered(tmp_path):
    from profscope.cache.store import DiskCache, cache_key

    cache = DiskCache(tmp_path / "cache")
    missing = tmp_path / "gone.xplane.pb"

    def read(_progress):
        return missing.read_bytes()

    with pytest.raises(BadInput, match="cannot read the input") as e:
        cache.get_or_compute(cache_key("io"), "reading gone.xplane.pb", read)
    assert e.value.status == 422 and e.value.file == str(missing)
    missing.write_bytes(b"[1]")
    assert cache.get_or_compute_json(cache_key("io"), "reading gone.xplane.pb", lambda p: [1]) == [1]


def test_sockets_made_by_a_fork_handler_in_the_child_are_kept():
    """gcsfs's client is made anew in the child, and its event loop wakes through a
    socketpair: only the server's own sockets, listed before the fork, are let go of
    (letting go of every socket hung the GCS tests' first listing in a child)."""
    import socket

    from profscope.forksafe import renew_after_fork

    class Holder:
        pair = None

    holder = Holder()
    renew_after_fork(holder, lambda o: setattr(o, "pair", socket.socketpair()))

    def use(job):
        a, b = holder.pair
        a.send(b"x")
        return b.recv(1)

    assert run(WorkerPool(enabled=True), use) == b"x"


def test_a_child_stuck_without_cpu_or_progress_is_stopped():
    t = time.perf_counter()
    with pytest.raises(ProfscopeError) as e:
        run(WorkerPool(enabled=True, idle_seconds=1), lambda job: time.sleep(3600), label="gs://b/x.xplane.pb")
    assert e.value.status == 504 and "no CPU" in e.value.message and time.perf_counter() - t < BACKSTOP_S


def test_a_child_that_computes_quietly_is_not_stopped():
    def busy(job):
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            pass
        return b"done"

    assert run(WorkerPool(enabled=True, idle_seconds=1), busy) == b"done"


def test_a_server_with_over_a_thousand_files_open_still_converts():
    """select() refuses descriptors past 1024 (FD_SETSIZE): the pipe is polled."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    held = [open(os.devnull) for _ in range(1100)]
    try:
        assert run(WorkerPool(enabled=True), lambda job: b"ok") == b"ok"
    finally:
        for f in held:
            f.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_key_lock_is_not_held_while_waiting_for_a_worker_that_takes_it(tmp_path):
    """Issue 31's deadlock, at its smallest: a worker holds the only slot and its nested
    conversion needs key "inner"; meanwhile a server thread asks for "inner" too. Before,
    that thread took inner's file lock, then waited for a slot, while the worker (holding
    the slot) waited for the file lock: nobody moved until the worker's idle watchdog
    killed it (300 s by default; here 30 s, and the outer answer was a 504). Now the
    thread waits for a slot holding no file lock, so the worker makes "inner", and the
    thread then finds it made."""
    cache = DiskCache(tmp_path / "cache", workers=WorkerPool(concurrency=1, enabled=True, idle_seconds=30))
    made_in = []

    def inner(progress):
        made_in.append(os.getpid())  # appended in the process that computes it
        return {"inner": os.getpid()}

    def outer(progress):
        time.sleep(1.0)  # the server thread below asks for "inner" meanwhile
        return {"outer": orjson.loads(gzip.decompress(cache.get_or_compute("inner", "inner", inner)))}

    answers: dict[str, object] = {}

    def ask(key, compute):
        try:
            answers[key] = orjson.loads(gzip.decompress(cache.get_or_compute(key, key, compute)))
        except ProfscopeError as e:
            answers[key] = e

    first = threading.Thread(target=ask, args=("outer", outer))
    first.start()
    until = time.monotonic() + BACKSTOP_S
    while cache.workers.stats["running"] < 1 and time.monotonic() < until:
        time.sleep(0.01)
    second = threading.Thread(target=ask, args=("inner", inner))
    second.start()
    first.join(BACKSTOP_S)
    second.join(BACKSTOP_S)
    assert not first.is_alive() and not second.is_alive()
    assert isinstance(answers["outer"], dict), answers["outer"]  # not the watchdog's 504
    assert answers["inner"] == answers["outer"]["outer"]  # one value, made once (in the worker)
    assert made_in == []  # never computed in this process
    assert cache.workers.stats["killed"] == 0


def test_a_fork_waits_for_another_threads_import(tmp_path, monkeypatch):
    """A worker forked while another thread of the server imports a module (numpy, on a
    server's first requests) inherited that module's import lock held by a thread it
    does not have: its own import of the module never returned (issue 31, until the idle
    watchdog). The fork now waits for the import to end."""
    (tmp_path / "slow_import_31.py").write_text("import time\ntime.sleep(1.5)\nVALUE = 31\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importer = threading.Thread(target=__import__, args=("slow_import_31",))
    importer.start()
    time.sleep(0.3)  # the importer is inside the module's body, holding its lock

    def use(job):
        import slow_import_31  # in the child

        return str(slow_import_31.VALUE).encode()

    pool = WorkerPool(enabled=True, idle_seconds=10)
    try:
        assert run(pool, use) == b"31"
    finally:
        importer.join(BACKSTOP_S)
        sys.modules.pop("slow_import_31", None)
    assert pool.stats["killed"] == 0


def test_a_worker_ended_by_ctrl_c_is_not_the_inputs_fault(tmp_path):
    """Ctrl+C reaches the workers too (one process group): a worker it ends is a 503
    naming the input, never a bad input remembered against it (before issue 32, "the
    conversion stopped (SIGINT)" was a 422 kept in the cache for good)."""
    cache = DiskCache(tmp_path / "cache", workers=WorkerPool(enabled=True))

    def interrupted(progress):
        os.kill(os.getpid(), signal.SIGINT)  # as the terminal sends it
        time.sleep(BACKSTOP_S)

    with pytest.raises(errors.Stopping) as e:
        cache.get_or_compute("k", "Trace viewer: indexing a.xplane.pb", interrupted, file="a.xplane.pb")
    assert e.value.status == 503 and "SIGINT" in e.value.message and e.value.file == "a.xplane.pb"
    assert list((tmp_path / "cache").rglob("*.failed.json")) == []
    assert orjson.loads(gzip.decompress(cache.get_or_compute("k", "again", lambda p: {"ok": 1}))) == {"ok": 1}


def test_stop_ends_the_workers_and_refuses_new_conversions():
    pool = WorkerPool(enabled=True, concurrency=1)
    board = ProgressBoard()
    outcome = []
    t = threading.Thread(target=lambda: outcome.append(_outcome(pool, board, lambda job: time.sleep(BACKSTOP_S))))
    t.start()
    until = time.monotonic() + BACKSTOP_S
    while pool.stats["running"] < 1 and time.monotonic() < until:
        time.sleep(0.01)
    queued = threading.Thread(target=lambda: outcome.append(_outcome(pool, board, lambda job: b"never")))
    queued.start()  # waits for the one slot
    pool.stop()
    t.join(BACKSTOP_S)
    queued.join(BACKSTOP_S)
    assert [type(o) for o in outcome] == [errors.Stopping, errors.Stopping]
    assert isinstance(_outcome(pool, board, lambda job: b"x"), errors.Stopping)


def _outcome(pool, board, fn):
    try:
        return run(pool, fn, board)
    except ProfscopeError as e:
        return e


def test_in_process_conversions_keep_the_workers_error_rules():
    """A small input converted in the server process (``in_process=True``, issue 40) is
    still a user's file: an unexpected exception is the input's 422 naming it, never a
    500; an OSError a transient 422; a MemoryError a 413; its own errors pass as they are."""
    pool = WorkerPool(enabled=True)
    board = ProgressBoard()
    job = board.start("k", "Memory viewer: m")

    def call(fn):
        return pool.run(fn, job, board, "dump/m.hlo.pb", in_process=True)

    assert call(lambda job: str(os.getpid()).encode()) == str(os.getpid()).encode()  # no fork
    assert pool.stats["inProcess"] == 1 and pool.stats["runs"] == 0

    def bug(job):
        raise OverflowError("int too large to convert")

    def io(job):
        raise PermissionError(13, "Permission denied", "dump/m.hlo.pb")

    def memory(job):
        raise MemoryError

    def own(job):
        raise NotFound("no module 'x'", file="dump")

    with pytest.raises(BadInput) as e:
        call(bug)
    assert (e.value.status, e.value.file) == (422, "dump/m.hlo.pb") and "OverflowError" in e.value.message
    with pytest.raises(BadInput) as e:
        call(io)
    assert e.value.status == 422 and e.value.transient and "Permission denied" in e.value.message
    with pytest.raises(TooLarge) as e:
        call(memory)
    assert e.value.status == 413 and e.value.file == "dump/m.hlo.pb"
    with pytest.raises(NotFound) as e:
        call(own)
    assert (e.value.status, e.value.file) == (404, "dump")
    board.finish(job)
