"""The report's glossary defines every dynamics column with a formula, and its caveats name what the data cannot show."""

import re

import jinja2

from madbench.eval.dynamics import ROUND_COLUMNS, RUN_COLUMNS
from madbench.eval.report.glossary import CAVEATS, DYNAMICS
from madbench.eval.report.page import HERE


def test_every_dynamics_column_has_a_glossary_entry_with_a_formula():
    named = {c for term in DYNAMICS for c in re.findall(r"[a-z][a-z0-9_]+", term.columns)}
    # "shift_l1, shift_js (_before, _after)" and "jsd_pairwise_before/_after" name their variants by suffix
    expanded = named | {f"{b}{s}" for b in ("shift_l1", "shift_js") for s in ("_before", "_after")} | {"jsd_pairwise_after"}
    missing = [c for c in (*ROUND_COLUMNS, *RUN_COLUMNS) if c not in expanded]
    assert not missing, f"no glossary entry for {missing}"
    assert all("=" in term.formula for term in DYNAMICS)


def test_the_caveats_name_news_dating_macro_vintages_and_survivorship():
    text = " ".join(CAVEATS)
    assert "trading day after" in text and "revised vintage" in text and "survivorship" in text


def test_the_template_renders_the_glossary_and_the_caveats():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE), autoescape=True)
    html = env.get_template("report.html.j2").render(dynamics_glossary=DYNAMICS, caveats=CAVEATS, configs=[], notes=[],
                                                      paired_figs=[], distribution_figs=[], dynamics_figs=[], flip_figs=[],
                                                      stats={}, stats_more=[])
    assert 'id="caveats"' in html and html.count("<li>") >= len(CAVEATS)
    assert "oracle_gap_excess_pct" in html and "G − N_k" in html
