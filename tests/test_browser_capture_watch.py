"""Automatic capture in the Capture dialog, in a real headless Chromium: "Capture
automatically" against a live JAX job (profscope.testing.watch_job) that doubles its step
time when told to: a bad condition answered with the token, the watch running, the
trigger firing, the run it made (its Summary says why). Screenshots go to
test-artifacts/capture_watch_*.png for a person to look at."""

from __future__ import annotations

import io
from urllib.parse import quote

import pytest

from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.formats.xplane_step_events import read_step_events
from profscope.server import create_app
from profscope.storage import LogDir
from profscope.testing.local_server import serve_in_thread
from profscope.testing.watch_job import step_at, watch_job
from tests.conftest import ARTIFACTS
from tests.test_browser_capture import _until

pytestmark = pytest.mark.browser


def _workspace(demo_logdir, tmp_path) -> Workspace:
    return Workspace(LogDir(str(demo_logdir), listing_ttl=0), DiskCache(tmp_path / "cache"),
                     capture_dir=tmp_path / "captures")


def _auto_dialog(open_page, server: str):
    """The page under its CSP, the Capture dialog open on "Capture automatically" (a bad
    condition's 400 is shown on purpose)."""
    page = open_page(server, csp=True, shown=(400, 404))
    page.goto(server)
    page.wait_for_selector("#run-title")
    page.click("#capture-open")
    page.wait_for_selector("#capture-dialog[open] #cap-targets")
    assert page.is_hidden("#cap-auto")
    page.check("#cap-mode-auto")
    return page


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"capture_watch_{name}.png"))


@pytest.fixture
def watched(open_page, demo_logdir, tmp_path):
    """A served workspace, a live watch job and the dialog open on "Capture automatically":
    ``(ws, control, address, server, page)``."""
    ws = _workspace(demo_logdir, tmp_path)
    control = tmp_path / "job"
    with watch_job(control) as address, serve_in_thread(create_app(ws)) as port:
        server = f"http://127.0.0.1:{port}"
        yield ws, control, address, server, _auto_dialog(open_page, server)


def test_capture_automatically_watches_fires_and_opens_the_run(watched):
    ws, control, address, server, page = watched
    assert page.is_visible("#cap-when") and page.inner_text("#cap-start") == "Start watching"
    page.fill("#cap-targets", address)
    page.fill("#cap-duration", "1500")
    page.fill("#cap-probe-every", "2s")
    page.fill("#cap-probe-duration", "1s")

    # a bad condition: the server's words, naming the token
    page.fill("#cap-when", "step_time>1.6x,fro=3")
    page.click("#cap-start")
    _until(page, "!document.querySelector('#cap-error').hidden")
    assert page.inner_text("#cap-error") == \
        "when: 'fro=3' is not an option of step_time (its options: for, min_steps, window)"
    _shot(page, "bad_condition")

    page.fill("#cap-when", "step_time>1.6x,for=3")
    page.click("#cap-start")
    page.wait_for_selector("#cap-watch[data-state=watching]")
    assert page.is_hidden("#cap-error")
    _until(page, "/· [2-9] probes/.test(document.querySelector('#cap-watch-state').textContent)")
    state = page.inner_text("#cap-watch-state")
    assert state.startswith(f"watching {address} for a step over 1.6 × the median of the steps before it, 3 in a row")
    assert "running median" in page.inner_text("#cap-watch-probe")
    assert page.is_disabled("#cap-start") and page.is_visible("#cap-watch-stop")
    _shot(page, "running")

    (control / "slow").touch()
    _until(page, "document.querySelector('#cap-fires li[data-stage=saved] a.cap-run')")
    fire = page.inner_text("#cap-fires li")
    assert fire.startswith("Fired: step time rose from ") and "for 3 steps in a row" in fire
    run = page.get_attribute("#cap-fires li a.cap-run", "data-run")
    assert run.startswith("captures/") and run.endswith("_trigger-step_time")
    _until(page, "document.querySelector('#cap-watch-history li[data-kind=saved]')")
    _shot(page, "fired")
    watch = next(w for w in ws.capture.watches.all())
    k, fired = int((control / "slow_at").read_text()), step_at(control, watch.fires[0]["at"])
    print(f"\nin the page: slowdown at step {k}, fired at step {fired}")

    page.click("#cap-watch-stop")
    page.wait_for_selector("#cap-watch[data-state=stopped]")
    assert page.is_hidden("#cap-watch-stop") and not page.is_disabled("#cap-start")
    assert not watch.thread.is_alive()

    # the run it made opens from the list, and its Summary says why it was captured
    page.click("#cap-fires li a.cap-run")
    page.wait_for_selector("#capture-dialog", state="hidden")
    _until(page, f"document.querySelector('#pick-run').value === {run!r}")
    page.goto(f"{server}/?run={quote(run, safe='')}&tool=summary")
    page.wait_for_selector("#sm-summary", timeout=120_000)
    summary = page.inner_text("#sm-summary")
    assert "Captured because step time rose from " in summary, summary
    _shot(page, "run_summary")
    page.goto(f"{server}/?run={quote(run, safe='')}&tool=steps_ops")
    # the slow steps: every bar of the captured run over 1.6 x the median before the slowdown
    _until(page, "/Step time \\(\\d+ steps\\)/.test(document.body.innerText)")
    _shot(page, "run_steps")


def test_a_job_that_dies_mid_watch_is_said_in_the_dialog(open_page, demo_logdir, tmp_path):
    ws = _workspace(demo_logdir, tmp_path)
    with serve_in_thread(create_app(ws)) as port:
        server = f"http://127.0.0.1:{port}"
        page = _auto_dialog(open_page, server)
        with watch_job(tmp_path / "job") as address:
            page.fill("#cap-targets", address)
            page.fill("#cap-when", "step_time>50x or memory>0.9")
            page.fill("#cap-probe-every", "1s")
            page.fill("#cap-probe-duration", "500ms")
            page.click("#cap-start")
            _until(page, "/· [2-9] probes/.test(document.querySelector('#cap-watch-state').textContent)")
        # the job is gone: two failed probes end the watch, and the dialog says why
        page.wait_for_selector("#cap-watch[data-state=failed]", timeout=60_000)
        assert page.inner_text("#cap-watch-state") == "failed"
        error = page.inner_text("#cap-error")
        assert error.startswith(f"every target stopped answering (2 probes in a row): {address}: no profiler server answers")
        assert page.is_hidden("#cap-watch-stop") and not page.is_disabled("#cap-start")
        _shot(page, "job_died")
        watch = ws.capture.watches.all()[0]
        watch.thread.join(30)
        assert not watch.thread.is_alive() and ws.capture._busy == {}


def test_keep_the_last_seconds_makes_a_fire_save_the_steps_before_the_trigger(watched):
    ws, control, address, server, page = watched
    page.fill("#cap-targets", address)
    page.fill("#cap-when", "step_time>1.6x,for=3")
    page.fill("#cap-probe-every", "1s")
    page.fill("#cap-watch-last", "5s")
    page.click("#cap-start")
    page.wait_for_selector("#cap-watch[data-state=watching]")
    _until(page, "/· [4-9] probes/.test(document.querySelector('#cap-watch-state').textContent)")
    assert "keeping the last seconds" in page.inner_text("#cap-watch-state")
    (control / "slow").touch()
    _until(page, "document.querySelector('#cap-fires li[data-stage=saved] a.cap-run')")
    run = page.get_attribute("#cap-fires li a.cap-run", "data-run")
    k = int((control / "slow_at").read_text())
    _shot(page, "ring_fired")
    page.click("#cap-watch-stop")
    page.wait_for_selector("#cap-watch[data-state=stopped]")
    assert all(r.state == "stopped" for r in ws.capture.rings.values())
    page.goto(f"{server}/?run={quote(run, safe='')}&tool=steps_ops")
    _until(page, "/Step time \\(\\d+ steps\\)/.test(document.body.innerText)")
    _shot(page, "ring_run_steps")
    # the run holds steps from before the slowdown and slow ones
    xspace = ws.logdir.read_bytes(ws.run(run).files[0].path)
    numbers = [int(s["name"].split()[-1]) for s in read_step_events(io.BytesIO(xspace), "x.xplane.pb").steps]
    assert min(numbers) < k <= max(numbers), (k, numbers)
