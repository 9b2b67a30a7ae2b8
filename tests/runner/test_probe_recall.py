"""`madbench probe recall` against the simulated provider over real HTTP: a model that remembers beats chance
significantly, one that guesses does not; answers are validated through the gateway with feedback."""

import json

import pandas as pd
import pytest
import yaml

from madbench.data.market.pack import load_pack
from madbench.runner.cli import main
from madbench.sim.provider import SimProvider
from madbench.sim.recall_answers import RecallAnswerer

TICKERS = ["AAA", "BBB", "CCC", "DDD", "EEE"]
QUARTERS = ["2020Q2", "2020Q3", "2020Q4", "2021Q1", "2021Q2", "2021Q3", "2021Q4", "2022Q1", "2022Q2"]
OBSERVATION_COLUMNS = {"model", "model_used", "quarter", "ticker", "scenario_ids", "as_of", "end", "realised_return_pct",
                       "realised_bucket", "answer_bucket", "realised_index", "answer_index", "hit", "cutoff", "post_cutoff",
                       "cached", "prompt_digest", "temperature"}
SUMMARY_COLUMNS = ["model", "quarter", "cutoff", "post_cutoff", "n", "hits", "hit_rate", "chance_rate", "modal_rate", "excess",
                   "kappa", "p_value"]


@pytest.fixture
def setup(make_pack, tmp_path):
    pack_dir = make_pack(tickers=tuple(TICKERS))
    scenarios = [{"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS} for q in QUARTERS]
    scenarios.append({"id": "overlap", "invest_quarter": "2021Q1", "tickers": ["AAA", "BBB", "CCC"]})  # shares 2021Q1 tickers
    path = tmp_path / "scenarios.yaml"
    path.write_text(yaml.safe_dump({"scenarios": scenarios}))
    cutoffs = tmp_path / "cutoffs.yaml"
    cutoffs.write_text("cutoffs:\n  madbench-sim: 2021-03\n")  # 2021Q2 onwards is after it
    return pack_dir, path, cutoffs


def probe(sim, pack_dir, scenarios, cutoffs, out, *extra) -> int:
    return main(["probe", "recall", "--model", "openai/madbench-sim", "--api-base", sim.url, "--send-context",
                 "--scenarios", str(scenarios), "--pack", str(pack_dir), "--cutoffs", str(cutoffs), "--out", str(out),
                 "--no-cache", *extra])


def test_a_memorising_model_beats_chance_and_a_guessing_one_does_not(setup, tmp_path, capsys):
    pack_dir, scenarios, cutoffs = setup
    pack = load_pack(pack_dir)
    with SimProvider(recall=RecallAnswerer(1.0, pack)) as sim:
        assert probe(sim, pack_dir, scenarios, cutoffs, tmp_path / "memo") == 0
    printed = capsys.readouterr().out
    assert "| openai/madbench-sim | all |" in printed and "chance_rate" in printed
    obs = pd.read_parquet(tmp_path / "memo" / "recall.parquet")
    summary = pd.read_parquet(tmp_path / "memo" / "recall_summary.parquet")
    assert set(obs.columns) == OBSERVATION_COLUMNS and list(summary.columns) == SUMMARY_COLUMNS
    assert len(obs) == len(QUARTERS) * len(TICKERS)  # a (quarter, ticker) two scenarios share is one observation
    assert obs.loc[(obs["quarter"] == "2021Q1") & (obs["ticker"] == "AAA"), "scenario_ids"].item() == "s2021Q1,overlap"
    assert obs["hit"].all()
    rows = summary.set_index("quarter")
    assert rows.loc["all", "hit_rate"] == 1.0 and rows.loc["all", "p_value"] < 1e-6
    assert 0.1 < rows.loc["all", "chance_rate"] < 0.6  # from the realised bucket shares: neither 1/5 nor 1
    # the registry puts 2021Q2 onwards after the cutoff; the pooled rows on each side are there
    assert rows.loc["2021Q1", "post_cutoff"] == False and rows.loc["2021Q2", "post_cutoff"] == True  # noqa: E712
    assert rows.loc["pre-cutoff", "n"] == 4 * len(TICKERS) and rows.loc["post-cutoff", "n"] == 5 * len(TICKERS)
    assert rows.loc["all", "cutoff"] == "2021-03-31"

    with SimProvider(recall=RecallAnswerer(0.0, seed=3)) as sim:
        assert probe(sim, pack_dir, scenarios, cutoffs, tmp_path / "guess", "--json") == 0
    records = {r["quarter"]: r for r in json.loads(capsys.readouterr().out)}
    guess = records["all"]
    assert guess["n"] == len(QUARTERS) * len(TICKERS) and guess["p_value"] > 0.05 and abs(guess["excess"]) < 0.15


def test_invalid_answers_go_back_as_feedback_and_rule_models_are_refused(setup, tmp_path, capsys):
    pack_dir, scenarios, cutoffs = setup
    broken = {"n": 0}

    def drop_a_ticker_once(context, content):
        if broken["n"]:
            return content
        broken["n"] += 1
        answer = json.loads(content)
        return json.dumps({"answers": answer["answers"][1:]})

    with SimProvider(answer_filter=drop_a_ticker_once, record_bodies=True) as sim:
        assert probe(sim, pack_dir, scenarios, cutoffs, tmp_path / "retry") == 0
        retried = [b for b in sim.bodies if len(b["messages"]) > 2]
    assert len(sim.bodies) == len(QUARTERS) + 1 and len(retried) == 1
    assert "tickers missing" in retried[0]["messages"][-1]["content"]
    assert len(pd.read_parquet(tmp_path / "retry" / "recall.parquet")) == len(QUARTERS) * len(TICKERS)
    capsys.readouterr()

    assert main(["probe", "recall", "--model", "rules/auto", "--scenarios", str(scenarios), "--pack", str(pack_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "remembers no prices" in err[0]
