"""Debate dynamics (eval.dynamics): the formulas on hand-made allocations, their reading of a trace, the stats
table and the flip-matrix figure, then a real offline batch whose rounds.parquet carries the columns."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from madbench.data.markdown import markdown_table
from madbench.debate.events import Turn
from madbench.eval import dynamics as D
from madbench.eval.backtest import backtest
from madbench.eval.report.figures import flip_matrix
from madbench.eval.stats.dynamics_table import DYNAMICS_LEGEND, dynamics_table
from madbench.runner.cli import main
from tests.eval.test_backtest import toy_window
from tests.runner.test_batch import ROOT, TICKERS, write_batch

A, B, C = {"AAA": 0.6, "BBB": 0.4}, {"BBB": 0.5, "CCC": 0.5}, {"AAA": 0.2, "CCC": 0.8}


def pos(weights, cash=0.0):
    return D.position(weights, cash)


# ---------------------------------------------------------------- formulas by hand

def test_l1_js_and_the_mean_count_cash_as_a_holding():
    assert D.l1(pos({"AAA": 1.0}), pos({"AAA": 0.5}, 0.5)) == pytest.approx(1.0)  # 0.5 of AAA + 0.5 of cash
    assert D.l1(pos(A), pos(B)) == pytest.approx(0.6 + 0.1 + 0.5)
    assert D.js(pos(A), pos(A)) == 0.0 and D.js(pos({"AAA": 1.0}), pos({"BBB": 1.0})) == pytest.approx(1.0)
    assert D.mean_position([pos(A), pos(B)]) == pytest.approx({"AAA": 0.3, "BBB": 0.45, "CCC": 0.25, D.CASH: 0.0})


def test_an_agent_moving_onto_its_critic_without_new_evidence_is_fully_sycophantic_and_flips():
    before, critic = pos(A), pos(B)
    pulls = {"b": D.pull(before, critic, critic)}
    assert pulls == {"b": pytest.approx(1.0)}
    assert D.flip(pulls) == ("b", pytest.approx(1.0))
    assert D.sycophancy(pulls, new_evidence=0) == pytest.approx(1.0)
    assert D.sycophancy(pulls, new_evidence=2) == 0.0  # the same move, argued with evidence it never cited before


def test_pull_flip_and_sycophancy_on_partial_and_contrary_moves():
    before, critic = pos({"AAA": 1.0}), pos({"BBB": 1.0})  # L1 = 2
    halfway, away = pos({"AAA": 0.5, "BBB": 0.5}), pos({"CCC": 1.0})  # L1 to the critic: 1, then 2
    assert D.pull(before, halfway, critic) == pytest.approx(0.5)
    assert D.pull(before, pos({"AAA": 0.9, "BBB": 0.1}), critic) == pytest.approx(0.1)
    assert D.pull(before, before, before) is None  # it already held the critic's allocation: no direction to move
    assert D.flip({"b": 0.5, "c": 0.2}) == ("b", 0.5)  # closing half the distance is a flip
    assert D.flip({"b": 0.49, "c": 0.2}) == (None, 0.49)
    assert D.flip({"c": 0.7, "b": 0.7}) == ("b", 0.7)  # a tie goes to the first critic id
    assert D.sycophancy({"b": D.pull(before, away, critic)}, 0) == 0.0  # moving away is never sycophancy
    assert D.sycophancy({"b": None}, 0) is None and D.flip({}) == (None, None)
    # an agent that stayed put up to float noise pulled 0.0, not -0.0 (the pulls JSON printed "-0.0")
    still = pos({"AAA": math.nextafter(0.1, 1), "BBB": 0.9})
    stayed = D.pull(pos({"AAA": 0.1, "BBB": 0.9}), still, pos({"BBB": 1.0}))
    assert stayed == 0.0 and math.copysign(1.0, stayed) == 1.0 and json.dumps({"b": stayed}) == '{"b": 0.0}'


def test_shift_toward_the_others_holds_their_mean_fixed():
    before, after = pos({"AAA": 1.0}), pos({"AAA": 0.5, "BBB": 0.5})
    s = D.shift_toward(before, after, [pos({"BBB": 1.0}), pos({"BBB": 0.5, "CCC": 0.5})])  # mean: BBB .75, CCC .25
    assert s["shift_l1_before"] == pytest.approx(2.0) and s["shift_l1_after"] == pytest.approx(0.5 + 0.25 + 0.25)
    assert s["shift_l1"] == pytest.approx(1.0)
    assert s["shift_js_before"] == pytest.approx(1.0) and 0 < s["shift_js_after"] < 1 and s["shift_js"] > 0
    assert D.shift_toward(before, before, [pos(B)])["shift_l1"] == 0.0


def test_collapse_turnover_and_oracle_gap():
    before = {"a": pos({"AAA": 1.0}), "b": pos({"BBB": 1.0}), "c": pos({"AAA": 1.0})}
    same = {k: pos({"AAA": 1.0}) for k in before}
    c = D.collapse(before, same)  # pairs ab, ac, bc: JS 1, 0, 1 → D = 2/3, then 0
    assert c == {"jsd_pairwise_before": pytest.approx(2 / 3), "jsd_pairwise_after": 0.0, "collapse": pytest.approx(2 / 3),
                 "collapse_rate": pytest.approx(1.0)}
    assert D.collapse(same, same)["collapse_rate"] is None  # nothing to collapse from
    assert D.debate_turnover([pos({"AAA": 1.0}), pos({"BBB": 1.0})], pos({"AAA": 0.5, "BBB": 0.5})) == 0.0
    assert D.debate_turnover([pos({"AAA": 1.0})], pos({"AAA": 0.8}, 0.2)) == pytest.approx(0.4)
    gap = D.oracle_gap({"a": 3.0, "b": 7.5, "c": None}, 5.0)
    null = D.expected_max_normal(2) * np.std([3.0, 7.5], ddof=1) / D.c4(2)  # two agents with a return
    assert gap == {"best_agent": "b", "best_agent_return_pct": 7.5, "oracle_gap_pct": pytest.approx(2.5), "oracle_agents": 2,
                   "oracle_gap_null_pct": pytest.approx(null), "oracle_gap_excess_pct": pytest.approx(2.5 - null),
                   "oracle_gap_excess_reason": None}
    assert D.oracle_gap({"a": None}, 5.0)["oracle_gap_pct"] is None
    assert D.oracle_gap({"a": 3.0, "b": 7.5}, None)["oracle_gap_excess_reason"] == "no aggregate return"


# ---------------------------------------------------------------- the oracle gap's null

def test_expected_max_of_k_standard_normals_matches_the_closed_forms_and_harters_table():
    assert D.expected_max_normal(1) == 0.0
    assert D.expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)  # E[max(X1, X2)] = 1/√π
    assert D.expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-9)
    # Harter (1961), expected values of normal order statistics, to the 5 places tabled
    for k, tabled in ((5, 1.16296), (10, 1.53875), (25, 1.96531), (100, 2.50759)):
        assert D.expected_max_normal(k) == pytest.approx(tabled, abs=1e-5), k
    assert D.c4(2) == pytest.approx(math.sqrt(2 / math.pi)) and D.c4(3) == pytest.approx(math.sqrt(math.pi) / 2)


@pytest.mark.parametrize("k", [2, 3, 29])
def test_the_oracle_gap_of_k_agents_drawing_from_one_distribution_has_zero_mean_excess(k):
    """Noise alone: k agents' returns iid N(1, 4²) and an aggregate earning their mean. The raw gap grows with k; its
    excess over the null is 0 in expectation for every k, within 4 standard errors of the mean over n runs."""
    rng, n = np.random.default_rng(20261201 + k), 4000
    raw, excess = [], []
    for r in rng.normal(1.0, 4.0, size=(n, k)):
        g = D.oracle_gap({f"a{i}": float(v) for i, v in enumerate(r)}, float(r.mean()))
        raw.append(g["oracle_gap_pct"])
        excess.append(g["oracle_gap_excess_pct"])
    raw, excess = np.array(raw), np.array(excess)
    tolerance = 4 * excess.std(ddof=1) / math.sqrt(n) + 1e-9  # + float noise: for k = 2 the null is |r1 − r2|/2, exact
    assert abs(excess.mean()) < tolerance
    assert raw.mean() > 0.5 * 4.0 * D.expected_max_normal(k)  # the raw gap is far from 0: selection alone makes it


def test_one_agent_has_an_oracle_gap_but_no_null_or_excess_and_says_why():
    g = D.oracle_gap({"a": 2.0}, 2.0)
    assert g["oracle_gap_pct"] == 0.0 and g["oracle_agents"] == 1
    assert g["oracle_gap_null_pct"] is None and g["oracle_gap_excess_pct"] is None  # undefined, not 0
    assert g["oracle_gap_excess_reason"].startswith("one agent")


def test_agent_metrics_equal_each_agent_backtested_alone():
    window = toy_window([[10.0, 20.0], [11.0, 19.0], [12.0, 21.0], [11.5, 22.0]])
    finals = {"a": pos({"T0": 1.0}), "b": pos({"T0": 0.25, "T1": 0.5}, 0.25)}
    got = D.agent_metrics(window, finals, allow_cash=True)
    for agent, p in finals.items():
        alone = backtest(window, {k: v for k, v in p.items() if k != D.CASH}, allow_cash=True).metrics
        assert got[agent]["total_return_pct"] == pytest.approx(alone.total_return_pct)
        assert got[agent]["sharpe"] == pytest.approx(alone.sharpe)
    assert got["a"]["total_return_pct"] == pytest.approx(15.0)
    # a validated turn may sum to 1 ± 0.001: backtested as the portfolio it describes, not refused
    off = D.agent_metrics(window, {"c": pos({"T0": 0.4997, "T1": 0.4998})}, allow_cash=False)
    assert off["c"]["total_return_pct"] == pytest.approx(backtest(window, {"T0": 0.4997 / 0.9995, "T1": 0.4998 / 0.9995}).metrics.total_return_pct)


# ---------------------------------------------------------------- reading a trace

def basic(weights, ids, revision=False, cash=0.0):
    out = {"thesis": " ".join(f"[{i}]" for i in ids) or "no citation", "allocation": [{"ticker": t, "weight": w} for t, w in weights.items()],
           "cash_weight": cash, "risks_or_falsifiers": ["a"], "confidence": 0.5}
    return out | ({"revision_notes": "answered"} if revision else {})


def turn(agent, phase, round_, weights=None, ids=(), label=None, targets=()):
    if phase == "critique":
        output = {"from_role": agent, "critiques": [{"target_agent": t, "target_claim": "allocation", "critique_text": "x",
                                                     "suggested_adjustment": "y", "objection_confidence": 0.5} for t in targets]}
        return Turn(agent=agent, role=agent, phase=phase, round=round_, label=label or phase, output=output, model="m", is_llm=False)
    return Turn(agent=agent, role=agent, phase=phase, round=round_, label=label or phase, output=basic(weights, ids, phase == "revise"),
                weights=weights, cash=0.0, model="m", is_llm=False)


def paper_trace():
    """Three agents; in round 1 only b critiques a, and a moves onto b's allocation citing nothing new; c cites a new
    ID while standing still; a first revision of b is replaced by an intervention's re-revision (revise:js1)."""
    return [turn("a", "propose", 0, A, ["AAA-RET60"]), turn("b", "propose", 0, B, ["BBB-RET60"]),
            turn("c", "propose", 0, C, ["CCC-RET60"]),
            turn("b", "critique", 1, targets=["a"]),
            turn("a", "revise", 1, B, ["AAA-RET60"]), turn("b", "revise", 1, C, ["BBB-RET60"]),
            turn("c", "revise", 1, C, ["CCC-RET60", "CCC-MOM200"]),
            turn("b", "revise", 1, B, ["BBB-RET60"], label="revise:js1"),
            turn("judge", "judge", 1, {"BBB": 0.5, "CCC": 0.5})]


def test_round_dynamics_read_from_a_paper_trace():
    rows = D.round_dynamics(paper_trace())
    assert set(rows) == {(1, "a"), (1, "b"), (1, "c")} and all(set(r) == set(D.ROUND_COLUMNS) for r in rows.values())
    a, b, c = rows[(1, "a")], rows[(1, "b")], rows[(1, "c")]
    assert a["critics"] == "b" and json.loads(a["pulls"]) == {"b": pytest.approx(1.0)}
    assert a["new_evidence"] == 0 and a["flip_toward"] == "b" and a["sycophancy"] == pytest.approx(1.0)
    assert a["new_evidence_ids"] == "[]" and c["new_evidence_ids"] is None  # c cited one, but nobody critiqued it
    assert a["shift_l1"] == pytest.approx(D.l1(pos(A), D.mean_position([pos(B), pos(C)])) - D.l1(pos(B), D.mean_position([pos(B), pos(C)])))
    assert b["shift_l1"] == 0.0 and b["critics"] is None and b["sycophancy"] is None  # the re-revision is what stands
    assert c["critics"] is None and c["shift_l1"] == 0.0
    expected = D.collapse({"a": pos(A), "b": pos(B), "c": pos(C)}, {"a": pos(B), "b": pos(B), "c": pos(C)})
    assert all(r["collapse"] == pytest.approx(expected["collapse"]) for r in rows.values()) and expected["collapse"] > 0


def test_run_dynamics_and_the_new_evidence_of_a_flip():
    events = paper_trace()
    events[4] = turn("a", "revise", 1, B, ["AAA-RET60", "AAA-MOM200"])  # a now cites an ID nobody cited: not sycophancy
    row = D.run_dynamics(events, pos({"BBB": 0.5, "CCC": 0.5}), {"a": {"total_return_pct": 4.0}, "b": {"total_return_pct": 9.0}}, 6.0)
    assert row["flips"] == 1 and row["flips_new_evidence"] == 1 and row["sycophancy_mean"] == 0.0
    a = D.round_dynamics(events)[(1, "a")]
    assert a["new_evidence"] == 1 and json.loads(a["new_evidence_ids"]) == ["AAA-MOM200"]  # the count, and the IDs
    assert row["debate_turnover"] == pytest.approx(D.l1(D.mean_position([pos(A), pos(B), pos(C)]), pos({"BBB": 0.5, "CCC": 0.5})))
    assert row["best_agent"] == "b" and row["oracle_gap_pct"] == pytest.approx(3.0)
    assert D.final_positions(events) == {"a": pos(B), "b": pos(B), "c": pos(C)}


def test_adopting_the_critics_evidence_ids_is_not_new_evidence_and_stays_sycophantic():
    events = paper_trace()
    events[4] = turn("a", "revise", 1, B, ["AAA-RET60", "BBB-RET60"])  # BBB-RET60: b's own proposal cites it
    a = D.round_dynamics(events)[(1, "a")]
    assert a["new_evidence"] == 0 and json.loads(a["adopted_evidence_ids"]) == ["BBB-RET60"]
    assert a["flip_toward"] == "b" and a["sycophancy"] == pytest.approx(1.0)
    row = D.run_dynamics(events, pos(B), {}, None)
    assert row["flips"] == 1 and row["flips_new_evidence"] == 0 and row["sycophancy_mean"] == pytest.approx(1.0)
    # an ID b cites only in its critique of a is b's evidence too; one nobody cited is a's own
    events[3] = turn("b", "critique", 1, targets=["a"])
    events[3].output["critiques"][0]["critique_text"] = "see [BBB-VOL20]"
    events[4] = turn("a", "revise", 1, B, ["AAA-RET60", "BBB-VOL20"])
    assert D.round_dynamics(events)[(1, "a")]["new_evidence"] == 0
    events[4] = turn("a", "revise", 1, B, ["AAA-RET60", "BBB-VOL20", "CCC-RET60"])  # c's ID, but c did not critique a
    a = D.round_dynamics(events)[(1, "a")]
    assert json.loads(a["new_evidence_ids"]) == ["CCC-RET60"] and a["sycophancy"] == 0.0


def test_staged_protocols_and_single_agents_have_null_dynamics():
    staged = [Turn(agent="desk_macro", role="desk", phase="desk", round=0, label="desk", output={"view": "x"}, model="m",
                   is_llm=False)]
    assert D.round_dynamics(staged) == {} and D.final_positions(staged) == {}
    assert D.run_dynamics(staged, pos(A), {}, 1.0) == dict.fromkeys(D.RUN_COLUMNS)
    single = [turn("a", "propose", 0, A, ["AAA-RET60"])]
    assert D.round_dynamics(single) == {}
    row = D.run_dynamics(single, pos(A), {"a": {"total_return_pct": 2.0}}, 2.0)
    assert row["debate_turnover"] == 0.0 and row["oracle_gap_pct"] == 0.0 and row["sycophancy_mean"] is None and row["flips"] is None


def test_self_consistency_samples_are_positions_of_their_own():
    events = [turn("a", "propose", 0, A, label="propose:sample0"), turn("a", "propose", 0, B, label="propose:sample1")]
    assert D.final_positions(events) == {"a:sample0": pos(A), "a:sample1": pos(B)}


# ---------------------------------------------------------------- tables and the figure

def test_critique_pairs_table_and_flip_matrix():
    rows = [{"run_id": "r", "round": t, "agent_id": agent, **v} for (t, agent), v in D.round_dynamics(paper_trace()).items()]
    pairs = D.critique_pairs(pd.DataFrame(rows))
    assert pairs.to_dict("records") == [{"run_id": "r", "round": 1, "critic": "b", "target": "a", "pull": pytest.approx(1.0),
                                         "flip": True, "new_evidence": False}]
    fig = flip_matrix(pairs, "debate")
    without, with_new = fig.data
    assert list(without.x) == ["a", "b"] and list(without.y) == ["a", "b"]
    assert without.z[1][0] == pytest.approx(1.0) and without.text[1][0] == "1/1"  # critic b (row) → target a (column)
    assert with_new.z[1][0] is None and with_new.text[1][0] == ""


def test_dynamics_table_means_runs_and_leaves_configs_without_critiques_null():
    runs = pd.DataFrame([
        {"config": "debate", "status": "ok", "shift_l1_mean": 0.2, "shift_js_mean": 0.1, "sycophancy_mean": 1.0, "collapse_mean": 0.3,
         "debate_turnover": 0.4, "oracle_gap_pct": 2.0, "flips": 2, "flips_new_evidence": 1},
        {"config": "debate", "status": "ok", "shift_l1_mean": 0.4, "shift_js_mean": 0.3, "sycophancy_mean": 0.0, "collapse_mean": 0.1,
         "debate_turnover": 0.2, "oracle_gap_pct": 4.0, "flips": 0, "flips_new_evidence": 0},
        {"config": "debate", "status": "failed", **dict.fromkeys(("shift_l1_mean", "shift_js_mean", "sycophancy_mean", "collapse_mean",
                                                                 "debate_turnover", "oracle_gap_pct", "flips", "flips_new_evidence"))},
        {"config": "desks", "status": "ok", **dict.fromkeys(("shift_l1_mean", "shift_js_mean", "sycophancy_mean", "collapse_mean",
                                                             "debate_turnover", "oracle_gap_pct", "flips", "flips_new_evidence"))}])
    t = dynamics_table(runs, ["debate", "desks"]).set_index("config")
    assert t.loc["debate", "runs_with_critiques"] == 2 and t.loc["debate", "sycophancy"] == pytest.approx(0.5)
    assert t.loc["debate", "flips_per_run"] == pytest.approx(1.0) and t.loc["debate", "new_evidence_share"] == pytest.approx(0.5)
    assert t.loc["desks", "runs_with_critiques"] == 0 and math.isnan(t.loc["desks", "sycophancy"])
    assert pd.isna(t.loc["desks", "flips_per_run"])
    assert dynamics_table(runs.drop(columns="flips"), ["debate"]).empty  # a runs table from before the columns


def test_a_config_with_critiques_but_no_flips_prints_n_a_and_the_legend_says_why():
    row = {"status": "ok", "shift_l1_mean": 0.1, "shift_js_mean": 0.05, "sycophancy_mean": 0.2, "collapse_mean": 0.1,
           "debate_turnover": 0.3, "oracle_gap_pct": 1.0, "flips": 0, "flips_new_evidence": 0,
           "oracle_gap_null_pct": 0.8, "oracle_gap_excess_pct": 0.2}
    nulls = dict.fromkeys(row) | {"status": "ok"}
    runs = pd.DataFrame([{"config": "debate", **row}, {"config": "desks", **nulls}])
    t = dynamics_table(runs, ["debate", "desks"])
    assert t["new_evidence_share"].isna().all() and t["new_evidence_share"].dtype == float  # NaN, never a None object
    assert t.set_index("config").loc["debate", "oracle_excess_pct"] == pytest.approx(0.2)
    md = markdown_table(t)
    assert "None" not in md and md.count("n/a") == 11  # desks: 10 columns with no critique round; debate: no flip
    assert "no flips" in DYNAMICS_LEGEND and "one agent" in DYNAMICS_LEGEND
    # a runs table from before the null and excess: those two columns are n/a, the rest as before
    old = dynamics_table(runs.drop(columns=["oracle_gap_null_pct", "oracle_gap_excess_pct"]), ["debate"])
    assert old["oracle_excess_pct"].isna().all() and old["oracle_gap_pct"].tolist() == [1.0]


# ---------------------------------------------------------------- a real offline batch

@pytest.mark.slow
def test_paper_batch_rounds_carry_dynamics_and_staged_runs_null(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1,
                        configs=[str(ROOT / "configs/debate/paper-debate3-basic.yaml"), str(ROOT / "configs/debate/desks.yaml")])
    spec = yaml.safe_load(batch.read_text())
    spec["scenarios"]["ids"] = ["s2021Q2"]
    batch.write_text(yaml.safe_dump(spec))
    assert main(["run", str(batch), "--quiet"]) == 0
    root = tmp_path / "results" / "t"
    runs, rounds = pd.read_parquet(root / "runs.parquet"), pd.read_parquet(root / "rounds.parquet")
    paper = runs[runs.protocol == "paper"]
    assert len(paper) == 1 and len(runs) == 2 and (runs.status == "ok").all()
    paper_rounds = rounds[rounds.run_id.isin(paper.run_id)]
    assert len(paper_rounds) == 3  # one round, three agents
    for column in ("shift_l1", "shift_js", "collapse", "critics", "pulls", "new_evidence", "flip_pull", "sycophancy"):
        assert paper_rounds[column].notna().all(), column
    assert paper[["debate_turnover", "sycophancy_mean", "collapse_mean", "flips", "oracle_gap_pct", "best_agent"]].notna().all().all()
    staged = runs[runs.protocol == "desks"]
    assert staged[list(D.RUN_COLUMNS)].isna().all().all()  # no critique round: null, never 0
    assert not rounds.run_id.isin(staged.run_id).any() or rounds[rounds.run_id.isin(staged.run_id)]["shift_l1"].isna().all()
    result = json.loads((root / "runs" / f"{paper.run_id.iloc[0]}.json").read_text())
    assert set(result["agent_metrics"]) == {"value", "risk", "technical"}
    best = max(m["total_return_pct"] for m in result["agent_metrics"].values())
    assert paper.set_index("run_id").loc[result["run_id"], "oracle_gap_pct"] == pytest.approx(best - result["metrics"]["total_return_pct"])
    assert np.isfinite(paper_rounds["collapse"].astype(float)).all()
    assert main(["stats", str(root)]) == 0
    out = capsys.readouterr().out
    assert "## Debate dynamics" in out and (root / "stats" / "dynamics.csv").exists()


def test_a_stored_v0_1_trace_whose_proposals_carry_round_1_reads_the_same():
    import gzip

    from madbench.debate.events import parse_event
    stored = ROOT / "tests" / "debate" / "data" / "trace-v0.1-a7.jsonl.gz"
    events = [parse_event(json.loads(line)) for line in gzip.decompress(stored.read_bytes()).splitlines()]
    rows = D.round_dynamics(events)
    assert set(rows) == {(1, "macro"), (1, "technical"), (2, "macro"), (2, "technical")}
    # round 2: both move from (.35/.40/.25) and (.25/.40/.35) to (.30/.40/.30): half-way to each other, citing nothing new
    assert rows[(2, "macro")]["flip_toward"] == "technical" and rows[(2, "macro")]["sycophancy"] == pytest.approx(0.5)
    assert rows[(1, "macro")]["pulls"] == json.dumps({"technical": D.pull(pos({"MS": 0.4, "T": 0.4, "XOM": 0.2}),
                                                                         pos({"MS": 0.35, "T": 0.4, "XOM": 0.25}),
                                                                         pos({"MS": 0.2, "T": 0.4, "XOM": 0.4}))})
