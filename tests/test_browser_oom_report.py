"""The offline HTML report of a whole log directory in Debian's Chromium (Playwright),
the network cut: a refused pickle among good runs, the real two-host TF GPU profile, the
summary table's links scrolling to each run's section. Screenshot in test-artifacts/."""

from __future__ import annotations

import re
import subprocess
import sys
from urllib.parse import parse_qs, urlparse

import pytest

from tests.conftest import ARTIFACTS
from tests.test_oom_risk_report_logdir import mixed  # noqa: F401  (the module fixture)

pytestmark = pytest.mark.browser


def test_report_summary_links_refused_and_hosts(mixed, open_page, tmp_path):  # noqa: F811
    logdir, _, cache = mixed
    out = tmp_path / "report.html"
    res = subprocess.run([sys.executable, "-m", "profscope", "report", str(logdir), "--device-memory", "12GB", "-o", str(out),
                          "--cache-dir", str(cache)], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    page = open_page(out.as_uri())  # only file:// is let through
    page.goto(out.as_uri())
    assert page.inner_text("#worst-risk") == "OOM"
    rows = page.locator("table.summary tbody tr")
    sections = page.locator("section.run")
    assert rows.count() == sections.count() == 4
    assert "evil.pickle" in page.inner_text("#refused") and "posix.system" in page.inner_text("#refused")
    # The multi-host run shows both hosts.
    hosts = page.locator("table.hosts tbody tr")
    assert hosts.count() == 2 and "34.83.195.180_6003" in page.inner_text("table.hosts")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "oom_report_logdir.png"), full_page=True)
    # Each summary link scrolls its run's section to the top of the window.
    for i in (1, 0):
        link = rows.nth(i).locator("a")
        target = link.get_attribute("href")
        link.click()
        page.wait_for_function("h => location.hash === h", arg=target)
        top = page.locator(target).bounding_box()["y"]
        assert abs(top) < 5, (target, top)
    page.click('a[href="#refused"]')
    page.wait_for_function("() => location.hash === '#refused'")
    # The top of the page (headline, summary, refused) as a reader first sees it; the page
    # is no wider than the window (long buffer and rule names wrap).
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ARTIFACTS / "oom_report_logdir_top.png"))
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400


def test_report_links_open_the_evidence_on_a_server(demo_server, open_page, tmp_path):
    """``profscope report --server URL``: the runs worst first under the summary, each
    peak named by what it counts, evidence as sentences; every evidence link points at that
    server's dashboard for its run, and clicking one opens the page it names. Without
    --server the only links are the file's own anchors and the evidence is named in words."""
    def make(*extra):
        res = subprocess.run([sys.executable, "-m", "profscope", "report", "--demo", "--device-memory", "16MiB", *extra,
                              "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, timeout=600, check=False)
        assert res.returncode == 0, res.stderr
        return res.stdout

    html = make("--server", demo_server)
    page = open_page(demo_server)
    page.set_content(html)
    order = {"UNKNOWN": -1, "LOW": 0, "MEDIUM": 1, "HIGH": 2, "OOM": 3}
    risks = page.eval_on_selector_all("table.summary tbody tr", "rows => rows.map(r => r.dataset.risk)")
    assert len(risks) > 5 and risks == sorted(risks, key=lambda k: -order[k]) and risks[0] in ("HIGH", "OOM")
    measures = page.eval_on_selector_all("table.summary td.peak .measure", "m => m.map(x => x.textContent)")
    assert len(measures) == len(risks) and set(measures) <= {"peak allocated", "lifetime peak allocated", "peak reserved",
                                                             "peak of category total", "compiler heap peak"}
    evidence = page.eval_on_selector_all("section.run .finding .evidence:not(.links)", "e => e.map(x => x.textContent)")
    assert evidence and all(re.search(r"\d", e) and "=" not in e and "{" not in e for e in evidence), evidence
    hrefs = page.eval_on_selector_all("a[href]", "a => a.map(x => x.getAttribute('href'))")
    outside = [h for h in hrefs if not h.startswith("#")]
    assert outside and all(h.startswith(demo_server) for h in outside), outside
    for h in outside:
        q = parse_qs(urlparse(h).query)
        assert q["run"] and q["tool"], h
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "oom_report_server_links.png"), full_page=True)
    # A finding's evidence link: the memory profile of the run at its event.
    link = page.locator("section.run .finding .links a[href*='tool=memory_profile']").first
    target = parse_qs(urlparse(link.get_attribute("href")).query)
    link.click()
    page.wait_for_selector("#mp-summary, #ts-peak", timeout=120_000)
    assert parse_qs(urlparse(page.url).query)["run"] == target["run"]
    assert target["run"][0] in page.inner_text("body")

    # Without a server: anchors only, each to an element of the file; evidence in words.
    html = make()
    assert not re.search(r'href="https?://', html)
    page = open_page(demo_server)
    page.set_content(html)
    hrefs = page.eval_on_selector_all("a[href]", "a => a.map(x => x.getAttribute('href'))")
    assert hrefs and all(h.startswith("#") and page.locator(h).count() == 1 for h in hrefs)
    words = page.eval_on_selector_all("section.run .finding .links", "e => e.map(x => x.textContent)")
    assert words and all("?" not in w and "memory" in w for w in words), words


def _has_memory_events(trace) -> bool:
    """Whether a Chrome trace holds PyTorch's ``[memory]`` instant events, by its bytes: a
    check apart from profscope's reader."""
    import gzip

    raw = gzip.decompress(trace.read_bytes()) if trace.suffix == ".gz" else trace.read_bytes()
    return b'"[memory]"' in raw


def test_report_of_the_public_profiles_fits_its_cards_and_names_files_as_the_run_list(shared_fixtures, open_page, tmp_path):
    """`profscope report` on the public profiles folder (issue 31 item 9): no table spills
    out of its card (the summary did by 64 px at 1400 px, a buffer table by 1,305 px);
    refused files are named by their path in the log directory, as the run list and the
    other refusals name them (two were absolute); a trace that reads but has no [memory]
    events is "not assessed", not refused."""
    logdir = shared_fixtures / "public_profiles"
    out = tmp_path / "report.html"
    res = subprocess.run([sys.executable, "-m", "profscope", "report", str(logdir), "-o", str(out), "--cache-dir", str(tmp_path / "cache")],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    page = open_page(out.as_uri())
    page.goto(out.as_uri())
    page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")  # every table laid out
    spills = page.evaluate("""() => [...document.querySelectorAll('section table')].map((t) => {
        const card = t.closest('section').getBoundingClientRect(), r = t.getBoundingClientRect();
        return { card: t.closest('section').id, right: r.right - card.right, left: card.left - r.left };
      }).filter((x) => x.right > 0.5 || x.left > 0.5)""")
    assert page.locator("section table").count() > 10 and not spills, spills
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400

    cells = lambda sel: page.eval_on_selector_all(f"{sel} tbody tr", "rows => rows.map((r) => [...r.cells].map((c) => c.textContent))")
    refused, skipped = cells("#refused"), cells("#not-assessed")
    traces = sorted((logdir / "traces").glob("*.json.gz"))
    without = {f"traces/{t.name}" for t in traces if not _has_memory_events(t)}
    assert without and len(without) < len(traces)  # the folder has both kinds
    assert {row[0] for row in skipped} == without, skipped
    assert all("[memory] events" in row[2] for row in skipped)
    refused_files = {row[0] for row in refused}
    assert not refused_files & without
    assert "xplane/tpu_inference_corrupt/plugins/profile/2025_12_15_tpu/tpu_inference_2.xplane.pb" in refused_files
    # Every file as the run list names it: inside the log directory, never an absolute path.
    for row in refused + skipped:
        assert not row[0].startswith("/") and str(logdir) not in row[0] and (logdir / row[0]).is_file(), row
        assert str(logdir) not in row[2], row  # the reason does not repeat it either
    assert f"{len(refused)} refused" in page.inner_text("header.top") and f"{len(skipped)} not assessed" in page.inner_text("header.top")
    ARTIFACTS.mkdir(exist_ok=True)
    page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = false; })")
    page.screenshot(path=str(ARTIFACTS / "oom_report_public_profiles.png"))
    page.locator("#refused").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "oom_report_public_profiles_refused.png"))
