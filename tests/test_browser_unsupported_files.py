"""Issue 38 item 4 in Debian's Chromium: the files profscope recognises but does not read
are on the dashboard with their reasons (the run picker, the overview's table, and the
"No runs found" page of a log directory that holds only such files). What the page must
show is read from /api/runs. Screenshots in test-artifacts/."""

from __future__ import annotations

import json
import shutil
from urllib.parse import quote, urlencode
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS, profscope_server
from tests.test_unsupported_files import SESSION, write_logdir

pytestmark = pytest.mark.browser


def _runs(server: str) -> dict:
    with urlopen(f"{server.rstrip('/')}/api/runs", timeout=300) as res:
        return json.loads(res.read())


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _table(page) -> list[list[str]]:
    return page.eval_on_selector_all("#unsupported-files tbody tr",
                                     "rs => rs.map((r) => [...r.cells].map((c) => c.textContent))")


def test_the_overview_and_the_run_picker_list_them(shared_fixtures, tmp_path, open_page):
    root = write_logdir(shared_fixtures / "public_profiles", tmp_path / "logdir")
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path / "cache")) as (url, _):
        unsupported = _runs(url)["unsupported"]
        assert unsupported
        page = open_page(url)
        page.goto(f"{url}?{urlencode({'run': 'dumps/mlp', 'tool': 'overview'}, quote_via=quote)}")  # a light run: the table is the log directory's
        page.wait_for_selector("#unsupported-files")
        assert _table(page) == [[u["file"], u["kind"], u["run"] or "—", u["reason"]] for u in unsupported]
        assert f"Recognised but not read ({len(unsupported)})" in page.inner_text("#unsupported-files h2")
        # the picker: after the runs, the ones of no run, greyed out, with their reasons
        shown = page.eval_on_selector_all("#pick-run option[data-unsupported]",
                                          "o => o.map((x) => [x.textContent, x.title, x.disabled, x.dataset.unsupported])")
        assert shown == [[f"⊘ {u['file']} (not read: {u['reason']})", u["reason"], True, u["kind"]]
                         for u in unsupported if u["run"] is None]
        assert f"{SESSION}/host1.xplane.riegeli" in page.inner_text("#unsupported-files")
        _shot(page, "unsupported_files_overview")


def test_a_log_directory_of_only_such_files_says_why_it_has_no_runs(shared_fixtures, tmp_path, open_page):
    """Before: "No runs found", and not a word about the xplane and the *.prof it holds."""
    full = write_logdir(shared_fixtures / "public_profiles", tmp_path / "full")
    root = tmp_path / "only"
    for rel in ("loose/host.xplane.pb", "py/cpu.prof", "alone/mlp.memory_timeline.json"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(full / rel, root / rel)
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path / "cache")) as (url, _):
        catalog = _runs(url)
        assert catalog["runs"] == [] and len(catalog["unsupported"]) == 3
        page = open_page(url)
        page.goto(url)
        page.wait_for_selector("#unsupported-files")
        assert page.inner_text("#view h1") == "No runs found"
        assert "is a profile profscope reads (what it recognises is listed below, with why)" in page.inner_text("#view p")
        assert _table(page) == [[u["file"], u["kind"], "—", u["reason"]] for u in catalog["unsupported"]]
        assert page.locator("#pick-run option[data-unsupported]").count() == 3
        _shot(page, "unsupported_files_no_runs")
