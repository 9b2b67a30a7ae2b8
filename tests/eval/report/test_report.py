"""The HTML report: built from a real batch's results dir, self-contained, and rendered in headless Chromium."""

import json
import re

import pandas as pd
import pytest

from madbench.eval.report.page import _script_json, build_report
from madbench.runner.cli import main
from tests.browser import ARTIFACTS, open_page, requires_chromium
from tests.conftest import requires_shared
from tests.runner.test_batch import TICKERS, write_batch


@pytest.fixture(scope="session")  # made once, on the one worker that runs its tests (conftest)
def batch_results(tmp_path_factory, make_pack_module):
    tmp = tmp_path_factory.mktemp("report")
    batch = write_batch(tmp, make_pack_module(tickers=tuple(TICKERS)), replicates=1)
    assert main(["run", str(batch), "--quiet"]) == 0
    return tmp / "results" / "t"


@pytest.fixture(scope="session")  # made once, on the one worker that runs its tests (conftest)
def make_pack_module(tmp_path_factory):
    from madbench.data.market.write import write_pack
    from tests.conftest import synthetic_tables
    return lambda **kw: write_pack(tmp_path_factory.mktemp("pack"), synthetic_tables(**kw))


def explorer_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


@pytest.mark.slow
def test_report_is_self_contained_and_holds_every_section(batch_results, capsys):
    assert main(["report", str(batch_results)]) == 0
    html = (batch_results / "report.html").read_text()
    assert "wrote" in capsys.readouterr().out
    for anchor in ("comparison", "distributions", "paired", "quality", "divergence", "pillars", "dynamics", "cost", "explorer-section"):
        assert f'id="{anchor}"' in html
    assert "A: single-causal" in html and "B: causal-debate-3" in html
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="https?://', html)  # nothing fetched when opened
    data = explorer_data(html)
    runs = pd.read_parquet(batch_results / "runs.parquet")
    assert {r["run_id"] for r in data["runs"]} == set(runs.run_id)
    debate = next(r for r in data["runs"] if r["config"] == "causal-debate-3")
    assert {t["label"] for t in debate["turns"]} >= {"propose", "critique", "revise", "judge"}
    assert debate["crit"] and all(c["explanations"] for c in debate["crit"])  # CRIT reasons are kept in the trace
    assert data["memos"][debate["memo"]["sha256"]].count("[") > 10  # the memo text with its evidence IDs
    assert debate["backtest"]["baselines"]["equal"]["sharpe"] is not None
    from madbench.eval.stats.degenerate import distinct_values
    if len(distinct_values(runs[runs.status == "ok"].rho_bar)) < 3:  # rule-based analysts: no slope is a finding
        assert "no OLS line: rho_bar" in html and "<p class=\"note\">not fitted: rho_bar" in html


def test_embedded_json_cannot_close_its_script_element():
    text = _script_json({"claim": "</script><script>alert(1)</script> <!-- x", "nan": float("nan")})
    assert "</script" not in text and "<!--" not in text
    assert json.loads(text) == {"claim": "</script><script>alert(1)</script> <!-- x", "nan": None}


@pytest.mark.slow
@requires_chromium
def test_report_renders_in_chromium_without_console_errors(batch_results, tmp_path):
    from playwright.sync_api import sync_playwright
    path = build_report(batch_results, tmp_path / "report.html")
    with sync_playwright() as pw:
        context, page, errors = open_page(pw, tmp_path / "profile")
        page.goto(path.as_uri())
        page.wait_for_selector("#explorer .turn")
        assert page.locator(".js-plotly-plot").count() >= 9
        assert page.locator("table.cmp tbody tr").count() >= 5
        # Debate dynamics: shift, sycophancy/collapse, turnover/oracle gap, and causal-debate-3's flip matrix drawn
        assert page.locator("#dynamics-section .js-plotly-plot").count() >= 4
        assert page.locator("#flip-matrices .js-plotly-plot .hm").count() >= 1
        assert "causal-debate-3: who moved toward whose critique" in page.locator("#flip-matrices").inner_text()
        first = page.locator("#explorer-run option").count()
        page.select_option("#explorer-config", "single-causal")
        assert 0 < page.locator("#explorer-run option").count() < first
        assert "single-causal" in page.locator("#explorer").inner_text()
        context.close()
    assert errors == []


@pytest.mark.slow
@requires_shared
@requires_chromium
def test_rules_35_report_screenshot(finished_rules35, tmp_path):
    """The report of the rules-35 batch in Chromium; the screenshots are kept as test artifacts."""
    from playwright.sync_api import sync_playwright
    path = build_report(finished_rules35)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        context, page, errors = open_page(pw, tmp_path / "profile")
        page.goto(path.as_uri())
        page.wait_for_selector("#explorer .turn")
        assert page.locator(".js-plotly-plot").count() >= 9
        assert page.locator("table.cmp").first.locator("thead th").count() == 4  # metric + 3 configurations
        page.screenshot(path=str(ARTIFACTS / "report-rules-35.png"))
        page.locator("#explorer-section").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "report-rules-35-explorer.png"))
        context.close()
    assert errors == []
    assert (ARTIFACTS / "report-rules-35.png").stat().st_size > 50_000


def test_quality_scatter_draws_no_slope_through_a_two_valued_rho_bar():
    from madbench.eval.report.figures import quality_scatter
    from tests.eval.stats.test_degenerate import rules_like
    from tests.eval.stats.test_tables_and_models import runs_frame
    fig = quality_scatter(rules_like(), ["debate", "single", "mean"])
    assert fig.layout.title.text == "sharpe against rho_bar (no OLS line: rho_bar takes only 2 distinct values (0.883, 0.900))"
    assert all(t.mode == "markers" for t in fig.data)
    fig = quality_scatter(runs_frame(), ["debate", "single", "mean"])
    assert "OLS slope" in fig.layout.title.text and fig.data[-1].name == "OLS fit (pooled)"


@pytest.mark.slow
def test_a_new_statistics_section_shows_in_the_report_after_the_quality_section(batch_results, tmp_path, monkeypatch):
    from madbench.eval.stats import sections
    from tests.eval.stats.test_sections import Means
    monkeypatch.setattr(sections, "SECTIONS", (*sections.SECTIONS, Means()))
    html = build_report(batch_results, tmp_path / "report.html").read_text()
    assert html.count("<h3 id='means'>Means</h3>") == 1
    assert html.index('id="quality"') < html.index("id='means'") < html.index('id="divergence"')
    assert html.count('<h2 id="comparison">') == 1  # a section the page places itself is shown once, in its place
