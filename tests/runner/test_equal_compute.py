"""The equal-compute axis: configs/batches/equal-compute.yaml offline to completion with its paired table of tokens
and cost per run, and its run ids as they were before `match` existed; against the simulator, each matched baseline
within 5% of the debate's spend per scenario in the unit it is matched on (generated tokens, total tokens or cost,
the debate's judge and CRIT calls included); and `match_tokens_of` choosing N from a pilot's calls.parquet (a pilot
over real HTTP)."""

import hashlib
import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.data.errors import InputError
from madbench.data.scenario import load_scenarios
from madbench.debate.protocols.self_consistency import Options
from madbench.runner import matching
from madbench.runner.batch import RunSpec, expand, load_batch, resolve_configs, resolve_scenarios
from madbench.runner.cli import main
from madbench.runner.pipeline import run_id_for
from madbench.sim.provider import SimProvider

ROOT = Path(__file__).resolve().parents[2]
BATCH = ROOT / "configs" / "batches" / "equal-compute.yaml"
TICKERS = ["AAA", "BBB", "CCC", "DDD"]
PRICED = "openai/gpt-4o-mini"  # in litellm's offline cost map: the simulator's usage has a known cost
SC = ["self-consistency-3", "self-consistency-3-majority", "self-consistency-3-median"]


def write_scenarios(tmp_path: Path) -> Path:
    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS, "constraints": {"max_weight": 0.6, "min_holdings": 2}}
        for q in ("2021Q3", "2021Q4")]}))
    return scen


def batch_copy(tmp_path: Path, pack_dir: Path, **over) -> Path:
    """The ready batch on two synthetic scenarios: its configs and pairs as they are, small and local."""
    spec = yaml.safe_load(BATCH.read_text())
    spec["configs"] = [str((BATCH.parent / c).resolve()) for c in spec["configs"]]
    if "configs" in over:  # other arms: the batch's declared pairs name configs they may not have
        over.setdefault("pairs", [])
    spec |= {"scenarios": {"file": str(write_scenarios(tmp_path))}, "pack": str(pack_dir),
             "results_dir": str(tmp_path / "results"), "max_in_flight": 4, "workers": 1, "retries": 0} | over
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def sc_config(folder: Path, **options) -> Path:
    """self-consistency-macro with other options, written in ``folder``."""
    data = yaml.safe_load((ROOT / "configs" / "debate" / "self-consistency-macro.yaml").read_text())
    data |= {"name": "sc-matched", "options": options}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sc-matched.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def resolve_one(tmp_path: Path, config: Path, model="rules/auto"):
    spec = {"name": "m", "scenarios": {"file": str(write_scenarios(tmp_path))}, "configs": [str(config)], "model": model}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(spec))
    spec_, base = load_batch(path)
    return resolve_configs(spec_, base, str(path))[0]


@pytest.mark.slow
def test_the_batch_runs_offline_and_stats_puts_tokens_and_cost_beside_each_difference(make_pack, tmp_path, capsys):
    batch = batch_copy(tmp_path, make_pack(tickers=tuple(TICKERS)))
    assert main(["run", str(batch), "--dry-run", "--json"]) == 0
    estimate = {c["config"]: c for c in json.loads(capsys.readouterr().out)["configs"]}
    assert estimate["self-consistency-3"]["calls"] == 2 * 3  # one round of the agents: the rest is the scenario's
    args = ["run", str(batch), "--model", "rules/auto", "--cache-dir", str(tmp_path / "cache"), "--quiet"]
    assert main(args) == 0, capsys.readouterr().err
    root = tmp_path / "results" / "equal-compute@rules-auto"
    runs = pd.read_parquet(root / "runs.parquet")
    assert len(runs) == 10 and (runs.status == "ok").all(), runs[["config", "error"]]
    sc = runs[runs.config.isin(SC)]
    # rule-based answers count no tokens: each matched run's target is 0, so it stops after its first draw
    assert (sc.x_target_generated_tokens == 0).all() and (sc.calls == 1).all()
    assert set(sc.method) == {"self_consistency:mean", "self_consistency:majority", "self_consistency:median"}
    capsys.readouterr()
    assert main(["stats", str(root), "--metric", "sharpe,total_return_pct"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("| metric | a | b |"))
    assert "| tokens_a | tokens_b | cost_usd_a | cost_usd_b |" in header
    paired = pd.read_csv(root / "stats" / "paired.csv")
    assert len(paired) == 6 * 2 and "Comparisons: the batch's declared pairs" in out
    # the per-scenario table is there, its ratios undefined (0 ÷ 0), not 1 and not 0
    match = pd.read_csv(root / "stats" / "compute_match.csv")
    assert len(match) == 5 * 2 and match.ratio_generated.isna().all() and "Equal compute per scenario" in out
    assert set(match.matched_on) == {"generated"}
    # …and so a rules/auto run is no pilot to match tokens on; nor is a config the pilot did not run
    with pytest.raises(InputError, match="record no tokens for a proposal"):
        resolve_one(tmp_path, sc_config(tmp_path / "c1", match_tokens_of="causal-debate-3", pilot=str(root)))
    with pytest.raises(InputError, match=r"has no finished run of 'nope' \(it has: causal-debate-3, mean3-causal"):
        resolve_one(tmp_path, sc_config(tmp_path / "c2", match_tokens_of="nope", pilot=str(root)))


@pytest.mark.slow
def test_matched_baselines_spend_the_debates_generated_tokens_per_scenario(make_pack, tmp_path, capsys):
    """Against the simulator (it counts tokens): each matched arm's generated tokens over the debate's, per
    scenario, within 1.00 ± 0.05, shown by `madbench stats`."""
    pack_dir = make_pack(tickers=tuple(TICKERS))
    with SimProvider() as sim:
        model = {"model": PRICED, "api_base": sim.url, "send_context": True, "limits": {"max_concurrency": 8}}
        batch = batch_copy(tmp_path, pack_dir, model=model)
        assert main(["run", str(batch), "--cache-dir", str(tmp_path / "cache"), "--quiet"]) == 0, capsys.readouterr().err
    root = tmp_path / "results" / "equal-compute"
    runs = pd.read_parquet(root / "runs.parquet")
    assert len(runs) == 10 and (runs.status == "ok").all(), runs[["config", "error"]]
    debate = runs[runs.config == "causal-debate-3"].set_index("scenario_id").completion_tokens
    for name in SC:
        arm = runs[runs.config == name].set_index("scenario_id")
        assert (arm.x_target_generated_tokens == debate.reindex(arm.index)).all()  # the target is the debate's count
        assert (arm.calls > 3).all()  # more than one round of the agents
    capsys.readouterr()
    assert main(["stats", str(root), "--metric", "sharpe"]) == 0
    out = capsys.readouterr().out
    match = pd.read_csv(root / "stats" / "compute_match.csv")
    ratios = match[match.treatment == "causal-debate-3"]
    assert len(ratios) == 2 * 2  # the two arms paired with the debate × two scenarios
    assert ratios.ratio_generated.between(0.95, 1.05).all(), ratios[["control", "scenario_id", "ratio_generated"]]
    # dollars are what each arm's answers cost: the majority arm reuses the mean arm's draws and costs as much
    assert (ratios.cost_control > 0).all() and ratios.groupby("scenario_id").cost_control.nunique().eq(1).all()
    print(out[out.index("Equal compute per scenario"):], file=sys.stderr)  # the measured ratios, for the record
    assert "self-consistency-3 ÷ causal-debate-3 (matched on generated): ratio min–max generated" in out


def unit_arms(folder: Path) -> list[str]:
    """self-consistency-3 matched on each unit, written in ``folder``: sc-generated, sc-total, sc-cost."""
    folder.mkdir(parents=True, exist_ok=True)
    base = yaml.safe_load((ROOT / "configs" / "debate" / "self-consistency-3.yaml").read_text())
    paths = []
    for unit in ("generated", "total", "cost"):
        data = base | {"name": f"sc-{unit}", "options": base["options"] | {"match": unit}}
        (folder / f"sc-{unit}.yaml").write_text(yaml.safe_dump(data))
        paths.append(str(folder / f"sc-{unit}.yaml"))
    return paths


@pytest.mark.slow
def test_each_match_unit_spends_the_debates_budget_in_that_unit_per_scenario_judge_and_crit_included(
        make_pack, tmp_path, capsys):
    """Against the simulator (it counts tokens and its model has a price): a baseline matched on generated tokens,
    one on total tokens and one on cost each come within 1.00 ± 0.05 of the debate's spend in its own unit on every
    scenario, the debate's spend being every call of its run (its judge and CRIT calls too); `madbench stats` shows
    the three ratios of each."""
    pack_dir = make_pack(tickers=tuple(TICKERS))
    debate = str(ROOT / "configs" / "debate" / "causal-debate-3.yaml")
    arms = unit_arms(tmp_path / "configs")
    pairs = [{"control": f"sc-{u}", "treatment": "causal-debate-3",
              "factor": ["protocol", "options", "rounds", "aggregation", "interventions"]}
             for u in ("generated", "total", "cost")]
    with SimProvider() as sim:
        model = {"model": PRICED, "api_base": sim.url, "send_context": True, "limits": {"max_concurrency": 8}}
        batch = batch_copy(tmp_path, pack_dir, name="units", configs=[debate, *arms], pairs=pairs, model=model)
        assert main(["run", str(batch), "--cache-dir", str(tmp_path / "cache"), "--quiet"]) == 0, capsys.readouterr().err
    root = tmp_path / "results" / "units"
    runs, calls = pd.read_parquet(root / "runs.parquet"), pd.read_parquet(root / "calls.parquet")
    assert len(runs) == 4 * 2 and (runs.status == "ok").all(), runs[["config", "error"]]
    # the debate's budget is every call of its run: its judge and CRIT calls are part of it
    mine = calls[calls.run_id.isin(runs.loc[runs.config == "causal-debate-3", "run_id"])]
    assert {"judge", "crit"} <= set(mine.phase) and (mine.completion_tokens[mine.phase.isin(["judge", "crit"])] > 0).all()
    spent = {"generated": mine.completion_tokens, "total": mine.prompt_tokens + mine.completion_tokens,
             "cost": mine.cost_usd}
    by_scenario = mine.run_id.map(runs.set_index("run_id").scenario_id)
    for unit, column in (("generated", "x_target_generated_tokens"), ("total", "x_target_total_tokens"),
                         ("cost", "x_target_cost_usd")):
        arm = runs[runs.config == f"sc-{unit}"].set_index("scenario_id")
        debate_spend = spent[unit].groupby(by_scenario).sum().reindex(arm.index)
        assert arm[column].to_numpy() == pytest.approx(debate_spend.to_numpy()), unit  # the target is the debate's
        assert (arm.calls > 3).all()  # more than one round of the agents
    capsys.readouterr()
    assert main(["stats", str(root), "--metric", "sharpe"]) == 0
    out = capsys.readouterr().out
    match = pd.read_csv(root / "stats" / "compute_match.csv").set_index("control")
    assert len(match) == 3 * 2  # three arms × two scenarios
    for unit in ("generated", "total", "cost"):
        rows = match.loc[f"sc-{unit}"]
        assert (rows.matched_on == unit).all()
        assert rows[f"ratio_{unit}"].between(0.95, 1.05).all(), (unit, rows[["scenario_id", f"ratio_{unit}"]])
        assert rows[["ratio_generated", "ratio_total", "ratio_cost"]].notna().all().all()
        assert f"sc-{unit} ÷ causal-debate-3 (matched on {unit}): ratio min–max generated" in out
    # matched on more than generated tokens, a baseline draws more: total and cost weigh the debate's long prompts
    assert (match.loc["sc-total"].calls_control.to_numpy() > match.loc["sc-generated"].calls_control.to_numpy()).all()
    assert "| ratio generated | ratio total | ratio cost | ratio calls |" in out
    print(out[out.index("Equal compute per scenario"):], file=sys.stderr)  # the measured ratios, for the record


#: sha256 of the sorted (config|scenario|replicate, run id) pairs of configs/batches/equal-compute.yaml, expanded,
#: and of its matched runs given targets 1000 + the scenario's position: computed before `match` existed.
EXPANDED_IDS = "d7d2450f7373431ac614782a7b2005d10f513d684e13a7d3a29e0e07be31871e"
TARGETED_IDS = "584a75f2f26bc9171866cc789697875f86e1c8e289f3f4a57cb95fb8736efec2"


def _digest(runs) -> str:
    ids = sorted((f"{r.config.name}|{r.scenario.id}|{r.sample_index}", r.run_id) for r in runs)
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()


def test_the_equal_compute_batchs_run_ids_are_what_they_were_before_match_existed(monkeypatch, tmp_path):
    spec, base = load_batch(BATCH)
    scenarios = resolve_scenarios(spec, base, None, "batch")
    runs = expand(spec, scenarios, resolve_configs(spec, base, "batch"))
    assert len(runs) == 5 * 35 and _digest(runs) == EXPANDED_IDS
    spends = {("causal-debate-3", s.id, 0): 1000 + i for i, s in enumerate(scenarios)}
    monkeypatch.setattr(matching, "spent_by_run", lambda root, unit="generated": spends)
    _, later = matching.split(runs)
    targeted = matching.with_targets(later, tmp_path)
    assert len(targeted) == 3 * 35 and _digest(targeted) == TARGETED_IDS
    # `match: generated` written out is the default: the same runs; another unit is another run
    run = later[0]
    def written(unit):
        config = run.config.model_copy(update={"options": run.config.options | {"match": unit}})
        return matching.with_targets([RunSpec(run.run_id, run.scenario, config, 0)], tmp_path)[0]
    assert written("generated").run_id == targeted[0].run_id
    assert written("total").run_id != targeted[0].run_id and written("total").config.options["match"] == "total"


@pytest.mark.parametrize("options, message", [
    ({"samples": 3, "match": "total"}, "match: total says what match_generated_of or targets are measured in"),
    ({"match_generated_of": "d", "pilot": "p", "match": "cost"}, "match: cost is matched within the batch"),
    ({"match_generated_of": "d", "match": "tokens"}, "Input should be 'generated', 'total' or 'cost'"),
])
def test_a_match_unit_without_a_batch_match_or_with_a_pilot_is_refused(options, message):
    with pytest.raises(ValueError, match=message):
        Options.model_validate(options)


def test_a_missing_pilot_is_named_when_the_batch_loads(tmp_path):
    with pytest.raises(InputError, match="options.pilot: no runs.parquet and calls.parquet in"):
        resolve_one(tmp_path, sc_config(tmp_path / "c", match_tokens_of="causal-debate-3", pilot="../no-such-results"))


@pytest.mark.slow
def test_match_tokens_of_picks_n_from_a_pilots_calls_and_the_runs_then_spend_alike(make_pack, tmp_path, capsys):
    pack_dir = make_pack(tickers=tuple(TICKERS))
    with SimProvider() as sim:
        model = {"model": PRICED, "api_base": sim.url, "send_context": True, "limits": {"max_concurrency": 8}}
        debate = str(ROOT / "configs" / "debate" / "causal-debate-3.yaml")
        pilot = batch_copy(tmp_path, pack_dir, name="pilot", configs=[debate], model=model)
        assert main(["run", str(pilot), "--cache-dir", str(tmp_path / "cache"), "--quiet"]) == 0, capsys.readouterr().err
        root = tmp_path / "results" / "pilot"
        runs, calls = pd.read_parquet(root / "runs.parquet"), pd.read_parquet(root / "calls.parquet")
        tokens = calls.prompt_tokens + calls.completion_tokens
        per_run = tokens.groupby(calls.run_id).sum().mean()
        per_proposal = tokens[calls.phase == "propose"].mean()
        n = round(per_run / per_proposal)
        assert len(runs) == 2 and per_proposal > 0 and 10 < n < 60
        # the pilot path is read relative to the config file; the resolved config keeps N, not the path
        config = sc_config(tmp_path / "configs", match_tokens_of="causal-debate-3", pilot="../results/pilot", combine="mean")
        resolved = resolve_one(tmp_path, config, model=PRICED)
        assert resolved.options == {"samples": n, "combine": "mean"}
        assert f"N = {n} samples matched to causal-debate-3" in resolved.description
        explicit = resolve_one(tmp_path, sc_config(tmp_path / "c3", samples=n, combine="mean"), model=PRICED)
        s = load_scenarios(tmp_path / "scenarios.yaml")[0]
        assert run_id_for(s, resolved, 0) == run_id_for(s, explicit, 0)  # the run identity is N's, matched or given
        # the matched baseline beside the debate, in the pilot's own results: the debate runs are reused
        both = batch_copy(tmp_path, pack_dir, name="pilot", configs=[debate, str(config)], model=model)
        assert main(["run", str(both), "--cache-dir", str(tmp_path / "cache"), "--quiet"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["stats", str(root), "--metric", "sharpe", "--json"]) == 0
    pair = json.loads(capsys.readouterr().out)["paired"][0]
    assert {pair["a"], pair["b"]} == {"causal-debate-3", "sc-matched"} and pair["n"] == 2
    spent = {pair["a"]: pair["tokens_a"], pair["b"]: pair["tokens_b"]}
    assert spent["causal-debate-3"] == pytest.approx(per_run)
    # N proposals come within half a proposal of the debate's tokens (their lengths vary a little by scenario)
    assert abs(spent["sc-matched"] - spent["causal-debate-3"]) <= 0.5 * per_proposal + 0.05 * per_run
    assert pair["cost_usd_a"] > 0 and pair["cost_usd_b"] > 0
