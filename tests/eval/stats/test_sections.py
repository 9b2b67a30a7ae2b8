"""Each statistic renders itself (``eval/stats/sections.py``): a new one is one Section class and one entry in
``SECTIONS``, and shows in `stats`' markdown, its CSV tables and JSON record, and the report."""

import json

import pandas as pd
import pytest

from madbench.eval.stats import sections
from madbench.eval.stats.analysis import analyse
from madbench.eval.stats.analysis_data import AnalysisData
from madbench.eval.stats.frame import json_safe
from madbench.eval.stats.sections import SECTIONS, Section, html_table, md_table
from tests.eval.stats.test_tables_and_models import runs_frame


class Means(Section):
    """A researcher's statistic: each config's mean over scenarios, for every metric analysed."""
    key = "means"

    def frame(self, a: AnalysisData) -> pd.DataFrame:
        return pd.DataFrame([{"config": s["config"], "metric": s["metric"], "n": s["n"], "mean": s["mean"]}
                             for s in a.summaries])

    def markdown(self, a, paper_table=False):
        return ["## Means", "", md_table(self.frame(a)), ""]

    def tables(self, a):
        return {"means": self.frame(a)}

    def record(self, a):
        return {"means": self.frame(a).to_dict(orient="records")}

    def html(self, a):
        return "<h3 id='means'>Means</h3>" + html_table(self.frame(a))


@pytest.fixture
def with_means(monkeypatch):
    monkeypatch.setattr(sections, "SECTIONS", (*SECTIONS, Means()))


def test_a_new_section_shows_in_the_markdown_the_csvs_and_the_record(with_means, tmp_path):
    runs = runs_frame()
    a = analyse(runs, "test", compare=["debate", "single", "mean"], metrics=["sharpe", "total_return_pct"])
    md = a.markdown()
    assert md.index("## Paired differences") < md.index("## Means")  # after the sections before it in the registry
    written = a.write_csvs(tmp_path)
    assert tmp_path / "means.csv" in written
    table = pd.read_csv(tmp_path / "means.csv")
    assert set(zip(table.config, table.metric, strict=True)) == {(c, m) for c in ("debate", "single", "mean")
                                                    for m in ("sharpe", "total_return_pct")}
    debate = table[(table.config == "debate") & (table.metric == "sharpe")]["mean"].item()
    assert debate == pytest.approx(runs.loc[runs.config == "debate", "sharpe"].mean())
    record = json.loads(json.dumps(json_safe(a.record())))
    assert len(record["means"]) == 6 and "paired" in record and "summaries" in record


def test_without_it_nothing_of_it_is_rendered(tmp_path):
    a = analyse(runs_frame(), "test", compare=["debate", "single"], metrics=["sharpe"])
    assert "## Means" not in a.markdown() and "means" not in a.record()
    assert not any(p.name == "means.csv" for p in a.write_csvs(tmp_path))


def test_every_section_has_its_own_key():
    keys = [s.key for s in SECTIONS]
    assert len(set(keys)) == len(keys)


def test_the_stale_regression_table_is_removed_when_a_later_analysis_fits_none(tmp_path):
    fitted = analyse(runs_frame(), "test", compare=["debate", "single", "mean"], metrics=["sharpe"])
    assert fitted.ols_table is not None and tmp_path / "ols.csv" in fitted.write_csvs(tmp_path)
    runs = runs_frame().assign(rho_bar=0.7)  # a constant rho_bar: no slope can be fitted
    refused = analyse(runs, "test", compare=["debate", "single", "mean"], metrics=["sharpe"])
    assert refused.ols_table is None
    refused.write_csvs(tmp_path)
    assert not (tmp_path / "ols.csv").exists()
