"""Blind runs end to end: every protocol debates pseudonyms offline, no prompt holds a real ticker, company name
or calendar date, and the result, the backtest and runs.parquet are in real tickers.

Prompts are captured at the gateway (every request of the run, its messages and the context a provider may be
sent), on a self-made pack with named companies and dated filings and calls, and on the shared market pack.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.data.blind import pack_companies
from madbench.data.market.pack import load_pack
from madbench.data.scenario import Scenario, load_scenarios
from madbench.debate.config import DebateConfig
from madbench.debate.config_file import load_debate_config
from madbench.debate.events import BlindMap, Final, Turn, last_attempt, parse_event
from madbench.debate.trace import read_trace
from madbench.gateway import Gateway, LLMRequest, Message, ModelRouting
from madbench.results.leakage_record import read_audit
from madbench.runner.batch import load_batch, resolve_configs
from madbench.runner.cli import main
from madbench.runner.pipeline import BlindGateway, RunResult, _memos, run_debate, run_id_for
from madbench.runner.store import run_row
from madbench.runner.wiring import build_gateway, build_providers
from tests.conftest import SHARED_MARKET, SHARED_PAPER, requires_shared
from tests.data.test_blind import UNIVERSE, blind_world, leaks, pack_names

ROOT = Path(__file__).resolve().parents[2]
#: One config of each protocol (debate/protocols/__init__.py), the paper's first.
PROTOCOL_CONFIGS = {"paper": "causal-debate-3.yaml", "adversarial": "adversarial.yaml", "desks": "desks.yaml",
                    "tradingagents": "tradingagents.yaml"}


class RecordingGateway(Gateway):
    """A gateway that keeps every request's rendered messages and context: what a model of the run could read."""

    def __init__(self):
        super().__init__(providers=build_providers())
        self.prompts: list[str] = []

    async def complete(self, request, *args, **kw):
        self.prompts.append("\n".join(m.content for m in request.messages) + "\n" + json.dumps(request.context))
        return await super().complete(request, *args, **kw)


def config(name: str, blind: bool | dict = True) -> DebateConfig:
    cfg = load_debate_config(ROOT / "configs" / "debate" / name)
    return DebateConfig.model_validate({**cfg.model_dump(mode="json"), "models": ModelRouting.single("rules/auto").model_dump(),
                                        "blind": blind})


def run_blind(scenario, pack, cfg, out: Path) -> tuple[RunResult, list, str]:
    gateway = RecordingGateway()
    result = asyncio.run(run_debate(scenario, pack, cfg, gateway, out))
    events = last_attempt(read_trace(out / result.run_id / "trace.jsonl").typed())
    assert gateway.prompts, "the run asked no model"
    return result, events, "\n".join(gateway.prompts)


def check_blind_run(result: RunResult, events: list, prompts: str, scenario: Scenario, names: list[str]) -> None:
    assert result.status == "ok", result.error
    assert leaks(prompts, list(scenario.tickers), names) == []
    blind = next(e for e in events if isinstance(e, BlindMap))
    pseudonyms = set(blind.mapping.values())
    assert set(blind.mapping) == set(scenario.tickers) and all(p in prompts for p in pseudonyms)
    # the debate answered in pseudonyms; the final allocation, the backtest and the result are in real tickers
    answers = json.dumps([e.output for e in events if isinstance(e, Turn)])
    assert all(p in answers for p in pseudonyms) and leaks(answers, list(scenario.tickers), names) == []
    assert all(set(e.weights) <= pseudonyms for e in events if isinstance(e, Turn) and e.weights)
    final = next(e for e in events if isinstance(e, Final))
    assert list(result.weights) == list(scenario.tickers) and final.weights == result.weights
    assert result.metrics["total_return_pct"] is not None and "equal" in result.baselines


@pytest.mark.parametrize("protocol", sorted(PROTOCOL_CONFIGS))
def test_blind_run_of_every_protocol_shows_no_name_ticker_or_date(make_pack, tmp_path, protocol):
    pack, scenario = blind_world(make_pack)
    cfg = config(PROTOCOL_CONFIGS[protocol], blind={"macro": "exact"})  # bucketed levels would move the macro rules
    result, events, prompts = run_blind(scenario, pack, cfg, tmp_path)
    check_blind_run(result, events, prompts, scenario, pack_names(pack_companies(pack.universe), UNIVERSE))
    # the rule-based analysts read only the memo's numbers, so the named run allocates alike (blind-safe)
    named = asyncio.run(run_debate(scenario, pack, config(PROTOCOL_CONFIGS[protocol], blind=False), build_gateway(), tmp_path))
    assert named.run_id != result.run_id and named.weights == result.weights
    row = run_row("b", result, cfg.model_dump(mode="json"), scenario.model_dump(mode="json"), events, "n")
    assert row["blind"] is True and json.loads(row["weights"]) == result.weights
    named_events = last_attempt(read_trace(tmp_path / named.run_id / "trace.jsonl").typed())
    named_row = run_row("b", named, config(PROTOCOL_CONFIGS[protocol], blind=False).model_dump(mode="json"),
                        scenario.model_dump(mode="json"), named_events, "n")
    assert named_row["blind"] is False
    same = [k for k in ("debate_turnover", "oracle_gap_pct", "total_return_pct") if k in row]
    assert [row[k] for k in same] == [named_row[k] for k in same]  # dynamics read the turns back in real tickers


@requires_shared
@pytest.mark.skipif(not (SHARED_PAPER / "filings.parquet").exists(), reason="the paper's evidence tables are absent")
@pytest.mark.parametrize("protocol", sorted(PROTOCOL_CONFIGS))
@pytest.mark.parametrize("scenario_id", ["2022Q4_tech", "2024Q1_rand3_2"])
def test_blind_runs_on_the_market_pack_show_no_name_ticker_or_date(tmp_path, protocol, scenario_id):
    """The paper's scenarios with their filings and earnings calls: AAPL, AMD, MSFT and NVDA in 2022Q4; AMD, LLY and
    UNH in 2024Q1, whose texts name Nvidia (the pack's NVIDIA, in another case) and Intel (outside the pack)."""
    pack = _market_pack()
    scenario = {s.id: s for s in load_scenarios(SHARED_PAPER / "scenarios_35.yaml")}[scenario_id]
    cfg = config(PROTOCOL_CONFIGS[protocol])
    result, events, prompts = run_blind(scenario, pack, cfg, tmp_path)
    check_blind_run(result, events, prompts, scenario, pack_names(pack_companies(pack.universe), scenario.tickers))
    assert "ASSET_" in prompts and "t\u2212" in prompts  # the memo's relative dates reached the models (as sent)
    # every product, person, place and event name the texts carried was masked before anything was sent
    _, blinded = _memos(scenario, pack, cfg, "test")
    assert len(blinded.masked) > 20 and "[PRODUCT_" in prompts
    def found(text: str, where: str) -> bool:
        return re.search(rf"(?<![\w-]){re.escape(text)}(?![\w-])", where) is not None
    assert [t.text for t in blinded.masked if t.mask_class != "TERM" and found(t.text, prompts)] == []
    # a lower-case term is masked in the evidence's texts as sent; the same word in madbench's own words (a template's
    # "specific", the memo header's "number") is madbench's, the same in every run
    assert "[TERM_" in prompts
    texts = "\n".join(it.value for it in blinded.memo.items if it.unit == "text" and isinstance(it.value, str))
    assert [t.text for t in blinded.masked if t.mask_class == "TERM" and found(t.text, texts)] == []
    assert not re.search(r"[$\u20ac\u00a3\u00a5]\s?\d", prompts)  # no exact currency amount: orders of magnitude
    assert not re.search(r"(?<![\d.,$])(?:19|20)\d\d(?![\d%])", prompts)  # no year, in messages, schema or context


_PACK = {}


def _market_pack():
    if "market" not in _PACK:
        _PACK["market"] = load_pack(SHARED_MARKET, [SHARED_PAPER])
    return _PACK["market"]


def test_tradingagents_reflects_on_last_quarter_in_pseudonyms(make_pack, tmp_path):
    """The decision log follows one universe from quarter to quarter: same pseudonyms, relative quarter, real backtest."""
    pack, scenario = blind_world(make_pack)
    cfg = config("tradingagents.yaml", blind={"macro": "bucket"})
    first = scenario.model_copy(update={"id": "syn-2021Q2", "invest_quarter": "2021Q2"})
    assert asyncio.run(run_debate(first, pack, cfg, build_gateway(), tmp_path)).status == "ok"
    result, events, prompts = run_blind(scenario, pack, cfg, tmp_path)
    check_blind_run(result, events, prompts, scenario, pack_names(pack_companies(pack.universe), UNIVERSE))
    reflection = next(e for e in events if e.event == "reflection")  # the trace keeps what the protocol wrote
    assert reflection.source_run and reflection.text.startswith("Last quarter the desk held ASSET_")
    assert reflection.text in prompts  # what the models read, as the protocol wrote it
    assert "rounded to the nearest 1" in prompts and "bps QoQ" not in prompts  # macro: bucket


def test_what_a_blind_request_would_name_of_the_real_scenario_is_redacted_before_it_is_sent(make_pack):
    # Templates write only what the blind memo gives them, but a model's own words are quoted into later turns (a
    # claim naming the company it guessed, a year): the blind gateway redacts the messages, schema and context.
    pack, scenario = blind_world(make_pack)
    memo, blinded = _memos(scenario, pack, config("causal-debate-3.yaml"), "test")
    sent = []

    class Inner:
        async def complete(self, request, *args, **kw):
            sent.append(request)
    ticker, quarter = scenario.tickers[0], scenario.invest_quarter
    request = LLMRequest(model="rules/macro", messages=[Message(role="user", content=f"{ticker} fell after {quarter}.")],
                         context={"note": f"held in {quarter}"}, response_schema={"description": f"e.g. [{ticker}-RET60]"})
    asyncio.run(BlindGateway(Inner(), blinded).complete(request))
    (out,) = sent
    text = json.dumps([out.messages[0].content, out.context, out.response_schema])
    assert ticker not in text and quarter not in text
    assert blinded.mapping[ticker] in out.messages[0].content and blinded.mapping[ticker] in out.response_schema["description"]


def test_blind_is_off_by_default_part_of_the_run_identity_when_on(make_pack):
    _, scenario = blind_world(make_pack)
    plain = load_debate_config(ROOT / "configs" / "debate" / "causal-debate-3.yaml")
    assert not plain.blind.enabled and "blind" not in plain.model_dump() and "blind" not in plain.model_dump_json()
    off = plain.model_copy(update={"blind": plain.blind.model_copy(update={"sectors": "drop"})})
    assert run_id_for(scenario, off, 0) == run_id_for(scenario, plain, 0) and off.content_hash() == plain.content_hash()
    on = DebateConfig.model_validate({**plain.model_dump(mode="json"), "blind": True})
    bucket = DebateConfig.model_validate({**plain.model_dump(mode="json"), "blind": {"macro": "exact"}})  # not the default
    ids = {run_id_for(scenario, c, 0) for c in (plain, on, bucket)}
    assert len(ids) == 3 and len({c.content_hash() for c in (plain, on, bucket)}) == 3
    assert DebateConfig.model_validate(on.model_dump(mode="json")) == on  # the options survive a round trip


def test_trace_show_names_the_pseudonyms(make_pack, tmp_path, capsys):
    pack, scenario = blind_world(make_pack)
    result = asyncio.run(run_debate(scenario, pack, config("single-causal.yaml"), build_gateway(), tmp_path))
    assert main(["trace", "show", str(tmp_path / result.run_id)]) == 0
    shown = capsys.readouterr().out
    blind = next(line for line in shown.splitlines() if "BLIND" in line)
    assert all(f"={t}" in blind for t in UNIVERSE) and "FINAL" in shown
    records = read_trace(tmp_path / result.run_id / "trace.jsonl").events
    assert [parse_event(r).event for r in records][:3] == ["run_start", "blind_map", "memo"]


def test_the_leakage_batch_pairs_named_with_blind_and_nothing_else():
    path = ROOT / "configs" / "batches" / "leakage.yaml"
    spec, base = load_batch(path)
    configs = {c.name: c for c in resolve_configs(spec, base, str(path))}
    # the blind arm is the control (recall taken away): stats prints treatment − control, named − blind
    assert [(p.control, p.treatment, p.factor) for p in spec.pairs] == [("leakage-blind", "leakage-named", ["blind"])]
    control, treatment = configs["leakage-blind"], configs["leakage-named"]
    assert control.blind.enabled and not treatment.blind.enabled
    a, b = (c.model_dump(mode="json", exclude={"name", "description"}) for c in (control, treatment))
    assert {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} == {"blind"}
    assert spec.model is None  # a real provider by --model, or the configs' own routing


@pytest.mark.slow
@requires_shared
@pytest.mark.skipif(not (SHARED_PAPER / "filings.parquet").exists(), reason="the paper's evidence tables are absent")
def test_leakage_batch_runs_offline_and_stats_pairs_named_with_blind(tmp_path, capsys):
    """The ready batch with --model rules/auto on a real local Ray, on its 6 paper scenarios x 2 arms; named − blind
    pairs them (rule-based analysts read no name or date: only the blind arm's macro bands, no levels, can move them);
    its leakage audit is recorded first and the report shows it."""
    spec = yaml.safe_load((ROOT / "configs" / "batches" / "leakage.yaml").read_text())
    base = ROOT / "configs" / "batches"
    # the paper's six only (the drawn post-cutoff scenarios would make it 72 runs)
    spec |= {"scenarios": {"file": str((base / spec["scenarios"]["file"]).resolve()), "ids": spec["scenarios"]["ids"]},
             "pack": str((base / spec["pack"]).resolve()), "evidence": [str((base / e).resolve()) for e in spec["evidence"]],
             "configs": [str((base / c).resolve()) for c in spec["configs"]], "results_dir": "batches/../results"}
    (tmp_path / "batches").mkdir()
    path = tmp_path / "leakage.yaml"
    path.write_text(yaml.safe_dump(spec))
    capsys.readouterr()
    # its own cache: the leakage audit opens it in this process before the debates
    assert main(["run", str(path), "--model", "rules/auto", "--quiet", "--cache-dir", str(tmp_path / "cache")]) == 0
    root = tmp_path / "results" / "leakage@rules-auto"  # as the batch's description says
    assert f"results in {root.resolve()}\n" in capsys.readouterr().out  # resolved: no batches/../ in the path printed
    runs = pd.read_parquet(root / "runs.parquet")
    assert len(runs) == 12 and (runs.status == "ok").all() and runs.groupby("config").blind.all().to_dict() == {
        "leakage-named": False, "leakage-blind": True}
    scenarios = {s.id: s for s in load_scenarios(spec["scenarios"]["file"])}
    for _, row in runs.iterrows():  # real tickers in the table, in the scenario's order
        assert list(json.loads(row.weights)) == sorted(scenarios[row.scenario_id].tickers)
    capsys.readouterr()
    assert main(["stats", str(root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["comparisons"].startswith("the batch's declared pairs")
    sharpe = next(p for p in out["paired"] if p["metric"] == "sharpe")  # the declared pair, treatment − control
    assert (sharpe["a"], sharpe["b"], sharpe["n"]) == ("leakage-named", "leakage-blind", 6)
    # its leakage audit ran before the debates (offline: the rule-based models name nothing), and the report shows it
    audit = read_audit(root)
    assert audit is not None and audit.decision == "clear" and audit.memos == 6 and audit.macro_k_min >= 4
    assert sum(audit.residue.values()) == 0 and audit.probes and not audit.leaks
    assert main(["report", str(root)]) == 0
    html = (root / "report.html").read_text()
    assert 'id="leakage"' in html and f"macro k-anonymity min {audit.macro_k_min}" in html and "post_cutoff = " in html
