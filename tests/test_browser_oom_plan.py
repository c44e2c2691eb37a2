"""The OOM risk page's "What would make it fit" in Debian's Chromium (Playwright), the
network cut, on a real JAX profile holding one train step compiled at two batch sizes
(profscope.testing.batch_programs). Screenshots go to test-artifacts/."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from profscope.model.units import fmt_bytes
from profscope.testing import batch_programs
from tests.conftest import ARTIFACTS, profscope_server

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def plan_server(tmp_path_factory):
    out = tmp_path_factory.mktemp("two_batches")
    truth = batch_programs.make(out, [64, 256], profile=True)
    with profscope_server("serve", str(out / "profile"), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url, truth


def _api(server, **params):
    with urlopen(f"{server}data/plugin/profile/data?{urlencode({'tag': 'oom_risk', **params})}", timeout=120) as res:
        return json.loads(res.read())


def _run(server):
    with urlopen(f"{server}data/plugin/profile/runs", timeout=30) as res:
        return json.loads(res.read())[0]


def test_plan_on_a_run_with_two_batch_sizes(plan_server, open_page):
    server, _ = plan_server
    run = _run(server)
    api = _api(server, run=run, device_memory="9MB", batch="384")
    page = open_page(server)
    page.goto(f"{server}?{urlencode({'run': run, 'tool': 'oom_risk', 'capacity': '9MB'}, quote_via=quote)}")
    page.wait_for_selector("#oom-plan")
    assert page.inner_text("#oom-risk") == api["risk"] == "OOM"  # batch 256: 9.32 MB > 9 MB
    rows = page.locator("#oom-savings tbody tr")
    assert rows.count() == len(api["plan"]["savings"]) >= 3
    for i, c in enumerate(api["plan"]["savings"]):
        assert rows.nth(i).get_attribute("data-change") == c["id"]
        assert fmt_bytes(c["peakAfterBytes"]) in rows.nth(i).inner_text()
    fit = api["plan"]["batch"]
    assert [p["size"] for p in fit["points"]] == [64, 256]
    # Two compilations: a line the page says cannot be checked, as a warning.
    assert page.inner_text("#oom-batch-trust").startswith("Unchecked: two compilations")
    assert page.get_attribute("#oom-batch-trust", "class") == "oom-note"
    largest = page.inner_text("#oom-batch-largest")
    assert f"{fit['largest']['fits']['size']:,}" in largest and f"{fit['largest']['belowHigh']['size']:,}" in largest
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#oom-plan").screenshot(path=str(ARTIFACTS / "oom_plan_two_batches.png"))
    # A size typed in goes into the URL and the data request; the prediction is shown.
    page.fill("#oom-batch-size", "384")
    page.press("#oom-batch-size", "Enter")
    page.wait_for_selector("#oom-batch-at")
    assert parse_qs(urlparse(page.url).query)["batch"] == ["384"]
    at = page.inner_text("#oom-batch-at")
    assert f"{api['plan']['batch']['at']['peakBytes']:,}" in at and api["plan"]["batch"]["at"]["risk"] in at
    assert "extrapolated" in at
    page.locator("#oom-plan").screenshot(path=str(ARTIFACTS / "oom_plan_two_batches_at_384.png"))


def test_jax_on_gpu_control_sets_the_capacity(plan_server, open_page):
    """Ticking "JAX on GPU" puts jax_gpu=1 in the URL and rates the run at 75 % of the
    typed device memory; a fraction typed in replaces 0.75."""
    server, _ = plan_server
    run = _run(server)
    page = open_page(server)
    page.goto(f"{server}?{urlencode({'run': run, 'tool': 'oom_risk', 'capacity': '12MB'}, quote_via=quote)}")
    page.wait_for_selector("#oom-plan")
    assert page.inner_text("#oom-risk") == "MEDIUM"
    page.check("#oom-jax-gpu")
    page.wait_for_function("() => new URLSearchParams(location.search).get('jax_gpu') === '1'")
    page.wait_for_selector("#oom-plan")
    page.wait_for_function("() => document.querySelector('#oom-risk') && document.querySelector('#oom-risk').innerText === 'OOM'")
    api = _api(server, run=run, device_memory="12MB", jax_gpu="1")
    assert fmt_bytes(api["capacityBytes"]) in page.inner_text("#oom-cap") and "0.75" in page.inner_text("#oom-cap")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "oom_plan_jax_gpu.png"))
    page.fill("#oom-jax-fraction", "0.9")
    page.press("#oom-jax-fraction", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('jax_mem_fraction') === '0.9'")
    page.wait_for_function("() => document.querySelector('#oom-risk') && document.querySelector('#oom-risk').innerText === 'MEDIUM'")
    assert "0.9" in page.inner_text("#oom-cap")


def test_no_fit_is_said_not_drawn_on_real_profiles(open_page, shared_fixtures, tmp_path):
    """The public MI300 profile (one matmul at five M x K shapes) and the TPU profile (one
    compilation): the page says why there is no batch fit, and offers neither a slope nor
    a size to predict at."""
    with profscope_server("serve", str(shared_fixtures / "public_profiles" / "xplane"), "--port", "0",
                          "--cache-dir", str(tmp_path / "cache")) as (server, _):
        with urlopen(f"{server}data/plugin/profile/runs", timeout=30) as res:
            runs = json.loads(res.read())
        page = open_page(server)
        for prefix, cap, words in (("mi300_jax08_gemm/", "192GiB", "more than one size changes"), ("tpu_inference/", "16GiB", "one compilation only")):
            run = next(r for r in runs if r.startswith(prefix))
            page.goto(f"{server}?{urlencode({'run': run, 'tool': 'oom_risk', 'capacity': cap}, quote_via=quote)}")
            page.wait_for_selector("#oom-plan", timeout=120_000)
            assert words in page.inner_text("#oom-batch-trust")
            text = page.inner_text("#oom-batch")
            assert "more per unit" not in text and "Give the device's memory" not in text
            assert page.locator("#oom-batch-size").count() == 0
            ARTIFACTS.mkdir(exist_ok=True)
            page.locator("#oom-plan").screenshot(path=str(ARTIFACTS / f"oom_plan_{prefix.strip('/')}.png"))


def test_fit_with_another_run_from_the_page(open_page, tmp_path):
    """A run with one compilation says so; naming the other run (the same step profiled
    at batch 64) in "Also fit with runs" puts fit_with= in the URL and fits both."""
    batch_programs.make(tmp_path / "logs" / "b64", [64], profile=True)
    batch_programs.make(tmp_path / "logs" / "b256", [256], profile=True)
    with profscope_server("serve", str(tmp_path / "logs"), "--port", "0", "--cache-dir", str(tmp_path / "cache")) as (server, _):
        with urlopen(f"{server}data/plugin/profile/runs", timeout=30) as res:
            runs = json.loads(res.read())
        small, big = (next(r for r in runs if r.startswith(p)) for p in ("b64/", "b256/"))
        page = open_page(server)
        page.goto(f"{server}?{urlencode({'run': big, 'tool': 'oom_risk', 'capacity': '9MB'}, quote_via=quote)}")
        page.wait_for_selector("#oom-batch-trust")
        assert "one compilation only" in page.inner_text("#oom-batch-trust")
        page.fill("#oom-fit-with", small)
        page.press("#oom-fit-with", "Enter")
        page.wait_for_function("() => new URLSearchParams(location.search).get('fit_with') !== null")
        page.wait_for_selector("#oom-batch-largest")
        assert "cannot be checked" in page.inner_text("#oom-batch-trust")
        assert "64 → " in page.inner_text("#oom-batch") and "256 → " in page.inner_text("#oom-batch")
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#oom-batch").screenshot(path=str(ARTIFACTS / "oom_plan_fit_with.png"))
