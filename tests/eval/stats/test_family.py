"""Every pair × metric of one analysis is one family, Holm-adjusted by default; the table marks adjusted p."""

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from madbench.eval.stats.analysis import adjust_across, analyse
from tests.eval.stats.test_tables_and_models import runs_frame
from tests.eval.stats.test_units import replicated_runs

METRICS = ["sharpe", "total_return_pct", "rho_bar"]


def test_the_family_is_every_pair_and_metric_holm_by_default():
    a = analyse(runs_frame(seed=4), "t", metrics=METRICS)
    raw = [p.p for p in a.pairs]
    assert len(raw) == 9 and a.correction == "holm"
    assert [p.p_adj for p in a.pairs] == pytest.approx(list(multipletests(raw, method="holm")[1]))  # across metrics
    assert "Holm (family-wise error) over all 9 paired tests" in a.markdown()
    bh = analyse(runs_frame(seed=4), "t", metrics=METRICS, correction="bh")
    assert [p.p_adj for p in bh.pairs] == pytest.approx(list(multipletests(raw, method="fdr_bh")[1]))
    none = analyse(runs_frame(seed=4), "t", metrics=METRICS, correction="none")
    assert [p.p_adj for p in none.pairs] == pytest.approx(raw) and "no correction" in none.markdown()


def test_superscripts_mark_adjusted_p_below_005_and_the_paper_convention_is_only_in_its_labelled_table():
    a = analyse(runs_frame(seed=4), "t", metrics=METRICS)
    for p in a.pairs:
        marked = any(l == a.table.letters[p.b] for l, _ in a.table.cells[(p.metric, p.a)].differs)
        assert marked == (p.p_adj < 0.05), (p.metric, p.a, p.b, p.p, p.p_adj)
        in_paper = any(l == a.table.letters[p.b] for l, _ in a.paper_table.cells[(p.metric, p.a)].differs)
        assert in_paper == (p.p < 0.15)
    assert "0.15" not in a.table.markdown() and "0.15" not in a.markdown()
    md = a.markdown(paper_table=True)
    assert "## Paper-table reproduction (the paper's convention, uncorrected p < 0.15)" in md
    assert "not a significance claim" in md


def test_a_raw_p_below_015_but_adjusted_above_005_marks_only_the_paper_table():
    """The referee's case: a comparison the paper's convention marks that the family does not carry."""
    for seed in range(40):
        a = analyse(replicated_runs(seed=seed), "t", metrics=["sharpe", "total_return_pct"])
        hit = next((p for p in a.pairs if 0.05 < p.p < 0.15 and p.p_adj >= 0.05), None)
        if hit:
            break
    assert hit is not None, "no seed gave a raw p in (0.05, 0.15)"
    letter = a.table.letters[hit.b]
    assert letter not in [l for l, _ in a.table.cells[(hit.metric, hit.a)].differs]
    assert letter in [l for l, _ in a.paper_table.cells[(hit.metric, hit.a)].differs]


def test_parts_of_one_call_are_adjusted_together():
    df = runs_frame(seed=4)
    parts = [analyse(df[df.batch == b], "t", metrics=["sharpe"]) for b in ("abl1", "abl2")]
    raw = [p.p for a in parts for p in a.pairs]
    adjust_across(parts, "holm")
    got = [p.p_adj for a in parts for p in a.pairs]
    assert got == pytest.approx(list(multipletests(raw, method="holm")[1])) and len(got) == 6
    assert "over all 6 paired tests" in parts[0].markdown() and "every part of --by" in parts[0].markdown()
    assert np.all(np.array(got) >= np.array(raw))
