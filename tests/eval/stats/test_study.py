"""Several batches as one study: one family of tests across them, the batch a column of every table, a config two
batches share told apart, and names that cannot be told apart refused."""

from pathlib import Path

import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from madbench.data.errors import InputError
from madbench.eval.stats.analysis import analyse
from madbench.eval.stats.study import Batch, analyse_study, batch_labels, combine
from tests.eval.stats.test_tables_and_models import runs_frame, with_quarters

METRICS = ["sharpe", "total_return_pct"]


def batch(root: Path, name: str | None, configs: list[str], declared=None, seed: int = 0, scenarios: int = 30) -> Batch:
    runs = with_quarters(runs_frame(seed=seed)).assign(batch=name or root.name)
    runs = runs[runs.config.isin(configs) & (runs.scenario_id.str[1:].astype(int) < scenarios)]
    runs = runs.assign(run_id=runs.config + "-" + runs.scenario_id).reset_index(drop=True)
    return Batch(root, name, runs, configs, declared)


def two_batches(tmp_path) -> list[Batch]:
    """Batch a declares single → debate; batch b declares mean → debate, on 20 of a's 30 scenarios."""
    return [batch(tmp_path / "a", "a", ["debate", "single"], [("debate", "single")]),
            batch(tmp_path / "b", "b", ["debate", "mean"], [("debate", "mean")], seed=1, scenarios=20)]


def test_p_adj_is_holm_over_every_test_of_both_batches_and_p_is_each_batchs_own_clustered_test(tmp_path):
    batches = two_batches(tmp_path)
    study = analyse_study(combine(batches), "study", metrics=METRICS)
    assert [(p.a, p.b) for p in study.pairs] == [("a/debate", "single"), ("b/debate", "mean")] * 2
    p = [c.p for c in study.pairs]
    assert [c.p_adj for c in study.pairs] == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert "over all 4 paired tests" in study.family and "all its 2 batches" in study.family
    # each test is the one `stats` makes of its batch alone (quarter-clustered); only the family is larger
    for b in batches:
        alone = analyse(b.runs, "one", b.order, METRICS, declared=b.declared)
        mine = [c for c in study.pairs if c.a.startswith(f"{b.name}/")]
        assert [c.p for c in mine] == pytest.approx([c.p for c in alone.pairs])
        assert {c.cluster_by for c in mine} == {"invest_quarter"} and all(c.n_clusters < c.n for c in mine)
        assert all(s.p_adj >= o.p_adj for s, o in zip(mine, alone.pairs, strict=True))
    smallest = min(study.pairs, key=lambda c: c.p)  # Holm's first step: m = 4 tests, not its batch's 2
    assert smallest.p_adj == pytest.approx(min(1.0, 4 * smallest.p)) and smallest.p_adj > 2 * smallest.p


def test_a_config_two_batches_share_is_batch_slash_config_and_is_compared_on_the_shared_scenarios(tmp_path):
    study = combine(two_batches(tmp_path), all_pairs=True)
    assert study.order == ["a/debate", "single", "b/debate", "mean"] and study.declared is None
    assert study.batches == {"a/debate": "a", "single": "a", "b/debate": "b", "mean": "b"}
    assert set(study.runs.groupby("config").batch.unique().map(tuple)) == {("a",), ("b",)}
    assert study.runs.run_id.str.startswith(("a/", "b/")).all()  # a run is its batch and its id
    analysis = analyse_study(study, "study", metrics=["sharpe"])
    across = next(c for c in analysis.pairs if (c.a, c.b) == ("a/debate", "b/debate"))
    assert across.n == 20 and across.unpaired_a == 10  # scenario ids are one scenario in every batch
    assert len(analysis.pairs) == 6 and analysis.pairs_shown.startswith("every pair of configurations across the batches")


def test_every_table_and_record_carries_the_batch(tmp_path):
    analysis = analyse_study(combine(two_batches(tmp_path)), "study", metrics=["sharpe"], power=[0.8])
    record = analysis.record()
    assert [(r["batch"], r["configs"]) for r in record["batches"]] == [("a", "a/debate, single"), ("b", "b/debate, mean")]
    assert [(p["batch_a"], p["batch_b"]) for p in record["paired"]] == [("a", "a"), ("b", "b")]
    assert {(s["config"], s["batch"]) for s in record["summaries"]} == {("a/debate", "a"), ("single", "a"),
                                                                       ("b/debate", "b"), ("mean", "b")}
    assert all("batch" in r for r in record["beats_1n"]) and all("batch_a" in r for r in record["power"])
    assert {c["batch"] for c in record["regression"]["coefficients"] if c["term"] == "C(config)[T.mean]"} == {"b"}
    written = analysis.write_csvs(tmp_path / "out")
    for path in written:
        columns = set(pd.read_csv(path).columns)
        assert columns & {"batch", "batch_a"}, path.name
    md = analysis.markdown()
    assert md.startswith("## Batches") and "| metric | A: a/debate | B: single | C: b/debate | D: mean |\n|---|---|---|---|---|\n| batch | a | a | b | b |" in md
    assert "| metric | a | b | batch_a | batch_b |" in md


def test_batches_that_cannot_be_told_apart_are_refused(tmp_path):
    one = batch(tmp_path / "x" / "a", "a", ["debate"])
    with pytest.raises(InputError, match="is given twice"):
        batch_labels([one, batch(tmp_path / "x" / "a" / ".", "a", ["mean"])])
    with pytest.raises(InputError, match="is batch 'a', by batch name and by folder name"):
        batch_labels([one, batch(tmp_path / "y" / "a", "a", ["mean"])])
    # one batch name in two folders of other names: each batch named by its folder
    assert batch_labels([one, batch(tmp_path / "a2", "a", ["mean"])]) == ["a", "a2"]
    assert batch_labels([batch(tmp_path / "p", None, ["mean"]), one]) == ["p", "a"]  # no manifest: the folder
    clash = batch(tmp_path / "c", "c", ["debate", "mean"])
    clash = Batch(clash.root, "c", clash.runs.assign(config=clash.runs.config.replace({"mean": "b/debate"})), None, None)
    with pytest.raises(InputError, match="config 'debate' of batch 'b' and config 'b/debate' of batch 'c' are both 'b/debate'"):
        combine([*two_batches(tmp_path), clash])


def test_a_batch_that_declares_no_pairs_tests_every_pair_of_its_own_configs_only(tmp_path):
    a, b = two_batches(tmp_path)
    b = batch(tmp_path / "b", "b", ["debate", "mean", "single"], declared=[], seed=1)
    study = combine([a, b])
    assert study.declared == [("a/debate", "a/single"), ("b/debate", "mean"), ("b/debate", "b/single"), ("mean", "b/single")]
    analysis = analyse_study(study, "study", metrics=["sharpe"])
    assert len(analysis.pairs) == 4 and analysis.pairs_shown.startswith("each batch's own comparisons")
